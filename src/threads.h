/* The one OpenMP shim: everything that asks about threads goes through here, so the
 * package builds and runs (serially) without OpenMP. Cython's prange compiles to
 * "#pragma omp" guarded by _OPENMP, so it degrades the same way.
 *
 * Also the two OS services that the shim's run loop needs around its threads: a fork hook
 * (GNU libgomp's thread pool does not survive fork(), src/_cpu.pyx runs a forked child serially)
 * and a monotonic clock (how often the run loop looks for Ctrl-C). */
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

/* A flag that threads set and poll inside a parallel region (relaxed: it only has to be seen soon). */
#if defined(__GNUC__) || defined(__clang__)
static inline int fd_flag_get(const int *flag) { return __atomic_load_n(flag, __ATOMIC_RELAXED); }
static inline void fd_flag_set(int *flag) { __atomic_store_n(flag, 1, __ATOMIC_RELAXED); }
#else /* MSVC: aligned int accesses are atomic; volatile keeps them inside the loop */
static inline int fd_flag_get(const int *flag) { return *(const volatile int *)flag; }
static inline void fd_flag_set(int *flag) { *(volatile int *)flag = 1; }
#endif

#ifdef _WIN32
#include <windows.h>
/* Windows has no fork(). */
static inline int fd_at_fork_child(void (*child)(void)) { (void)child; return 0; }
static inline long long fd_monotonic_ns(void) {
    LARGE_INTEGER now, frequency;
    QueryPerformanceCounter(&now);
    QueryPerformanceFrequency(&frequency);
    return (long long)((double)now.QuadPart * 1e9 / (double)frequency.QuadPart);
}
#else
#include <pthread.h>
#include <time.h>
/* child() runs in the child of every fork() of this process, os.fork() and C callers alike
 * (os.register_at_fork would miss the latter). 0 on success. */
static inline int fd_at_fork_child(void (*child)(void)) { return pthread_atfork(NULL, NULL, child); }
static inline long long fd_monotonic_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}
#endif
#endif
