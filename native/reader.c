/*
 * The chunk reader's one way into C: read_chunks() takes the table of every job of one read
 * (where each chunk's stored bytes are, its codec, the decoded range wanted and where it goes),
 * releases the GIL once and runs the table on the native pool (pool.c), each job decoded by
 * the decoder the pager uses too (oc_decode).  A job that fails does not stop the others: every
 * failure comes back with its reason, for Python to decode in its own way (a layout the native
 * decoders leave alone) or to report.  A source given as a path is opened by the job that
 * reads it, on the pool's thread; a file that does not exist is a chunk never written, which
 * comes back apart (for the fill value).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "oc_core.h"
#include "oc_pool.h"
#include "oc_source.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The columns of the job table (int64). */
enum {
    J_SOURCE, /* index into sources */
    J_OFFSET, /* where the stored bytes start in the source */
    J_NBYTES, /* how many there are; -1: to the end of the source */
    J_SKIP,   /* decoded bytes of the chunk before the wanted range */
    J_BUFFER, /* the destination: dests[buffer][at:at + len] */
    J_AT,
    J_LEN,
    J_CODEC,  /* the native codec number (OC_CODEC_*, with its flags) */
    J_CHUNK,  /* the chunk's decoded size */
    JOB_FIELDS
};

#define MESSAGE_BYTES 256

typedef struct {
    Py_ssize_t job;
    char message[MESSAGE_BYTES];
} failure;

typedef struct {
    const int64_t *jobs;
    int64_t n;
    const oc_source *sources;
    char *const *dests;
    _Atomic int64_t next;
    pthread_mutex_t lock; /* guards the failures */
    failure *failed;
    Py_ssize_t nfailed, cap;
    int lost; /* failures that could not be recorded (out of memory) */
    char *absent; /* per job: its file does not exist */
} read_run;

static void record(read_run *r, int64_t job, const char *message)
{
    pthread_mutex_lock(&r->lock);
    if (r->nfailed == r->cap) {
        Py_ssize_t more = r->cap ? 2 * r->cap : 8;
        failure *p = realloc(r->failed, (size_t)more * sizeof *p);
        if (p == NULL) {
            r->lost++;
            pthread_mutex_unlock(&r->lock);
            return;
        }
        r->failed = p;
        r->cap = more;
    }
    r->failed[r->nfailed].job = (Py_ssize_t)job;
    snprintf(r->failed[r->nfailed].message, MESSAGE_BYTES, "%s", message);
    r->nfailed++;
    pthread_mutex_unlock(&r->lock);
}

static void run_jobs(void *p)
{
    read_run *r = p;
    char err[MESSAGE_BYTES];
    for (;;) {
        int64_t i = atomic_fetch_add(&r->next, 1);
        if (i >= r->n) {
            return;
        }
        const int64_t *j = r->jobs + i * JOB_FIELDS;
        const oc_source *src = &r->sources[j[J_SOURCE]];
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
            opened = oc_file_source(fd);
            src = &opened;
        }
        err[0] = 0;
        if (oc_decode((int)j[J_CODEC], src, j[J_OFFSET], j[J_NBYTES], (size_t)j[J_CHUNK],
                      (size_t)j[J_SKIP], r->dests[j[J_BUFFER]] + j[J_AT], (size_t)j[J_LEN], err,
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
    Py_ssize_t x = ((const failure *)a)->job, y = ((const failure *)b)->job;
    return (x > y) - (x < y);
}

/*
 * read_chunks(jobs, sources, dests, threads) -> ([(job, message), ...], [job, ...])
 *
 * jobs: a C-contiguous int64 (n, 9) table, one row a job (the columns above); sources: open
 * file descriptors (int), paths of files (str) or buffers of stored bytes; dests: writable
 * C-contiguous buffers.  Every job is checked against them before anything runs (ValueError).
 * Runs on up to `threads` threads, the caller included; returns the failed jobs in order, with
 * reasons, and the jobs whose file does not exist.
 */
PyObject *oc_py_read_chunks(PyObject *Py_UNUSED(m), PyObject *args)
{
    PyObject *jobs_obj, *sources_list, *dests_list;
    int threads;
    if (!PyArg_ParseTuple(args, "OO!O!i", &jobs_obj, &PyList_Type, &sources_list, &PyList_Type,
                          &dests_list, &threads)) {
        return NULL;
    }
    Py_buffer jobs_view;
    if (PyObject_GetBuffer(jobs_obj, &jobs_view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) {
        return NULL;
    }
    Py_ssize_t nsrc = PyList_GET_SIZE(sources_list), ndst = PyList_GET_SIZE(dests_list);
    Py_buffer *src_views = PyMem_Calloc((size_t)(nsrc ? nsrc : 1), sizeof *src_views);
    Py_buffer *dst_views = PyMem_Calloc((size_t)(ndst ? ndst : 1), sizeof *dst_views);
    oc_source *sources = PyMem_Calloc((size_t)(nsrc ? nsrc : 1), sizeof *sources);
    char **dests = PyMem_Calloc((size_t)(ndst ? ndst : 1), sizeof *dests);
    char *held = PyMem_Calloc((size_t)(nsrc ? nsrc : 1), 1); /* which src_views are held */
    Py_ssize_t dst_held = 0;
    PyObject *result = NULL;
    read_run run = {.failed = NULL, .absent = NULL};
    pthread_mutex_init(&run.lock, NULL);
    if (src_views == NULL || dst_views == NULL || sources == NULL || dests == NULL || held == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (jobs_view.itemsize != 8 || jobs_view.len % (JOB_FIELDS * 8) != 0 ||
        ((uintptr_t)jobs_view.buf & 7) != 0 ||
        (jobs_view.format != NULL && strchr("qlQL", jobs_view.format[0]) == NULL)) {
        PyErr_SetString(PyExc_ValueError, "jobs must be an int64 table of 9 columns");
        goto done;
    }
    for (Py_ssize_t i = 0; i < nsrc; i++) {
        PyObject *s = PyList_GET_ITEM(sources_list, i);
        if (PyUnicode_Check(s)) {
            const char *path = PyUnicode_AsUTF8(s); /* kept by the list for the call */
            if (path == NULL) {
                goto done;
            }
            sources[i] = (oc_source){.fd = -1, .path = path, .mem = NULL, .mem_len = 0};
            continue;
        }
        if (PyLong_Check(s)) {
            long fd = PyLong_AsLong(s);
            if (fd < 0 || fd > INT32_MAX) {
                if (!PyErr_Occurred()) {
                    PyErr_Format(PyExc_ValueError, "source %zd: %ld is no file descriptor", i, fd);
                }
                goto done;
            }
            sources[i] = oc_file_source((int)fd);
            continue;
        }
        if (PyObject_GetBuffer(s, &src_views[i], PyBUF_C_CONTIGUOUS) != 0) {
            goto done;
        }
        held[i] = 1;
        sources[i] = (oc_source){
            .fd = -1, .path = NULL, .mem = src_views[i].buf, .mem_len = src_views[i].len};
    }
    for (; dst_held < ndst; dst_held++) {
        if (PyObject_GetBuffer(PyList_GET_ITEM(dests_list, dst_held), &dst_views[dst_held],
                               PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) != 0) {
            goto done;
        }
        dests[dst_held] = dst_views[dst_held].buf;
    }
    const int64_t *jobs = jobs_view.buf;
    int64_t n = jobs_view.len / (JOB_FIELDS * 8);
    for (int64_t i = 0; i < n; i++) {
        const int64_t *j = jobs + i * JOB_FIELDS;
        if (j[J_SOURCE] < 0 || j[J_SOURCE] >= nsrc || j[J_BUFFER] < 0 || j[J_BUFFER] >= ndst ||
            j[J_AT] < 0 || j[J_LEN] < 0 || j[J_SKIP] < 0 || j[J_OFFSET] < 0 || j[J_NBYTES] < -1 ||
            j[J_CHUNK] < 0 || j[J_CODEC] < 0 || j[J_CODEC] > INT32_MAX ||
            j[J_AT] > dst_views[j[J_BUFFER]].len - j[J_LEN]) {
            PyErr_Format(PyExc_ValueError,
                         "job %lld names a source or buffer that is not given, or bytes outside "
                         "them", (long long)i);
            goto done;
        }
    }
    run.absent = PyMem_Calloc((size_t)(n ? n : 1), 1);
    if (run.absent == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    run.jobs = jobs;
    run.n = n;
    run.sources = sources;
    run.dests = dests;
    atomic_store(&run.next, 0);
    if (n > 0) {
        Py_BEGIN_ALLOW_THREADS
        oc_pool_run(run_jobs, &run, n < threads ? (int)n : threads);
        Py_END_ALLOW_THREADS
    }
    if (run.lost > 0) {
        PyErr_NoMemory();
        goto done;
    }
    qsort(run.failed, (size_t)run.nfailed, sizeof *run.failed, by_job);
    PyObject *failed = PyList_New(run.nfailed);
    PyObject *absent = PyList_New(0);
    for (Py_ssize_t i = 0; failed != NULL && i < run.nfailed; i++) {
        PyObject *item = Py_BuildValue("(ns)", run.failed[i].job, run.failed[i].message);
        if (item == NULL) {
            Py_CLEAR(failed);
            break;
        }
        PyList_SET_ITEM(failed, i, item);
    }
    for (int64_t i = 0; absent != NULL && i < n; i++) {
        if (run.absent[i]) {
            PyObject *job = PyLong_FromLongLong(i);
            if (job == NULL || PyList_Append(absent, job) != 0) {
                Py_XDECREF(job);
                Py_CLEAR(absent);
                break;
            }
            Py_DECREF(job);
        }
    }
    if (failed != NULL && absent != NULL) {
        result = PyTuple_Pack(2, failed, absent);
    }
    Py_XDECREF(failed);
    Py_XDECREF(absent);
done:
    for (Py_ssize_t i = 0; i < dst_held; i++) {
        PyBuffer_Release(&dst_views[i]);
    }
    for (Py_ssize_t i = 0; held != NULL && i < nsrc; i++) {
        if (held[i]) {
            PyBuffer_Release(&src_views[i]);
        }
    }
    free(run.failed);
    PyMem_Free(run.absent);
    pthread_mutex_destroy(&run.lock);
    PyMem_Free(held);
    PyMem_Free(dests);
    PyMem_Free(sources);
    PyMem_Free(dst_views);
    PyMem_Free(src_views);
    PyBuffer_Release(&jobs_view);
    return result;
}

PyObject *oc_py_pool_workers(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    return PyLong_FromLong(oc_pool_workers());
}
