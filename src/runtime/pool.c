/* fastdeconv's thread pool (see pool.h for the design and why).
 *
 * State. One pool per process, `pool` below. A job's caller writes its description (fn, context,
 * ntasks) and then publishes it through three atomic words, each (generation << 32) | a count:
 *   seats     helpers that may still join (participants - 1 when posted, 0 once the caller has nothing
 *             left to claim). A helper joins by taking one with a compare-and-swap that fails when the
 *             generation is not the one it saw posted or none is left; the count it took is its slot.
 *   claim     tasks not yet claimed. A participant claims the task ntasks - count the same way, so a
 *             helper that joined job g can never take a task of job g+1.
 *   posted    (32 bits) the newest job's generation, which spinning helpers watch.
 * and three more atomics: `finished` (tasks of the current job that ended, run or skipped after a
 * stop: the caller returns when it reaches ntasks, and the participant that finishes the last task
 * wakes it), `ended` (the generation of the newest job whose tasks have all finished, which helpers that
 * ran out of tasks watch) and `stop` (a task function asked to stop: the rest are claimed and skipped). `busy` says a caller
 * owns the pool; a second caller runs its job alone. `lock` guards only sleeping and waking: the helper
 * count, the sleepers and the condition variables.
 *
 * Joining takes no lock. A helper reads the job's description only after it claimed one of its tasks
 * and before that task's `finished` increment: the job cannot end in between (its caller waits for that
 * increment), so the description is the job's own, and the job's memory (the caller's stack) is never
 * used after fd_pool_run returns. (With a lock taken to join, the helpers that a job wakes at once queue
 * on it, each one that finds it taken sleeping in the kernel until the holder wakes it: a chain of
 * wake-ups at the start of every call.)
 *
 * Generations are 32 bits: a helper would have to stall for 2^32 jobs to mistake a later job for its
 * own. Task indices are 32 bits: larger jobs run on the caller alone (FD_POOL_MAX_TASKS). */
#if !defined(_WIN32) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L /* pthreads, pthread_sigmask and clock_gettime under -std=c99 */
#endif
#include "pool.h"

#include <stdint.h>

/* ------------------------------------------------------------------ atomics (compiler) */
#if defined(__GNUC__) || defined(__clang__)
typedef int64_t fd_atomic64;
static inline int64_t atomic_load64(fd_atomic64 *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static inline void atomic_store64(fd_atomic64 *p, int64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
static inline int atomic_cas64(fd_atomic64 *p, int64_t expected, int64_t desired) {
    return __atomic_compare_exchange_n(p, &expected, desired, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}
static inline int64_t atomic_increment64(fd_atomic64 *p) { return __atomic_add_fetch(p, 1, __ATOMIC_ACQ_REL); }
static inline int atomic_load32(int *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static inline void atomic_store32(int *p, int v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
static inline int atomic_cas32(int *p, int expected, int desired) {
    return __atomic_compare_exchange_n(p, &expected, desired, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}
#elif defined(_MSC_VER)
#include <windows.h>
/* Interlocked* are full barriers; a 0-to-0 compare-exchange is an atomic load. */
typedef volatile LONG64 fd_atomic64;
static inline int64_t atomic_load64(fd_atomic64 *p) { return InterlockedCompareExchange64(p, 0, 0); }
static inline void atomic_store64(fd_atomic64 *p, int64_t v) { InterlockedExchange64(p, v); }
static inline int atomic_cas64(fd_atomic64 *p, int64_t expected, int64_t desired) {
    return InterlockedCompareExchange64(p, desired, expected) == expected;
}
static inline int64_t atomic_increment64(fd_atomic64 *p) { return InterlockedIncrement64(p); }
static inline int atomic_load32(int *p) { return InterlockedCompareExchange((volatile LONG *)p, 0, 0); }
static inline void atomic_store32(int *p, int v) { InterlockedExchange((volatile LONG *)p, v); }
static inline int atomic_cas32(int *p, int expected, int desired) {
    return InterlockedCompareExchange((volatile LONG *)p, desired, expected) == expected;
}
#else
#error "fastdeconv's thread pool needs GCC/Clang __atomic builtins or MSVC's Interlocked functions"
#endif

/* ------------------------------------------------------------------ threads (operating system) */
#ifdef _WIN32
#include <process.h>
#include <windows.h>
typedef SRWLOCK fd_lock;
typedef CONDITION_VARIABLE fd_cond;
#define FD_LOCK_INIT SRWLOCK_INIT
#define FD_COND_INIT CONDITION_VARIABLE_INIT
static void lock(fd_lock *l) { AcquireSRWLockExclusive(l); }
static void unlock(fd_lock *l) { ReleaseSRWLockExclusive(l); }
static void cond_wait(fd_cond *c, fd_lock *l) { SleepConditionVariableSRW(c, l, INFINITE, 0); }
static void cond_signal(fd_cond *c) { WakeConditionVariable(c); }
static unsigned __stdcall helper_entry(void *arg);
/* Windows has no fork(): nothing to reset. */
static int platform_init(void) { return 0; }
static int start_helper(void) {
    uintptr_t handle = _beginthreadex(NULL, 0, helper_entry, NULL, 0, NULL);
    if (handle == 0) return -1;
    CloseHandle((HANDLE)handle); /* detached: helpers live until the process ends */
    return 0;
}
const char *fd_pool_backend(void) { return "win32"; }
long long fd_monotonic_ns(void) {
    LARGE_INTEGER now, frequency;
    QueryPerformanceCounter(&now);
    QueryPerformanceFrequency(&frequency);
    return (long long)((double)now.QuadPart * 1e9 / (double)frequency.QuadPart);
}
#else
#include <pthread.h>
#include <signal.h>
#include <time.h>
typedef pthread_mutex_t fd_lock;
typedef pthread_cond_t fd_cond;
#define FD_LOCK_INIT PTHREAD_MUTEX_INITIALIZER
#define FD_COND_INIT PTHREAD_COND_INITIALIZER
static void lock(fd_lock *l) { pthread_mutex_lock(l); }
static void unlock(fd_lock *l) { pthread_mutex_unlock(l); }
static void cond_wait(fd_cond *c, fd_lock *l) { pthread_cond_wait(c, l); }
static void cond_signal(fd_cond *c) { pthread_cond_signal(c); }
static void *helper_entry(void *arg);
static void at_fork_prepare(void);
static void at_fork_parent(void);
static void at_fork_child(void);
static pthread_once_t fork_handlers_once = PTHREAD_ONCE_INIT;
static int fork_handlers_status = -1;
static void install_fork_handlers(void) {
    fork_handlers_status = pthread_atfork(at_fork_prepare, at_fork_parent, at_fork_child);
}
/* 0 once the fork handlers are in place; without them (pthread_atfork failed: ENOMEM) no helper is
 * started, since a forked child could inherit a held lock. */
static int platform_init(void) {
    pthread_once(&fork_handlers_once, install_fork_handlers);
    return fork_handlers_status;
}
static int start_helper(void) {
    pthread_attr_t attr;
    pthread_t thread;
    sigset_t all, previous;
    int status;
    if (pthread_attr_init(&attr) != 0) return -1;
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    /* The helper inherits this mask: signals go to the application's own threads (Python's main one). */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &previous);
    status = pthread_create(&thread, &attr, helper_entry, NULL);
    pthread_sigmask(SIG_SETMASK, &previous, NULL);
    pthread_attr_destroy(&attr);
    return status == 0 ? 0 : -1;
}
const char *fd_pool_backend(void) { return "pthreads"; }
long long fd_monotonic_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}
#endif

/* ------------------------------------------------------------------ the pool */
static struct {
    fd_lock lock;
    fd_cond work; /* helpers sleep here between jobs */
    fd_cond done; /* the caller sleeps here for the last claimed tasks */
    int helpers;  /* started (and alive: they never exit), under lock */
    /* the current job: written by its caller before it publishes `seats` and `claim` */
    fd_pool_task_fn fn;
    void *context;
    ptrdiff_t ntasks;
    /* atomics */
    fd_atomic64 seats, claim, finished;
    int posted;   /* the newest job's generation; written under lock, so that a helper can sleep on it */
    int ended;    /* the generation of the newest job whose tasks have all finished */
    int stop, busy;
    int awake;    /* helpers not asleep (in a job, or spinning for the next), for fd_pool_others_running */
    int waking;   /* helpers signalled and not yet running, for fd_pool_others_running; under lock */
    int sleeping; /* helpers waiting on `work`; written under lock */
} pool = {FD_LOCK_INIT, FD_COND_INIT, FD_COND_INIT, 0, NULL, NULL, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};

/* Spinning. Waking a sleeping thread costs a system call on each side, which a call of 0.1 ms cannot
 * afford on a many-core machine. So a participant that runs out of tasks watches the job's last tasks
 * (the caller) or its end (a helper) for up to FD_POOL_TAIL_SPIN_NS, and a helper then watches for the
 * next job for FD_POOL_SPIN_NS, before it sleeps. The tail is a task at most, and a task about a quarter
 * of a thread's share: 2 ms covers calls of up to about 8 ms, where a wake-up still shows. (With the tail
 * spin as short as the other, the helpers that ran out of tasks first slept in almost every call and were
 * woken one after another at the start of the next.) Only while no other process's thread is running or
 * waiting for a CPU (fd_pool_others_running, sampled at most once per millisecond): on a busy machine a
 * spinning thread takes the CPU that the busy neighbours and our own working threads need, so there
 * everyone sleeps at once. (tests/c/build.sh also builds it with 0, so that its tests take the sleeping
 * paths.) */
#ifndef FD_POOL_SPIN_NS
#define FD_POOL_SPIN_NS 200000LL
#endif
#define FD_POOL_TAIL_SPIN_NS (10 * FD_POOL_SPIN_NS)

static inline void cpu_relax(void) {
#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
    __builtin_ia32_pause();
#elif defined(_MSC_VER) && (defined(_M_X64) || defined(_M_IX86))
    YieldProcessor();
#endif
}

static int machine_idle(void);

/* Spin until `done(arg)` or `ns` nanoseconds have passed; returns done(arg). */
static int spin_until(int (*done)(const void *), const void *arg, long long ns) {
    if (done(arg)) return 1;
    if (!machine_idle()) return 0;
    const long long deadline = fd_monotonic_ns() + ns;
    for (;;) {
        for (int i = 0; i < 64; i++) {
            cpu_relax();
            if (done(arg)) return 1;
        }
        if (fd_monotonic_ns() >= deadline) return done(arg);
    }
}

static int job_posted_after(const void *joined) {
    return (uint32_t)atomic_load32(&pool.posted) != *(const uint32_t *)joined;
}

/* Job `*seen` has ended, or a newer one was posted. */
static int job_ended(const void *seen) {
    return (uint32_t)atomic_load32(&pool.ended) == *(const uint32_t *)seen || job_posted_after(seen);
}

static int job_finished(const void *ntasks) { return atomic_load64(&pool.finished) == *(const ptrdiff_t *)ntasks; }

static int64_t job_word(uint32_t generation, ptrdiff_t count) { return (int64_t)(((uint64_t)generation << 32) | (uint64_t)count); }

/* Takes one of the count of `word` (seats or claim) if it is job `generation`'s and not zero: returns the
 * count before (>= 1), or 0. */
static ptrdiff_t take_one(fd_atomic64 *word, uint32_t generation) {
    int64_t seen = atomic_load64(word);
    for (;;) {
        if ((uint32_t)((uint64_t)seen >> 32) != generation || (seen & 0xffffffff) == 0) return 0;
        if (atomic_cas64(word, seen, seen - 1)) return (ptrdiff_t)(seen & 0xffffffff);
        seen = atomic_load64(word);
    }
}

/* Claim and run (or, after a stop, skip) tasks of job `generation` as participant `slot` until none is
 * left. */
static void work_on(uint32_t generation, int slot) {
    for (;;) {
        const ptrdiff_t unclaimed = take_one(&pool.claim, generation);
        if (unclaimed == 0) return;
        /* The job cannot end before this task's `finished` increment: its description is its own. */
        const ptrdiff_t ntasks = pool.ntasks;
        if (!atomic_load32(&pool.stop) && pool.fn(pool.context, ntasks - unclaimed, slot) != 0) atomic_store32(&pool.stop, 1);
        if (atomic_increment64(&pool.finished) == ntasks) {
            /* The last task: wake the caller if it sleeps (it checks `finished` under the lock, so
             * taking the lock here means the wake-up cannot fall between its check and its sleep). */
            lock(&pool.lock);
            cond_signal(&pool.done);
            unlock(&pool.lock);
        }
    }
}

/* Wakes one sleeping helper for a job that has seats left; the caller holds the lock. */
static void wake_one(void) {
    atomic_store32(&pool.waking, pool.waking + 1);
    cond_signal(&pool.work);
}

static void helper_loop(void) {
    uint32_t seen = 0;   /* the newest job this helper has seen posted */
    for (;;) {
        if (!spin_until(job_posted_after, &seen, FD_POOL_SPIN_NS)) {
            lock(&pool.lock);
            atomic_store32(&pool.awake, pool.awake - 1);
            while ((uint32_t)pool.posted == seen) {
                atomic_store32(&pool.sleeping, pool.sleeping + 1);
                cond_wait(&pool.work, &pool.lock);
                atomic_store32(&pool.sleeping, pool.sleeping - 1);
            }
            if (pool.waking > 0) atomic_store32(&pool.waking, pool.waking - 1);
            atomic_store32(&pool.awake, pool.awake + 1);
            unlock(&pool.lock);
        }
        seen = (uint32_t)atomic_load32(&pool.posted);
        const ptrdiff_t seat = take_one(&pool.seats, seen);
        if (seat == 0) continue;   /* the job is closed or full: wait for the next */
        /* Wake-ups travel down a chain: a helper that joins wakes a sleeper while seats are left, so the
           caller signals once and starts working. */
        if (seat > 1 && atomic_load32(&pool.sleeping) > 0) {
            lock(&pool.lock);
            if (pool.sleeping > 0) wake_one();
            unlock(&pool.lock);
        }
        work_on(seen, (int)seat);
        spin_until(job_ended, &seen, FD_POOL_TAIL_SPIN_NS);   /* the others' last tasks */
    }
}
#ifdef _WIN32
static unsigned __stdcall helper_entry(void *arg) {
    (void)arg;
    helper_loop();
    return 0;
}
#else
static void *helper_entry(void *arg) {
    (void)arg;
    helper_loop();
    return NULL;
}

/* fork(): the lock is held across it, so the child's copy of the pool is consistent; the child has
 * none of the helpers (nor any job: only the forking thread exists there), so it starts empty with a
 * fresh lock and condition variables. The generation goes on counting. */
static void at_fork_prepare(void) { lock(&pool.lock); }
static void at_fork_parent(void) { unlock(&pool.lock); }
static void at_fork_child(void) {
    pthread_mutex_init(&pool.lock, NULL);
    pthread_cond_init(&pool.work, NULL);
    pthread_cond_init(&pool.done, NULL);
    pool.helpers = 0;
    /* a job of the parent's that was running at fork(): closed, so that the child's helpers (which join
       without the lock) cannot take a seat or a task of it */
    const uint32_t posted = (uint32_t)pool.posted;
    pool.seats = job_word(posted, 0);
    pool.claim = job_word(posted, 0);
    pool.busy = 0;
    pool.awake = 0;
    pool.waking = 0;
    pool.sleeping = 0;
}
#endif

static int run_alone(ptrdiff_t ntasks, fd_pool_task_fn fn, void *context) {
    for (ptrdiff_t task = 0; task < ntasks; task++)
        if (fn(context, task, 0) != 0) return FD_POOL_STOPPED;
    return FD_POOL_DONE;
}

int fd_pool_run(ptrdiff_t ntasks, int participants, fd_pool_task_fn fn, void *context) {
    if (ntasks <= 0) return FD_POOL_DONE;
    if (participants > ntasks) participants = (int)ntasks;
    if (participants <= 1 || ntasks > FD_POOL_MAX_TASKS || platform_init() != 0 || !atomic_cas32(&pool.busy, 0, 1))
        return run_alone(ntasks, fn, context);

    lock(&pool.lock);
    while (pool.helpers < participants - 1 && start_helper() == 0) {
        pool.helpers++;
        atomic_store32(&pool.awake, pool.awake + 1);   /* it starts by looking for this job */
    }
    const int seats = pool.helpers < participants - 1 ? pool.helpers : participants - 1;
    const uint32_t generation = (uint32_t)pool.posted + 1;
    pool.fn = fn;
    pool.context = context;
    pool.ntasks = ntasks;
    atomic_store32(&pool.stop, 0);
    atomic_store64(&pool.finished, 0);
    atomic_store64(&pool.claim, job_word(generation, ntasks));
    atomic_store64(&pool.seats, job_word(generation, seats));
    atomic_store32(&pool.posted, (int)generation);   /* spinning helpers join now */
    if (seats > 0 && pool.sleeping > 0) wake_one();   /* the first of the chain */
    unlock(&pool.lock);

    work_on(generation, 0);

    /* Nothing left to claim: close the job to late helpers and wait for the tasks still running. */
    atomic_store64(&pool.seats, job_word(generation, 0));
    if (!spin_until(job_finished, &ntasks, FD_POOL_TAIL_SPIN_NS)) {
        lock(&pool.lock);
        while (atomic_load64(&pool.finished) != ntasks) cond_wait(&pool.done, &pool.lock);
        unlock(&pool.lock);
    }
    atomic_store32(&pool.ended, (int)generation);
    const int stopped = atomic_load32(&pool.stop);
    atomic_store32(&pool.busy, 0);
    return stopped ? FD_POOL_STOPPED : FD_POOL_DONE;
}

int fd_pool_helpers(void) {
    lock(&pool.lock);
    const int helpers = pool.helpers;
    unlock(&pool.lock);
    return helpers;
}

/* ------------------------------------------------------------------ load */
#if defined(__linux__)
#include <fcntl.h>
#include <unistd.h>
static int loadavg_fd = -1;
static fd_atomic64 sampled_ns = -1000000000LL; /* when `latest` was sampled */
static int latest = -1; /* the newest sample's count */
static int others = -1; /* what fd_pool_others_running returns until the next sample */

/* /proc/loadavg is "0.52 0.58 0.59 3/1234 5678": the 4th field's numerator counts the threads running
 * or runnable now, machine-wide (the reader included). */
static int read_running(void) {
    char text[128];
    int fd = atomic_load32(&loadavg_fd);
    if (fd < 0) {
        fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
        if (fd < 0) return -1;
        if (!atomic_cas32(&loadavg_fd, -1, fd)) { /* another thread opened it first */
            close(fd);
            fd = atomic_load32(&loadavg_fd);
        }
    }
    const ssize_t n = pread(fd, text, sizeof text - 1, 0);
    if (n <= 0) return -1;
    text[n] = 0;
    const char *p = text;
    for (int field = 0; field < 3; field++) { /* skip the three load averages */
        while (*p && *p != ' ') p++;
        while (*p == ' ') p++;
    }
    if (*p < '0' || *p > '9') return -1;
    long running = 0;
    while (*p >= '0' && *p <= '9' && running < 1000000) running = running * 10 + (*p++ - '0');
    return *p == '/' ? (int)running : -1;
}

static int machine_idle(void) { return fd_pool_others_running() <= 0; }

int fd_pool_others_running(void) {
    const long long now = fd_monotonic_ns();
    if (now - atomic_load64(&sampled_ns) < 1000000) return atomic_load32(&others);
    atomic_store64(&sampled_ns, now);
    const int running = read_running();
    int count = -1;
    if (running >= 0) {   /* the pool's helpers that are awake or being woken are this process's */
        count = running - 1 - atomic_load32(&pool.awake) - atomic_load32(&pool.waking);
        if (count < 0) count = 0;
    }
    /* The smaller of this sample and the one before (at least 1 ms older): a thread that runs for less
       than that (a kernel worker) is not a neighbour that needs our CPUs, while a busy process shows in
       both. */
    const int before = atomic_load32(&latest);
    atomic_store32(&latest, count);
    const int result = count < 0 || before < 0 ? count : before < count ? before : count;
    atomic_store32(&others, result);
    return result;
}
#else
int fd_pool_others_running(void) { return -1; }
static int machine_idle(void) { return 1; }   /* unknown here: as OpenMP runtimes do, spin briefly */
#endif
