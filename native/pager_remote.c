/*
 * Chunks fetched on demand from an object store, for arrays paged from one.
 *
 * The pager cannot call Python to fetch (a faulting thread may hold the GIL), and fetching
 * is the job of an object-store library, not of this code.  So a feeder process does it
 * (oocarray/_storage/_zarr/_feeder.py): the pager asks it for chunk c by writing c on a
 * pipe, and the feeder writes the chunk's stored bytes into the file the table names (beside
 * it and renamed, so a file is whole or absent) and answers (c, status) on another pipe.  The
 * fill then reads that file as it reads a local chunk.  Workers waiting for answers take turns
 * reading the answer pipe: the one reading records every answer it gets and wakes the others.
 *
 * The feeder is started the first time a fill needs it in this process (pager_feeder.c).
 *
 * A thread of the process that made the array may also hand chunks over in memory before they
 * are asked for (oocarray/_storage/_zarr/_prefetch.py: a scan read ahead without files or the
 * feeder's start-up).  That thread needs the GIL, which a faulting thread may hold, so it only
 * ever helps: a fill takes a chunk handed over if there is one, and otherwise asks the feeder
 * as before, waking as soon as either comes (the worker reading the answer pipe waits on an
 * eventfd too, which a chunk handed over writes).  Each fill of a chunk writes its number on
 * another eventfd, so that thread knows where the reads are.  While no feeder runs and that
 * thread follows the fills, a fill waits for its chunk as long as chunks keep coming, a few
 * tenths of a second after the last, before it starts the feeder: a scan read ahead in memory
 * never needs one.  The thread also says which chunks were never written.
 *
 * The bytes handed over are lent, not copied: the fills decode from the buffer the network
 * layer received them in.  Giving the buffer back needs the GIL, which no thread here may wait
 * for, so bytes no fill reads any more go on one list (of every array) that the lender's thread
 * empties whenever it calls in (oc_pager_remote_spent).
 */
#include "pager_remote.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

/* How long, after the last chunk handed over (or since it began to wait), a fill waits for
 * its chunk to be handed over before it starts the feeder. */
#define LEND_GRACE_NS 300000000LL

/* Bytes lent that no fill reads any more, of every array, until the lender takes them back: a
 * stack pushed with compare-and-swap and emptied whole, so no lock is held across fork. */
static _Atomic(pg_given *) spent;

int oc_pager_set_remote(pg_array *a, const oc_feeder_spec *spec)
{
    pg_remote *r = calloc(1, sizeof *r);
    uint8_t *status = calloc(a->nchunks ? a->nchunks : 1, 1);
    pg_given **given = calloc(a->nchunks ? a->nchunks : 1, sizeof *given);
    int e = r == NULL || status == NULL || given == NULL ? ENOMEM : 0;
    e = e ? e : pg_feeder_spec_copy(&r->spec, spec);
    if (!e && (r->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) {
        e = errno;
        pg_feeder_spec_free(&r->spec);
    }
    if (e) {
        free(r);
        free(status);
        free(given);
        return e;
    }
    pthread_mutex_init(&r->mu, NULL);
    pg_cond_init(&r->cv);
    r->token = pg_feeder_token();
    r->req_fd = r->rep_fd = r->pidfd = -1;
    r->nchunks = a->nchunks;
    r->status = status;
    r->given = given;
    r->progress_fd = -1;
    atomic_init(&r->pos, -1);
    a->remote = r;
    return 0;
}

unsigned long long oc_pager_remote_token(pg_array *a) { return a->remote ? a->remote->token : 0; }

void oc_pager_remote_counts(pg_array *a, long long *asked, long long *started)
{
    *asked = a->remote ? atomic_load(&a->remote->asked) : 0;
    *started = a->remote ? atomic_load(&a->remote->starts) : 0;
}

int oc_pager_remote_progress(pg_array *a, int fd)
{
    pg_remote *r = a->remote;
    if (r == NULL) {
        return EINVAL;
    }
    int mine = fd < 0 ? -1 : fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (fd >= 0 && mine < 0) {
        return errno;
    }
    pthread_mutex_lock(&r->mu);
    int old = r->progress_fd;
    r->progress_fd = mine;
    pthread_cond_broadcast(&r->cv); /* no lender any more: fills waiting for one go on */
    pthread_mutex_unlock(&r->mu);
    if (old >= 0) {
        close(old);
    }
    return 0;
}

/* No fill reads g any more: on the list for its lender. */
static void given_spend(pg_array *a, pg_given *g)
{
    atomic_fetch_sub(&a->given_bytes, (long long)g->n);
    pg_given *head = atomic_load(&spent);
    do {
        g->next = head;
    } while (!atomic_compare_exchange_weak(&spent, &head, g));
}

size_t oc_pager_remote_spent(void (*give_back)(void *owner))
{
    size_t bytes = 0;
    for (pg_given *g = atomic_exchange(&spent, NULL), *next; g != NULL; g = next) {
        next = g->next;
        bytes += g->n;
        give_back(g->owner);
        free(g);
    }
    return bytes;
}

/* Under the remote's mutex: chunk c's bytes in memory are let go (spent, now or by the last
 * fill decoding from them). */
static pg_given *given_take_out(pg_remote *r, size_t c)
{
    pg_given *g = r->given[c];
    r->given[c] = NULL;
    if (g != NULL && g->refs > 0) {
        g->dropped = 1;
        return NULL;
    }
    return g;
}

/* Lent bytes are counted already, by their lender.  Where that put the node over its budget,
 * the units filled longest ago (of a scan, those behind it) are dropped; whether it is under
 * it then (with nothing left to drop, the bytes are not taken: the fills ask the feeder). */
static int room_for_lent(oc_node *node, size_t n)
{
    while (oc_reserve(node, 1) != NULL) { /* not a byte more fits */
        if (pg_evict_lru(node, n, NULL) == 0) {
            return 0;
        }
    }
    oc_release(node, 1);
    return 1;
}

/* Under r->mu: fills waiting for the feeder or a lender look again (the one reading the
 * feeder's answers too). */
static void wake_waiters(pg_remote *r)
{
    pthread_cond_broadcast(&r->cv);
    if (r->reading) {
        uint64_t one = 1; /* never fails usefully */
        (void)!write(r->wake_fd, &one, sizeof one);
    }
}

int oc_pager_remote_lend(pg_array *a, size_t c, const char *src, size_t n, void *owner)
{
    pg_remote *r = a->remote;
    if (r == NULL || c >= a->nchunks) {
        return EINVAL;
    }
    if (a->node != NULL && !room_for_lent(a->node, n)) {
        pthread_mutex_lock(&r->mu);
        r->refusals++; /* fills waiting for the lender ask the feeder */
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
        return ENOSPC;
    }
    pg_given *g = calloc(1, sizeof *g);
    if (g == NULL) {
        return ENOMEM;
    }
    g->data = src;
    g->n = n;
    g->owner = owner;
    atomic_fetch_add(&a->given_bytes, (long long)n);
    pthread_mutex_lock(&r->mu);
    pg_given *old = given_take_out(r, c);
    r->given[c] = g;
    r->lent_ns = pg_mono_ns();
    wake_waiters(r);
    pthread_mutex_unlock(&r->mu);
    if (old != NULL) {
        given_spend(a, old);
    }
    return 0;
}

int oc_pager_remote_absent(pg_array *a, size_t c)
{
    pg_remote *r = a->remote;
    if (r == NULL || c >= a->nchunks) {
        return EINVAL;
    }
    pthread_mutex_lock(&r->mu);
    if (r->status[c] == RQ_NONE || r->status[c] == RQ_ASKED) {
        r->status[c] = RQ_ABSENT; /* (a feeder asked answers the same) */
        wake_waiters(r);
    }
    pthread_mutex_unlock(&r->mu);
    return 0;
}

void oc_pager_remote_keep(pg_array *a, size_t lo, size_t hi)
{
    pg_remote *r = a->remote;
    if (r == NULL) {
        return;
    }
    pg_given *out = NULL; /* spent after the mutex: once per move of the fills, not per chunk */
    pthread_mutex_lock(&r->mu);
    for (size_t c = 0; c < a->nchunks; c++) {
        pg_given *g = (c < lo || c >= hi) && r->given[c] != NULL ? given_take_out(r, c) : NULL;
        if (g != NULL) {
            g->next = out;
            out = g;
        }
    }
    pthread_mutex_unlock(&r->mu);
    while (out != NULL) {
        pg_given *g = out;
        out = g->next;
        given_spend(a, g);
    }
}

long long oc_pager_remote_pos(pg_array *a)
{
    return a->remote == NULL ? -1 : atomic_load(&a->remote->pos);
}

void pg_remote_note(pg_array *a, size_t c)
{
    pg_remote *r = a->remote;
    if (atomic_exchange(&r->pos, (long long)c) == (long long)c) {
        return;
    }
    pthread_mutex_lock(&r->mu);
    if (r->progress_fd >= 0) {
        uint64_t one = 1;
        (void)!write(r->progress_fd, &one, sizeof one); /* a wake-up: never fails usefully */
    }
    pthread_mutex_unlock(&r->mu);
}

void pg_remote_done(pg_array *a, pg_given *g)
{
    pg_remote *r = a->remote;
    pthread_mutex_lock(&r->mu);
    int last = --g->refs == 0 && g->dropped;
    pthread_mutex_unlock(&r->mu);
    if (last) {
        given_spend(a, g);
    }
}

void pg_remote_free(pg_array *a)
{
    pg_remote *r = a->remote;
    if (r == NULL) {
        return;
    }
    pg_feeder_end(r); /* killed and waited for, where it runs */
    close(r->wake_fd);
    if (r->progress_fd >= 0) {
        close(r->progress_fd);
    }
    for (size_t c = 0; c < a->nchunks; c++) {
        if (r->given[c] != NULL) {
            given_spend(a, r->given[c]); /* no fill runs any more */
        }
    }
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    pg_feeder_spec_free(&r->spec);
    free(r->given);
    free(r->status);
    free(r);
}

static int read_all(int fd, void *buf, size_t n)
{
    char *p = buf;
    while (n > 0) {
        ssize_t got = read(fd, p, n);
        if (got < 0 && errno == EINTR) {
            continue;
        }
        if (got <= 0) {
            return -1;
        }
        p += got;
        n -= (size_t)got;
    }
    return 0;
}

/* The feeder's next answer, or a chunk handed over meanwhile (the fills waiting for it must
 * not wait for the feeder, which may still be starting): 1 with the answer, 0 when a chunk
 * was handed over, -1 when the feeder is gone. */
static int await_answer(pg_remote *r, int64_t answer[2])
{
    struct pollfd fds[2] = {{.fd = r->rep_fd, .events = POLLIN},
                            {.fd = r->wake_fd, .events = POLLIN}};
    for (;;) {
        if (poll(fds, 2, -1) < 0) {
            if (errno == EINTR) {
                continue;
            }
            return -1;
        }
        if (fds[0].revents) { /* an answer, or the end of the pipe */
            return read_all(r->rep_fd, answer, 2 * sizeof *answer) == 0 ? 1 : -1;
        }
        if (fds[1].revents & POLLIN) {
            uint64_t count;
            (void)!read(r->wake_fd, &count, sizeof count);
            return 0;
        }
    }
}

/* Why chunk c could not be fetched: the feeder's message in the file beside it, or `why`. */
static void failure_reason(const char *path, size_t c, const char *why_else, char *err,
                           size_t err_n)
{
    char name[4096];
    snprintf(name, sizeof name, "%s.error", path);
    char why[256] = "";
    int fd = open(name, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t got = read(fd, why, sizeof why - 1);
        why[got > 0 ? got : 0] = '\0';
        close(fd);
    }
    snprintf(err, err_n, "chunk %zu could not be fetched from the object store: %s", c,
             why[0] ? why : why_else);
}

/* Under r->mu, no feeder started yet: while a lender follows the fills, wait for chunk c to be
 * handed over (or said to be absent), as long as chunks keep coming. */
static void await_lender(pg_remote *r, size_t c)
{
    long long since = pg_mono_ns();
    unsigned refusals = r->refusals;
    while (r->given[c] == NULL && r->status[c] == RQ_NONE && r->req_fd < 0 &&
           r->progress_fd >= 0 && r->refusals == refusals && !r->stopped) {
        long long deadline = (r->lent_ns > since ? r->lent_ns : since) + LEND_GRACE_NS;
        if (pg_mono_ns() >= deadline) {
            return;
        }
        struct timespec until = {.tv_sec = deadline / 1000000000LL,
                                 .tv_nsec = deadline % 1000000000LL};
        pthread_cond_timedwait(&r->cv, &r->mu, &until);
    }
}

/* Under r->mu: chunk c asked of the feeder (started if need be); 0, or -1 with r->why. */
static int ask(pg_remote *r, size_t c)
{
    if (pg_feeder_ready(r) != 0) {
        return -1;
    }
    int64_t want = (int64_t)c; /* 8 bytes: one atomic write to a pipe */
    ssize_t put;
    do {
        put = write(r->req_fd, &want, sizeof want);
    } while (put < 0 && errno == EINTR);
    if (put != (ssize_t)sizeof want) {
        r->broken = 1; /* it ended: the next request starts another */
        snprintf(r->why, sizeof r->why, "the fetching process ended");
        return -1;
    }
    r->status[c] = RQ_ASKED;
    atomic_fetch_add(&r->asked, 1);
    return 0;
}

/* Under r->mu: one answer of the feeder read (recorded) or a wake-up taken, by the one worker
 * reading them at a time. */
static void read_answer(pg_array *a, pg_remote *r)
{
    r->reading = 1;
    pthread_mutex_unlock(&r->mu);
    int64_t answer[2];
    int rc = await_answer(r, answer);
    pthread_mutex_lock(&r->mu);
    r->reading = 0;
    if (rc < 0) {
        r->broken = 1;
        snprintf(r->why, sizeof r->why, "the fetching process ended (its log: %s)", r->spec.log);
    } else if (rc > 0 && answer[0] >= 0 && (size_t)answer[0] < a->nchunks &&
               answer[1] >= RQ_READY && answer[1] <= RQ_FAILED) {
        r->status[answer[0]] = (uint8_t)answer[1];
    }
    pthread_cond_broadcast(&r->cv);
}

int pg_remote_wait(pg_array *a, size_t c, const char *path, pg_given **given, char *err,
                   size_t err_n)
{
    pg_remote *r = a->remote;
    pthread_mutex_lock(&r->mu);
    if (r->status[c] == RQ_READY) {
        r->status[c] = RQ_NONE; /* the file went since (a retry): ask again */
    }
    if (r->given[c] == NULL && r->status[c] == RQ_NONE && r->req_fd < 0) {
        await_lender(r, c);
    }
    int failed = 0, again = 1; /* a feeder that ended is replaced once a wait */
    while (r->given[c] == NULL && !failed &&
           (r->status[c] == RQ_NONE || r->status[c] == RQ_ASKED)) {
        if (r->status[c] == RQ_NONE) {
            failed = ask(r, c) != 0 && !(r->broken && again-- > 0);
        } else if (r->broken) { /* the feeder it was asked of ended */
            failed = again-- <= 0;
            r->status[c] = failed ? RQ_ASKED : RQ_NONE;
        } else if (r->reading) {
            pthread_cond_wait(&r->cv, &r->mu);
        } else {
            read_answer(a, r);
        }
    }
    if (r->given[c] != NULL) {
        *given = r->given[c]; /* handed over, maybe while the feeder fetched it (which it still
                                 answers: a later fill may open its file) */
        (*given)->refs++;
        pthread_mutex_unlock(&r->mu);
        return 2;
    }
    int status = failed ? RQ_FAILED : r->status[c];
    if (status == RQ_FAILED) {
        r->status[c] = RQ_NONE; /* a later fault asks again */
    }
    char why[256];
    snprintf(why, sizeof why, "%s", r->why[0] ? r->why : "the fetching process ended");
    pthread_mutex_unlock(&r->mu);
    if (status == RQ_READY) {
        return 0;
    }
    if (status == RQ_ABSENT) {
        return 1;
    }
    failure_reason(path, c, why, err, err_n);
    return -1;
}

const char *pg_given_bytes(const pg_given *g, size_t *n)
{
    *n = g->n;
    return g->data;
}
