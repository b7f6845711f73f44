/*
 * What pager_remote.c (the fills' waits and the chunks lent) and pager_feeder.c (the feeder
 * process: started, stopped, and what fork does to it) share.  Not for any other file.
 */
#ifndef OC_PAGER_REMOTE_H
#define OC_PAGER_REMOTE_H

#include "pager_int.h"

#include <pthread.h>
#include <stdatomic.h>

enum { RQ_NONE = 0, RQ_ASKED = 1, RQ_READY = 2, RQ_ABSENT = 3, RQ_FAILED = 4 };

struct pg_remote {
    oc_feeder_spec spec; /* how to start the feeder (owned copies) */
    unsigned long long token; /* names the array to oc_pager_stop_feeder */
    int req_fd, rep_fd; /* the pipes of this process's feeder, -1 before it starts */
    pid_t pid;          /* this process's feeder, 0 when none was started or it was reaped */
    int pidfd;          /* and its pidfd (signalled and waited for through it), or -1 */
    int stopped;        /* no feeder starts again: the array is going */
    int wake_fd; /* an eventfd: a chunk was handed over while a worker read the answer pipe */
    pthread_mutex_t mu;
    pthread_cond_t cv; /* on CLOCK_MONOTONIC */
    int reading; /* a worker is reading the answer pipe */
    int broken;  /* the feeder ended: the waits for it fail, the next request starts another */
    char why[256]; /* why the last feeder could not start, or "" */
    size_t nchunks;
    uint8_t *status; /* per chunk */
    pg_given **given; /* per chunk: its stored bytes handed over in memory, or NULL */
    int progress_fd;  /* an eventfd written when fills move to another chunk, or -1 */
    long long lent_ns;   /* when a chunk was last handed over (CLOCK_MONOTONIC) */
    unsigned refusals;   /* chunks the lender offered that the budget had no room for */
    atomic_llong pos;    /* the chunk of the latest fill, -1 before the first */
    atomic_llong asked;  /* chunks asked of a feeder */
    atomic_llong starts; /* feeders started by this process */
};

/* A chunk's stored bytes in memory, lent by `owner` (counted by whoever lent them). */
struct pg_given {
    pg_given *next; /* in the list of those spent */
    const char *data;
    size_t n;
    void *owner;
    int refs;    /* fills decoding from it; under the remote's mutex */
    int dropped; /* no longer in `given`: the last fill done with it spends it */
};

/* pager_feeder.c, each under r->mu: this process's feeder running (started, after reaping the
 * one that ended, where need be): 0, or -1 with r->why set; and the one running stopped. */
int pg_feeder_ready(pg_remote *r);
void pg_feeder_end(pg_remote *r);
void pg_feeder_spec_free(oc_feeder_spec *spec);
int pg_feeder_spec_copy(oc_feeder_spec *to, const oc_feeder_spec *from);
long long pg_mono_ns(void);
unsigned long long pg_feeder_token(void); /* a new one */
void pg_cond_init(pthread_cond_t *cv);    /* on CLOCK_MONOTONIC */

#endif
