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
 */
#include "pager_int.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { RQ_NONE = 0, RQ_ASKED = 1, RQ_READY = 2, RQ_ABSENT = 3, RQ_FAILED = 4 };

struct pg_remote {
    int req_fd, rep_fd;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int reading; /* a worker is reading the answer pipe */
    int broken;  /* the feeder is gone: every wait fails */
    uint8_t *status; /* per chunk */
};

int oc_pager_set_remote(pg_array *a, int req_fd, int rep_fd)
{
    pg_remote *r = calloc(1, sizeof *r);
    uint8_t *status = calloc(a->nchunks ? a->nchunks : 1, 1);
    if (r == NULL || status == NULL) {
        free(r);
        free(status);
        return ENOMEM;
    }
    r->req_fd = fcntl(req_fd, F_DUPFD_CLOEXEC, 0);
    r->rep_fd = fcntl(rep_fd, F_DUPFD_CLOEXEC, 0);
    if (r->req_fd < 0 || r->rep_fd < 0) {
        int e = errno;
        if (r->req_fd >= 0) close(r->req_fd);
        if (r->rep_fd >= 0) close(r->rep_fd);
        free(r);
        free(status);
        return e;
    }
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->status = status;
    a->remote = r;
    return 0;
}

void pg_remote_free(pg_remote *r)
{
    if (r == NULL) {
        return;
    }
    close(r->req_fd); /* the feeder reads end-of-file and exits */
    close(r->rep_fd);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
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

/* Why chunk c could not be fetched: the feeder's message in the file beside it. */
static void failure_reason(pg_array *a, const char *path, size_t c, char *err, size_t err_n)
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
    (void)a;
    snprintf(err, err_n, "chunk %zu could not be fetched from the object store: %s", c,
             why[0] ? why : "the fetching process ended");
}

int pg_remote_wait(pg_array *a, size_t c, const char *path, char *err, size_t err_n)
{
    pg_remote *r = a->remote;
    pthread_mutex_lock(&r->mu);
    if (r->status[c] == RQ_READY) {
        r->status[c] = RQ_NONE; /* the file went since (a retry): ask again */
    }
    if (r->status[c] == RQ_NONE && !r->broken) {
        int64_t want = (int64_t)c; /* 8 bytes: one atomic write to a pipe */
        ssize_t put;
        do {
            put = write(r->req_fd, &want, sizeof want);
        } while (put < 0 && errno == EINTR);
        if (put != (ssize_t)sizeof want) {
            r->broken = 1;
        } else {
            r->status[c] = RQ_ASKED;
        }
    }
    while (r->status[c] == RQ_ASKED && !r->broken) {
        if (r->reading) {
            pthread_cond_wait(&r->cv, &r->mu);
            continue;
        }
        r->reading = 1;
        pthread_mutex_unlock(&r->mu);
        int64_t answer[2];
        int rc = read_all(r->rep_fd, answer, sizeof answer);
        pthread_mutex_lock(&r->mu);
        r->reading = 0;
        if (rc != 0) {
            r->broken = 1;
        } else if (answer[0] >= 0 && (size_t)answer[0] < a->nchunks && answer[1] >= RQ_READY &&
                   answer[1] <= RQ_FAILED) {
            r->status[answer[0]] = (uint8_t)answer[1];
        }
        pthread_cond_broadcast(&r->cv);
    }
    int status = r->broken && r->status[c] == RQ_ASKED ? RQ_FAILED : r->status[c];
    if (status == RQ_FAILED) {
        r->status[c] = RQ_NONE; /* a later fault asks again */
    }
    pthread_mutex_unlock(&r->mu);
    if (status == RQ_READY) {
        return 0;
    }
    if (status == RQ_ABSENT) {
        return 1;
    }
    failure_reason(a, path, c, err, err_n);
    return -1;
}
