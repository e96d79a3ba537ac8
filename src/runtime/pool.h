/* fastdeconv's own thread pool: runs one call's tasks on the calling thread and helper threads.
 *
 * Why not OpenMP: on a machine busy with other processes, an OpenMP region's caller waits at the region's
 * end for a helper the OS has not scheduled yet, a descheduled thread's share is not taken by another,
 * GNU libgomp's idle threads spin (stealing the CPU the neighbours and our own caller need), and its pool
 * hangs after fork(). Here:
 *
 * - A job is (function, context, task count). The caller and the helpers claim tasks one at a time
 *   from one atomic counter, so a thread that the OS deschedules delays only the task it holds, and
 *   the others take the rest.
 * - The caller works from the start. When nothing is left to claim it waits only for tasks that
 *   helpers have claimed and are running: never for a helper that has not started. A helper that
 *   wakes late finds nothing left to claim (or a newer job: the counter carries the job's generation,
 *   so a late helper can never claim a task of the next job) and goes back to sleep.
 * - Helpers join a job without a lock: a compare-and-swap takes one of its seats (pool.c).
 * - Waiting is passive: helpers sleep on a condition variable between jobs and the caller on another
 *   for the last claimed tasks, after a bounded spin (up to 2 ms for the job's last tasks, then up to
 *   200 us for the next job), and spinning only while no other process's thread wants a CPU (pool.c
 *   says why).
 * - One job at a time: a caller that finds the pool running another thread's job runs its own tasks
 *   alone (those threads already keep the cores busy), so concurrent calls never wait for each other.
 * - fork(): the child has none of the helpers, so a pthread_atfork child handler empties the pool
 *   (fresh lock and condition variables, no helpers, a job of the parent's that was running closed);
 *   the child's next call starts its own.
 * - Helpers are started on demand (the largest job so far decides how many) and live until the process
 *   ends; they block every signal, so that signals go to the application's threads.
 *
 * Raw C, int status, no Python.h. POSIX threads, or Win32 (SRWLOCK, CONDITION_VARIABLE, _beginthreadex),
 * chosen at compile time in pool.c. It never fails: when a helper cannot be started the job runs on the
 * threads that exist, down to the caller alone.
 */
#ifndef FASTDECONV_POOL_H
#define FASTDECONV_POOL_H

#include <stddef.h>

/* Runs task `task` (0 <= task < ntasks) as participant `slot`: 0 is the caller, 1..participants-1 the
 * helpers (at most one task at a time per slot, so a per-slot workspace is private). Returns 0, or
 * nonzero to stop the job: no task starts after it (the running ones finish). */
typedef int (*fd_pool_task_fn)(void *context, ptrdiff_t task, int slot);

enum { FD_POOL_DONE = 0, FD_POOL_STOPPED = 1 };

/* Runs every task of the job once, on at most `participants` threads (the caller included), and returns
 * when all that started have finished: FD_POOL_DONE, or FD_POOL_STOPPED when a task function asked to
 * stop (then some tasks never ran). Thread-safe; a task function must not call it. Jobs of more than
 * FD_POOL_MAX_TASKS tasks run on the caller alone. */
#define FD_POOL_MAX_TASKS 0x7fffffffL
int fd_pool_run(ptrdiff_t ntasks, int participants, fd_pool_task_fn fn, void *context);

/* Helper threads started in this process (they sleep between jobs); for tests and show_config. */
int fd_pool_helpers(void);

/* Threads of other processes (or of this one, outside the pool's current jobs) that are running or
 * ready to run right now, machine-wide: Linux's /proc/loadavg "running" count less the calling thread
 * and the pool's awake helpers, sampled at most once per millisecond; the smaller of the last two
 * samples, so that a thread that runs for less than that (a kernel worker) does not count. -1 where
 * unknown (not Linux).
 * The shim runs a default-threads call on fewer threads when the CPUs are taken (a helper that the OS
 * deschedules while it holds a task makes the caller wait for it). */
int fd_pool_others_running(void);

/* The threading API the pool was compiled for: "pthreads" or "win32". */
const char *fd_pool_backend(void);

/* A monotonic clock in nanoseconds: how often the shim's calling thread looks for Ctrl-C. (Here rather
 * than in a header of its own: a src/threads.h would shadow C11's <threads.h>, which Cython's generated
 * code includes under -std=c11 and later.) */
long long fd_monotonic_ns(void);

#endif
