/* Standalone test of the thread pool (src/runtime/pool.c), built and run by tests/c/build.sh, also
 * under ThreadSanitizer and AddressSanitizer + UBSan there.
 *
 *   every task of a job runs exactly once, whatever the task count, the participants and however many
 *   threads submit jobs at once (several submitters: most of their jobs run on the caller alone);
 *   a participant's slot is below the job's participants, and no two tasks run in one slot at once;
 *   a task function that asks to stop stops the job: FD_POOL_STOPPED, no task runs twice, and the
 *   tasks claimed before the stop are still waited for;
 *   after fork() the child runs threaded jobs with fresh helpers (no hang), while the parent's
 *   submitter threads keep running (not on Windows, which has no fork(): the pool's Win32 branch is
 *   built with mingw-w64 and run under wine by .ci/windows.sh; the test's own threads are pthreads,
 *   winpthreads there). */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifndef _WIN32
#include <sys/wait.h>
#include <unistd.h>
#endif

#include "runtime/pool.h"

#define MAX_TASKS 3000
#define MAX_SLOTS 8

typedef struct {
    int runs[MAX_TASKS];   /* per task: how many times it ran (atomic) */
    int in_slot[MAX_SLOTS]; /* per slot: tasks running in it now (atomic; must stay <= 1) */
    int participants;
    int stop_at;            /* the task that asks to stop, or -1 */
    int errors;             /* atomic */
    unsigned spin;          /* work per task, so that helpers get a share */
} job;

static int task(void *context, ptrdiff_t t, int slot) {
    job *j = context;
    volatile unsigned sink = 0;
    if (slot < 0 || slot >= j->participants || slot >= MAX_SLOTS) {
        __atomic_add_fetch(&j->errors, 1, __ATOMIC_RELAXED);
        return 0;
    }
    if (__atomic_add_fetch(&j->in_slot[slot], 1, __ATOMIC_ACQ_REL) != 1) __atomic_add_fetch(&j->errors, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&j->runs[t], 1, __ATOMIC_ACQ_REL);
    for (unsigned i = 0; i < j->spin; i++) sink += i;
    __atomic_sub_fetch(&j->in_slot[slot], 1, __ATOMIC_ACQ_REL);
    return t == j->stop_at;
}

static unsigned next_random(unsigned *state) {
    *state = *state * 1103515245u + 12345u;
    return *state >> 16;
}

/* Run one random job; returns the number of problems found. */
static int check_job(unsigned *state, int verbose) {
    job *j = calloc(1, sizeof *j);
    if (j == NULL) return 1;
    const ptrdiff_t ntasks = (ptrdiff_t)(next_random(state) % 200);
    j->participants = 1 + (int)(next_random(state) % MAX_SLOTS);
    j->stop_at = next_random(state) % 5 == 0 && ntasks > 0 ? (int)(next_random(state) % ntasks) : -1;
    j->spin = next_random(state) % 3000;
    const int status = fd_pool_run(ntasks, j->participants, task, j);
    int problems = j->errors;
    for (ptrdiff_t t = 0; t < ntasks; t++) {
        const int runs = __atomic_load_n(&j->runs[t], __ATOMIC_ACQUIRE);
        if (runs > 1 || (j->stop_at < 0 && runs != 1)) problems++;
    }
    if (j->stop_at >= 0 && (status != FD_POOL_STOPPED || j->runs[j->stop_at] != 1)) problems++;
    if (j->stop_at < 0 && status != FD_POOL_DONE) problems++;
    if (problems && verbose)
        fprintf(stderr, "job of %td tasks on %d participants (stop at %d): %d problems\n", ntasks, j->participants,
                j->stop_at, problems);
    free(j);
    return problems;
}

typedef struct {
    unsigned seed;
    int jobs, problems;
} submitter;

static void *submit(void *arg) {
    submitter *s = arg;
    for (int i = 0; i < s->jobs; i++) s->problems += check_job(&s->seed, 1);
    return NULL;
}

static int run_submitters(int count, int jobs) {
    pthread_t threads[8];
    submitter s[8];
    int problems = 0;
    for (int i = 0; i < count; i++) {
        s[i].seed = 1234u + (unsigned)i;
        s[i].jobs = jobs;
        s[i].problems = 0;
        if (pthread_create(&threads[i], NULL, submit, &s[i]) != 0) return 1;
    }
    for (int i = 0; i < count; i++) {
        pthread_join(threads[i], NULL);
        problems += s[i].problems;
    }
    return problems;
}

/* A job of MAX_TASKS tasks, each long enough that helpers join: every task once, and helpers started. */
static int check_large_job(void) {
    job *j = calloc(1, sizeof *j);
    if (j == NULL) return 1;
    j->participants = 4;
    j->stop_at = -1;
    j->spin = 20000;
    int problems = fd_pool_run(MAX_TASKS, j->participants, task, j) != FD_POOL_DONE;
    for (int t = 0; t < MAX_TASKS; t++) problems += j->runs[t] != 1;
    problems += j->errors;
    free(j);
    return problems;
}

#ifndef _WIN32
typedef struct {
    volatile int stop;
    int problems;
} background;

static void *background_jobs(void *arg) {
    background *b = arg;
    unsigned seed = 99;
    while (!__atomic_load_n(&b->stop, __ATOMIC_ACQUIRE)) b->problems += check_job(&seed, 1);
    return NULL;
}

/* fork() while another thread submits jobs: the child's own jobs run (threaded, fresh helpers). */
static int check_fork(void) {
    background b = {0, 0};
    pthread_t thread;
    int problems = 0;
    if (pthread_create(&thread, NULL, background_jobs, &b) != 0) return 1;
    for (int i = 0; i < 20; i++) {
        const pid_t child = fork();
        if (child == 0) {
            int helpers_before = fd_pool_helpers();
            int bad = helpers_before != 0;
            bad += check_large_job();
            for (unsigned seed = 7, k = 0; k < 20; k++) bad += check_job(&seed, 1);
            bad += fd_pool_helpers() < 1;
            _exit(bad ? 1 : 0);
        }
        int status = 0;
        if (child < 0 || waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "fork %d: the child failed (status %d)\n", i, status);
            problems++;
        }
    }
    __atomic_store_n(&b.stop, 1, __ATOMIC_RELEASE);
    pthread_join(thread, NULL);
    return problems + b.problems;
}
#else
static int check_fork(void) { return 0; }   /* no fork() on Windows */
#endif

int main(int argc, char **argv) {
    /* "quick": fewer jobs; "nofork": no fork() (ThreadSanitizer cannot start threads in a child of a
     * multi-threaded process) */
    const int quick = argc > 1 && strcmp(argv[1], "quick") == 0;
    const int nofork = argc > 2 && strcmp(argv[2], "nofork") == 0;
    int problems = 0;
    unsigned seed = 1;
    for (int i = 0; i < (quick ? 200 : 2000); i++) problems += check_job(&seed, 1);
    problems += check_large_job();
    printf("pool: %d helpers started (%s)\n", fd_pool_helpers(), fd_pool_backend());
    problems += run_submitters(4, quick ? 100 : 1000);
    if (!nofork) problems += check_fork();
    if (problems) {
        printf("pool: %d problems\n", problems);
        return 1;
    }
    printf("pool: all checks passed\n");
    return 0;
}
