/* The chunk reader (reader.c): one read's table of jobs run on the native pool. */
#ifndef OC_READER_H
#define OC_READER_H

#include "oc_source.h"

/* The columns of the job table (int64), one row a job. */
enum {
    OC_J_SOURCE, /* index into the sources */
    OC_J_OFFSET, /* where the stored bytes start in the source */
    OC_J_NBYTES, /* how many there are; -1: to the end of the source */
    OC_J_SKIP,   /* decoded bytes of the chunk before the wanted range */
    OC_J_BUFFER, /* the destination: dests[buffer][at:at + len] */
    OC_J_AT,
    OC_J_LEN,
    OC_J_CODEC, /* the native codec number (OC_CODEC_*, with its flags) */
    OC_J_CHUNK, /* the chunk's decoded size */
    OC_JOB_FIELDS
};

#define OC_READ_MESSAGE 256

typedef struct {
    int64_t job;
    char message[OC_READ_MESSAGE];
} oc_read_failure;

/* Runs the n jobs (checked by the caller against sources and dests) on up to `threads` threads,
 * the caller included, without the GIL.  absent[i] (n of them, zeroed) is set for a job whose
 * source path names no file; the jobs that failed, in order, with their reasons, go to *failed
 * (malloc'd; *nfailed of them).  0, or -1 when a failure could not be recorded (no memory). */
int oc_read_jobs(const int64_t *jobs, int64_t n, const oc_source *sources, char *const *dests,
                 int threads, char *absent, oc_read_failure **failed, int64_t *nfailed);

#endif
