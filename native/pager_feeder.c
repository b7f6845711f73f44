/*
 * The feeder process of an array paged from an object store (oocarray/_storage/_zarr/
 * _feeder.py), started by the pager itself, the first time one of its fills needs it in this
 * process.  A scan that the process's own read-ahead hands its chunks over to in memory never
 * starts one (a new interpreter costs a second of CPU on a small machine); a forked child starts
 * one of its own, since the parent's pipes and answers are the parent's.
 *
 * It is started with posix_spawn (which runs no fork handlers and copies no address space), in
 * a process group of its own (a Ctrl-C meant for the program's loop does not take the fetching
 * from under the arrays it still reads), with no signal blocked, stdin and stdout the pipes,
 * stderr its log, and no other descriptor.  Its configuration (the location, with its
 * credentials) comes on stdin, never on the command line.  It exits when its request pipe ends;
 * the pager kills and waits for it when the array goes, or when its owner stops it first
 * (oc_pager_stop_feeder: a fill still waiting for it then fails at once).  One that ended by
 * itself (killed by the system, say) is waited for, and replaced by the next fill that needs
 * it.
 */
#include "pager_remote.h"
#include "oc_files.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

long long pg_mono_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void strings_free(char **v)
{
    for (size_t i = 0; v != NULL && v[i] != NULL; i++) {
        free(v[i]);
    }
    free(v);
}

static char **strings_copy(char *const *v)
{
    size_t n = 0;
    while (v[n] != NULL) {
        n++;
    }
    char **out = calloc(n + 1, sizeof *out);
    for (size_t i = 0; out != NULL && i < n; i++) {
        if ((out[i] = strdup(v[i])) == NULL) {
            strings_free(out);
            return NULL;
        }
    }
    return out;
}

void pg_feeder_spec_free(oc_feeder_spec *spec)
{
    strings_free(spec->argv);
    strings_free(spec->envp);
    free(spec->config);
    free(spec->log);
    memset(spec, 0, sizeof *spec);
}

int pg_feeder_spec_copy(oc_feeder_spec *to, const oc_feeder_spec *from)
{
    memset(to, 0, sizeof *to);
    if (from->argv == NULL || from->argv[0] == NULL || from->envp == NULL || from->log == NULL) {
        return EINVAL;
    }
    to->argv = strings_copy(from->argv);
    to->envp = strings_copy(from->envp);
    to->config = malloc(from->config_n ? from->config_n : 1);
    to->log = strdup(from->log);
    if (to->argv == NULL || to->envp == NULL || to->config == NULL || to->log == NULL) {
        pg_feeder_spec_free(to);
        return ENOMEM;
    }
    memcpy(to->config, from->config, from->config_n);
    to->config_n = from->config_n;
    return 0;
}

#define PG_P_PIDFD 3 /* waitid()'s idtype for a pidfd (Linux 5.4) */

/* A pidfd of this process's child `pid`, or -1 (a kernel before 5.3). */
static int open_pidfd(pid_t pid)
{
#ifdef SYS_pidfd_open
    return (int)syscall(SYS_pidfd_open, pid, 0);
#else
    (void)pid;
    return -1;
#endif
}

/* Killed and waited for.  Through its pidfd where there is one: a process that reaped it
 * behind our back (os.wait(), SIGCHLD ignored) leaves its pid free for another process, which
 * a kill by pid would hit. */
static void reap(pid_t pid, int pidfd)
{
#ifdef SYS_pidfd_send_signal
    if (pidfd >= 0) {
        syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0);
        siginfo_t info;
        int rc;
        while ((rc = waitid((idtype_t)PG_P_PIDFD, (id_t)pidfd, &info, WEXITED)) < 0 &&
               errno == EINTR) {
        }
        int e = rc == 0 ? 0 : errno;
        close(pidfd);
        if (e != EINVAL) {
            return; /* (EINVAL: a kernel before 5.4, which waits by pid) */
        }
        pidfd = -1;
    }
#endif
    if (pidfd >= 0) {
        close(pidfd);
    }
    kill(pid, SIGKILL);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
    }
}

/* This process's ends of the feeder's pipes closed (the feeder reads end-of-file). */
static void close_pipes(pg_remote *r)
{
    if (r->req_fd >= 0) {
        close(r->req_fd);
    }
    if (r->rep_fd >= 0) {
        close(r->rep_fd);
    }
    r->req_fd = r->rep_fd = -1;
}

/* Requests made of a feeder that is gone: made again of the next. */
static void forget_requests(pg_remote *r)
{
    for (size_t c = 0; c < r->nchunks; c++) {
        if (r->status[c] == RQ_ASKED) {
            r->status[c] = RQ_NONE;
        }
    }
}

void pg_feeder_end(pg_remote *r)
{
    close_pipes(r);
    if (r->pid > 0) {
        reap(r->pid, r->pidfd);
    }
    r->pid = 0;
    r->pidfd = -1;
}

static int spawn(pg_remote *r, int in, int out, pid_t *pid)
{
    posix_spawn_file_actions_t files;
    posix_spawnattr_t attr;
    int e = posix_spawn_file_actions_init(&files);
    if (e) {
        return e;
    }
    if ((e = posix_spawnattr_init(&attr)) != 0) {
        posix_spawn_file_actions_destroy(&files);
        return e;
    }
    sigset_t none;
    sigemptyset(&none);
    e = posix_spawn_file_actions_adddup2(&files, in, 0);
    e = e ? e : posix_spawn_file_actions_adddup2(&files, out, 1);
    e = e ? e : posix_spawn_file_actions_addopen(&files, 2, r->spec.log,
                                                 O_WRONLY | O_CREAT | O_APPEND, 0600);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
    e = e ? e : posix_spawn_file_actions_addclosefrom_np(&files, 3);
#endif
    e = e ? e : posix_spawnattr_setsigmask(&attr, &none); /* the pager's threads block signals */
    e = e ? e : posix_spawnattr_setpgroup(&attr, 0);
    e = e ? e : posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETPGROUP);
    e = e ? e : posix_spawn(pid, r->spec.argv[0], &files, &attr, r->spec.argv, r->spec.envp);
    posix_spawnattr_destroy(&attr);
    posix_spawn_file_actions_destroy(&files);
    return e;
}

/* Under r->mu: a feeder started; 0, or -1 with r->why set. */
static int start(pg_remote *r)
{
    int req[2] = {-1, -1}, rep[2] = {-1, -1};
    pid_t pid = 0;
    int e = pipe2(req, O_CLOEXEC) < 0 || pipe2(rep, O_CLOEXEC) < 0 ? errno : 0;
    e = e ? e : spawn(r, req[0], rep[1], &pid);
    if (req[0] >= 0) {
        close(req[0]); /* the feeder's ends */
    }
    if (rep[1] >= 0) {
        close(rep[1]);
    }
    /* Its configuration: a few hundred bytes, which the pipe takes whole; a longer one is
     * read by the feeder as it starts. */
    int fed = e ? e : oc_write_all(req[1], r->spec.config, r->spec.config_n);
    if (e || fed) {
        if (req[1] >= 0) {
            close(req[1]);
        }
        if (rep[0] >= 0) {
            close(rep[0]);
        }
        if (pid > 0) {
            reap(pid, -1); /* not waited for by anyone else yet */
        }
        snprintf(r->why, sizeof r->why, "the fetching process could not start (%s)",
                 strerror(e ? e : fed));
        return -1;
    }
    r->req_fd = req[1];
    r->rep_fd = rep[0];
    r->pid = pid;
    r->pidfd = open_pidfd(pid);
    r->broken = 0;
    r->why[0] = '\0';
    atomic_fetch_add(&r->starts, 1);
    return 0;
}

int pg_feeder_ready(pg_remote *r)
{
    if (!r->stopped && r->req_fd >= 0 && !r->broken) {
        return 0;
    }
    while (r->reading) { /* a worker reading the answers of one that ended sees their end */
        pthread_cond_wait(&r->cv, &r->mu);
    }
    if (r->stopped) {
        snprintf(r->why, sizeof r->why, "the array is being closed");
        return -1;
    }
    if (r->req_fd >= 0 && !r->broken) {
        return 0; /* another worker started one meanwhile */
    }
    if (r->req_fd >= 0) { /* it ended: waited for, and its requests made again of the next */
        pg_feeder_end(r);
        forget_requests(r);
        pthread_cond_broadcast(&r->cv);
    }
    return start(r);
}

/* ---- stopping, and fork ---- */

static atomic_ullong tokens;

unsigned long long pg_feeder_token(void) { return atomic_fetch_add(&tokens, 1) + 1; }

int oc_pager_stop_feeder(unsigned long long token)
{
    pid_t pid = 0;
    int pidfd = -1, found = 0;
    pthread_mutex_lock(&pg_lock); /* the array cannot be freed meanwhile */
    for (pg_array *a = pg_arrays; a != NULL && !found; a = a->next) {
        pg_remote *r = a->remote;
        if (r != NULL && r->token == token) {
            found = 1;
            pthread_mutex_lock(&r->mu);
            r->stopped = 1;
            pid = r->pid;
            pidfd = r->pidfd;
            r->pid = 0; /* its pipes are closed with the array */
            r->pidfd = -1;
            pthread_cond_broadcast(&r->cv);
            pthread_mutex_unlock(&r->mu);
        }
    }
    pthread_mutex_unlock(&pg_lock);
    if (pid > 0) {
        reap(pid, pidfd); /* a worker reading its answers reads their end */
    }
    return found ? 0 : ESRCH;
}

void pg_cond_init(pthread_cond_t *cv)
{
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &attr);
    pthread_condattr_destroy(&attr);
}

/* The child has no feeder and no lender: the parent's pipes, its eventfds and the requests
 * it was waiting on are the parent's.  Chunks lent stay readable (the child has its copy of
 * their buffers); no fill of the parent's reads them here. */
static void child_reset(pg_remote *r)
{
    close_pipes(r);
    if (r->pidfd >= 0) {
        close(r->pidfd); /* the parent's feeder */
    }
    r->pid = 0;
    r->pidfd = -1;
    r->reading = 0;
    r->broken = 0;
    close(r->wake_fd);
    r->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK); /* -1: poll() passes it over */
    if (r->progress_fd >= 0) {
        close(r->progress_fd);
        r->progress_fd = -1;
    }
    forget_requests(r);
    for (size_t c = 0; c < r->nchunks; c++) {
        if (r->given[c] != NULL) {
            r->given[c]->refs = 0; /* no fill of the parent's runs here */
        }
    }
    pg_cond_init(&r->cv);
}

void pg_remote_atfork(int phase)
{
    for (pg_array *a = pg_arrays; a != NULL; a = a->next) {
        pg_remote *r = a->remote;
        if (r == NULL) {
            continue;
        }
        if (phase == OC_FORK_PREPARE) {
            pthread_mutex_lock(&r->mu);
            continue;
        }
        if (phase == OC_FORK_CHILD) {
            child_reset(r);
        }
        pthread_mutex_unlock(&r->mu);
    }
}
