/*
 * The chunk reader: one read's table of jobs (where each chunk's stored bytes are, its codec,
 * the decoded range wanted and where it goes) run on the native pool (pool.c), each job decoded
 * by the decoder the pager uses too (oc_decode).  A job that fails does not stop the others:
 * every failure comes back with its reason, for Python to decode in its own way (a layout the
 * native decoders leave alone) or to report.  A source given as a path is opened by the job
 * that reads it, on the pool's thread; a path of no file is a chunk never written, which comes
 * back apart (for the fill value).  The Python side is read_chunks() in py_chunks.c.
 */
#include "oc_reader.h"
#include "oc_chunks.h"
#include "oc_codecs.h"
#include "oc_pool.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    const int64_t *jobs;
    int64_t n;
    const oc_source *sources;
    char *const *dests;
    char *absent;
    _Atomic int64_t next;
    pthread_mutex_t lock; /* guards the failures */
    oc_read_failure *failed;
    int64_t nfailed, cap;
    int lost; /* failures that could not be recorded (out of memory) */
} read_run;

static void record(read_run *r, int64_t job, const char *message)
{
    pthread_mutex_lock(&r->lock);
    if (r->nfailed == r->cap) {
        int64_t more = r->cap ? 2 * r->cap : 8;
        oc_read_failure *p = realloc(r->failed, (size_t)more * sizeof *p);
        if (p == NULL) {
            r->lost++;
            pthread_mutex_unlock(&r->lock);
            return;
        }
        r->failed = p;
        r->cap = more;
    }
    r->failed[r->nfailed].job = job;
    snprintf(r->failed[r->nfailed].message, OC_READ_MESSAGE, "%s", message);
    r->nfailed++;
    pthread_mutex_unlock(&r->lock);
}

/* Whether a job reads part of an uncompressed chunk at random (OC_CODEC_RANDOM): its file,
 * opened for it, is then told so.
 *
 * Why: a part that starts its file (the second chunk of rows that straddle two) is taken by
 * the kernel for the start of a read in order, and it reads on past the part, to the file's
 * end at most.  256 rows of 4 KiB at random places in chunks of 2 MiB, from disk, 6 runs of
 * 200: 90th percentile 1.74-1.98 ms against 2.45-3.27 ms, median 1.49-1.73 ms against
 * 1.54-2.00 ms.  The caller leaves it out for a read that goes on from where the last
 * ended, whose next reads the readahead makes warm. */
static int read_at_random(int64_t codec)
{
    return OC_CODEC_KIND(codec) == OC_CODEC_RAW && (codec & OC_CODEC_RANDOM) != 0;
}

static void run_jobs(void *p)
{
    read_run *r = p;
    char err[OC_READ_MESSAGE];
    for (;;) {
        int64_t i = atomic_fetch_add(&r->next, 1);
        if (i >= r->n) {
            return;
        }
        const int64_t *j = r->jobs + i * OC_JOB_FIELDS;
        const oc_source *src = &r->sources[j[OC_J_SOURCE]];
        oc_source opened;
        if (src->path != NULL) {
            int fd = open(src->path, O_RDONLY | O_CLOEXEC);
            if (fd < 0) {
                if (errno == ENOENT) {
                    r->absent[i] = 1;
                }
                else {
                    snprintf(err, sizeof err, "open: %s", strerror(errno));
                    record(r, i, err);
                }
                continue;
            }
            if (read_at_random(j[OC_J_CODEC])) {
                (void)posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
            }
            opened = oc_file_source(fd);
            src = &opened;
        }
        err[0] = 0;
        if (oc_decode((int)j[OC_J_CODEC], src, j[OC_J_OFFSET], j[OC_J_NBYTES],
                      (size_t)j[OC_J_CHUNK], (size_t)j[OC_J_SKIP],
                      r->dests[j[OC_J_BUFFER]] + j[OC_J_AT], (size_t)j[OC_J_LEN], err,
                      sizeof err) != 0) {
            record(r, i, err);
        }
        if (src == &opened) {
            close(opened.fd);
        }
    }
}

static int by_job(const void *a, const void *b)
{
    int64_t x = ((const oc_read_failure *)a)->job, y = ((const oc_read_failure *)b)->job;
    return (x > y) - (x < y);
}

int oc_read_jobs(const int64_t *jobs, int64_t n, const oc_source *sources, char *const *dests,
                 int threads, char *absent, oc_read_failure **failed, int64_t *nfailed)
{
    read_run run = {.jobs = jobs, .n = n, .sources = sources, .dests = dests, .absent = absent};
    atomic_store(&run.next, 0);
    pthread_mutex_init(&run.lock, NULL);
    if (n > 0) {
        oc_pool_run(run_jobs, &run, n < threads ? (int)n : threads);
    }
    pthread_mutex_destroy(&run.lock);
    if (run.nfailed > 1) { /* qsort takes no null array, even of nothing */
        qsort(run.failed, (size_t)run.nfailed, sizeof *run.failed, by_job);
    }
    *failed = run.failed;
    *nfailed = run.nfailed;
    return run.lost > 0 ? -1 : 0;
}
