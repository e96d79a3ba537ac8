/* Instantiate the template named by FD_TEMPLATE (a "*.template.c" file) once for float
 * (fd_s... names) and once for double (fd_d... names); see templating.h. Include it with
 * FD_TEMPLATE defined, after the headers the template needs. */
#ifndef FD_TEMPLATE
#error "FD_TEMPLATE must name the template to instantiate"
#endif

#define FD_REAL float
#define FD_PREFIX s
#include FD_TEMPLATE
#undef FD_REAL
#undef FD_PREFIX

#define FD_REAL double
#define FD_PREFIX d
#include FD_TEMPLATE
#undef FD_REAL
#undef FD_PREFIX
