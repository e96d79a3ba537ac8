/* The one OpenMP shim: everything that asks about threads goes through here, so the
 * package builds and runs (serially) without OpenMP. Cython's prange compiles to
 * "#pragma omp" guarded by _OPENMP, so it degrades the same way. */
#ifndef FASTDECONV_THREADS_H
#define FASTDECONV_THREADS_H
#ifdef _OPENMP
#include <omp.h>
static inline int fd_openmp_enabled(void) { return 1; }
static inline int fd_omp_max_threads(void) { return omp_get_max_threads(); }
static inline int fd_omp_version(void) { return _OPENMP; }
#else
static inline int fd_openmp_enabled(void) { return 0; }
static inline int fd_omp_max_threads(void) { return 1; }
static inline int fd_omp_version(void) { return 0; }
#endif
#endif
