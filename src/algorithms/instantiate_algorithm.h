/* Instantiate the algorithm template named by FD_TEMPLATE (see algorithm.h): its type-independent
 * parts, its float and double parts (runtime/instantiate_types.h), then its descriptor. FD_TEMPLATE is
 * undefined at the end, ready for the next algorithm. */
#ifndef FD_TEMPLATE
#error "FD_TEMPLATE must name the algorithm template to instantiate"
#endif

#define FD_ALGORITHM_SHARED
#include FD_TEMPLATE
#undef FD_ALGORITHM_SHARED

#include "runtime/instantiate_types.h"

#define FD_ALGORITHM_DESCRIPTOR
#include FD_TEMPLATE
#undef FD_ALGORITHM_DESCRIPTOR

#undef FD_TEMPLATE
