/*
 * The native pool: threads that run one task together with the caller, for reads that decode
 * chunks on every core.  Python crosses into C once per read and releases the GIL once; the
 * pool's threads carry no Python state and block every signal, so signals stay with Python's
 * threads.
 *
 * A run hands the task to up to `threads - 1` workers and runs it on the caller too.  A task
 * takes its work from a shared counter, so the caller finishes the work alone if no worker
 * wakes in time; once the caller's own call returns, no worker starts the task any more, and
 * the run returns when the workers that did start have returned.  One run at a time: a second
 * caller meanwhile runs its task on its own thread rather than wait.
 *
 * fork(): the child has none of the workers; the pool starts them again on its first run.
 */
#include "oc_pool.h"

#include <pthread.h>
#include <signal.h>

#define MAX_WORKERS 63

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t run_lock = PTHREAD_MUTEX_INITIALIZER; /* one run at a time */
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static pthread_cond_t idle = PTHREAD_COND_INITIALIZER;
static int started;   /* workers started in this process */
static int tickets;   /* workers that may still join the current run */
static int running;   /* workers inside the current task */
static void (*task)(void *);
static void *task_arg;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static void *worker(void *unused)
{
    (void)unused;
    pthread_mutex_lock(&lock);
    for (;;) {
        while (tickets == 0) {
            pthread_cond_wait(&wake, &lock);
        }
        tickets--;
        running++;
        void (*fn)(void *) = task;
        void *arg = task_arg;
        pthread_mutex_unlock(&lock);
        fn(arg);
        pthread_mutex_lock(&lock);
        if (--running == 0) {
            pthread_cond_broadcast(&idle);
        }
    }
    return NULL;
}

static void before_fork(void)
{
    pthread_mutex_lock(&run_lock); /* a run in progress finishes first */
    pthread_mutex_lock(&lock);
}

static void after_fork_parent(void)
{
    pthread_mutex_unlock(&lock);
    pthread_mutex_unlock(&run_lock);
}

static void after_fork_child(void)
{
    /* The parent's workers may have been waiting on the condition variables: the child's copies
     * are made anew, as are the locks (held by this thread, the only one left). */
    started = tickets = running = 0;
    pthread_cond_init(&wake, NULL);
    pthread_cond_init(&idle, NULL);
    pthread_mutex_init(&lock, NULL);
    pthread_mutex_init(&run_lock, NULL);
}

static void install_fork_handlers(void)
{
    pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

/* Workers up to `want` (lock held); as many as could be started. */
static int start_workers(int want)
{
    if (want > MAX_WORKERS) {
        want = MAX_WORKERS;
    }
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* inherited by the new threads */
    while (started < want) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&t, &attr, worker, NULL);
        pthread_attr_destroy(&attr);
        if (rc != 0) {
            break; /* fewer workers: the caller does more of the work */
        }
        started++;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return started < want ? started : want;
}

void oc_pool_run(void (*fn)(void *), void *arg, int threads)
{
    pthread_once(&fork_once, install_fork_handlers);
    if (threads <= 1 || pthread_mutex_trylock(&run_lock) != 0) {
        fn(arg);
        return;
    }
    pthread_mutex_lock(&lock);
    int helpers = start_workers(threads - 1);
    task = fn;
    task_arg = arg;
    tickets = helpers;
    pthread_cond_broadcast(&wake);
    pthread_mutex_unlock(&lock);

    fn(arg);

    pthread_mutex_lock(&lock);
    tickets = 0; /* the work is done: late workers stay asleep */
    while (running > 0) {
        pthread_cond_wait(&idle, &lock);
    }
    task = NULL;
    task_arg = NULL;
    pthread_mutex_unlock(&lock);
    pthread_mutex_unlock(&run_lock);
}

int oc_pool_workers(void)
{
    pthread_mutex_lock(&lock);
    int n = started;
    pthread_mutex_unlock(&lock);
    return n;
}
