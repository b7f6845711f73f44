/* Module functions of the chunk reader (reader.c, chunks.c) and the codecs (codecs.c,
 * h5filters.c): the Python side parses and checks, the work runs without the GIL in those
 * files. */
#include "py_module.h"
#include "oc_chunks.h"
#include "oc_codecs.h"
#include "oc_pool.h"
#include "oc_reader.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the chunk reader (chunks.c) ---- */

static PyObject *oc_py_zstd_available(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    return PyBool_FromLong(oc_zstd_ready());
}

/* zstd_version() -> int: the version number of the libzstd in use (10506 for 1.5.6); 0 when
 * none can be loaded. */
static PyObject *oc_py_zstd_version(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    return PyLong_FromUnsignedLong(oc_zstd_ready() ? oc_zstd.version() : 0);
}

/*
 * read_chunks(jobs, sources, dests, threads) -> ([(job, message), ...], [job, ...])
 *
 * jobs: a C-contiguous int64 table of OC_JOB_FIELDS columns, one row a job (oc_reader.h);
 * sources: open file descriptors (int), paths of files (str), buffers of stored bytes, or
 * (fd, seed, crc) tuples: an open file whose stored bytes of each job must have the CRC-32C crc
 * computed on from seed (an entry of the chunk cache; checked whole before it is decoded);
 * dests: writable C-contiguous buffers.  Every job is checked against them before anything
 * runs (ValueError).  Runs on up to `threads` threads of the native pool, the caller included,
 * with the GIL released once; returns the failed jobs in order, with reasons, and the jobs
 * whose file does not exist.
 */
static PyObject *oc_py_read_chunks(PyObject *Py_UNUSED(m), PyObject *args)
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
    int64_t n = jobs_view.len / (OC_JOB_FIELDS * 8);
    Py_buffer *src_views = PyMem_Calloc((size_t)(nsrc ? nsrc : 1), sizeof *src_views);
    Py_buffer *dst_views = PyMem_Calloc((size_t)(ndst ? ndst : 1), sizeof *dst_views);
    oc_source *sources = PyMem_Calloc((size_t)(nsrc ? nsrc : 1), sizeof *sources);
    char **dests = PyMem_Calloc((size_t)(ndst ? ndst : 1), sizeof *dests);
    char *held = PyMem_Calloc((size_t)(nsrc ? nsrc : 1), 1); /* which src_views are held */
    PyObject **encoded = PyMem_Calloc((size_t)(nsrc ? nsrc : 1), sizeof *encoded); /* paths */
    char *absent = PyMem_Calloc((size_t)(n > 0 ? n : 1), 1);
    Py_ssize_t dst_held = 0;
    oc_read_failure *failed = NULL;
    int64_t nfailed = 0;
    PyObject *result = NULL;
    if (src_views == NULL || dst_views == NULL || sources == NULL || dests == NULL ||
        held == NULL || encoded == NULL || absent == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (jobs_view.itemsize != 8 || jobs_view.len % (OC_JOB_FIELDS * 8) != 0 ||
        ((uintptr_t)jobs_view.buf & 7) != 0 ||
        (jobs_view.format != NULL && strchr("qlQL", jobs_view.format[0]) == NULL)) {
        PyErr_SetString(PyExc_ValueError, "jobs must be an int64 table of 9 columns");
        goto done;
    }
    for (Py_ssize_t i = 0; i < nsrc; i++) {
        PyObject *s = PyList_GET_ITEM(sources_list, i);
        if (PyUnicode_Check(s)) {
            /* in the file system's encoding, as os.open takes it (a name that is no UTF-8 too) */
            encoded[i] = PyUnicode_EncodeFSDefault(s);
            if (encoded[i] == NULL) {
                goto done;
            }
            const char *path = PyBytes_AS_STRING(encoded[i]);
            sources[i] = (oc_source){.fd = -1, .path = path, .mem = NULL, .mem_len = 0};
            continue;
        }
        if (PyTuple_Check(s)) {
            /* (fd, seed, crc): an open entry of the chunk cache, checked before it is decoded */
            int fd;
            unsigned int seed, crc;
            if (!PyArg_ParseTuple(s, "iII", &fd, &seed, &crc)) {
                goto done;
            }
            if (fd < 0) {
                PyErr_Format(PyExc_ValueError, "source %zd: %d is no file descriptor", i, fd);
                goto done;
            }
            sources[i] = oc_file_source(fd);
            sources[i].checked = 1;
            sources[i].crc_seed = seed;
            sources[i].crc = crc;
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
    for (int64_t i = 0; i < n; i++) {
        const int64_t *j = jobs + i * OC_JOB_FIELDS;
        if (j[OC_J_SOURCE] < 0 || j[OC_J_SOURCE] >= nsrc || j[OC_J_BUFFER] < 0 ||
            j[OC_J_BUFFER] >= ndst || j[OC_J_AT] < 0 || j[OC_J_LEN] < 0 || j[OC_J_SKIP] < 0 ||
            j[OC_J_OFFSET] < 0 || j[OC_J_NBYTES] < -1 || j[OC_J_CHUNK] < 0 ||
            j[OC_J_CODEC] < 0 || j[OC_J_CODEC] > INT32_MAX ||
            j[OC_J_AT] > dst_views[j[OC_J_BUFFER]].len - j[OC_J_LEN]) {
            PyErr_Format(PyExc_ValueError,
                         "job %lld names a source or buffer that is not given, or bytes outside "
                         "them", (long long)i);
            goto done;
        }
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = oc_read_jobs(jobs, n, sources, dests, threads, absent, &failed, &nfailed);
    Py_END_ALLOW_THREADS
    if (rc != 0) {
        PyErr_NoMemory();
        goto done;
    }
    PyObject *failures = PyList_New((Py_ssize_t)nfailed);
    PyObject *missing = PyList_New(0);
    for (int64_t i = 0; failures != NULL && i < nfailed; i++) {
        PyObject *item = Py_BuildValue("(Ls)", (long long)failed[i].job, failed[i].message);
        if (item == NULL) {
            Py_CLEAR(failures);
            break;
        }
        PyList_SET_ITEM(failures, (Py_ssize_t)i, item);
    }
    for (int64_t i = 0; missing != NULL && i < n; i++) {
        if (absent[i]) {
            PyObject *job = PyLong_FromLongLong(i);
            if (job == NULL || PyList_Append(missing, job) != 0) {
                Py_XDECREF(job);
                Py_CLEAR(missing);
                break;
            }
            Py_DECREF(job);
        }
    }
    if (failures != NULL && missing != NULL) {
        result = PyTuple_Pack(2, failures, missing);
    }
    Py_XDECREF(failures);
    Py_XDECREF(missing);
done:
    for (Py_ssize_t i = 0; i < dst_held; i++) {
        PyBuffer_Release(&dst_views[i]);
    }
    for (Py_ssize_t i = 0; held != NULL && i < nsrc; i++) {
        if (held[i]) {
            PyBuffer_Release(&src_views[i]);
        }
    }
    for (Py_ssize_t i = 0; encoded != NULL && i < nsrc; i++) {
        Py_XDECREF(encoded[i]);
    }
    PyMem_Free(encoded);
    free(failed);
    PyMem_Free(absent);
    PyMem_Free(held);
    PyMem_Free(dests);
    PyMem_Free(sources);
    PyMem_Free(dst_views);
    PyMem_Free(src_views);
    PyBuffer_Release(&jobs_view);
    return result;
}

static PyObject *oc_py_pool_workers(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    return PyLong_FromLong(oc_pool_workers());
}

/* The frame of zstd_write: 0 with *r the bytes written, or -1 with an error set. */
static int zstd_frame(int fd, PyObject *data, int level, int checksum, int crc,
                      Py_ssize_t tune_bytes, int direct, size_t *r)
{
    if (tune_bytes < 0) {
        PyErr_SetString(PyExc_ValueError, "tune_bytes must be 0 or more");
        return -1;
    }
    if (!oc_zstd_ready()) {
        PyErr_SetString(PyExc_RuntimeError, "no libzstd is available");
        return -1;
    }
    if (crc && !oc_codec_lib_ready(OC_LIB_CRC32C)) {
        PyErr_SetString(PyExc_RuntimeError, "the CRC-32C library is not loaded");
        return -1;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_C_CONTIGUOUS) != 0) {
        return -1;
    }
    int result;
    Py_BEGIN_ALLOW_THREADS
    result = oc_zstd_write(fd, view.buf, (size_t)view.len, level, checksum, crc, (size_t)tune_bytes,
                           direct, NULL, r);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (result == OC_ZW_NOMEM) {
        PyErr_NoMemory();
        return -1;
    }
    if (result == OC_ZW_ZSTD) {
        PyErr_Format(PyExc_ValueError, "zstd: %s", oc_zstd.error_name(*r));
        return -1;
    }
    if (result != 0) {
        errno = result;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    return 0;
}

/*
 * zstd_write(fd, data, level, checksum, crc32c=False, tune_bytes=0, direct=False) -> int: write
 * one zstd frame of data's bytes to fd (from its current position), with the content size in
 * the header, as numcodecs writes it, and a checksum when asked; then, with crc32c, the CRC-32C
 * of the frame (zarr's crc32c codec after zstd).  With tune_bytes (smaller than data), the
 * frame is compressed with the parameters the level picks for a source of that size.  With
 * direct (a file written from a position that is a multiple of 4096), its whole blocks are
 * written past the page cache where the file system can (see oc_write_direct).  Compressed
 * without the GIL into this thread's buffer.  Returns the bytes written; a failed write raises
 * OSError with its errno (ENOSPC on a full disk).
 */
static PyObject *oc_py_zstd_write(PyObject *Py_UNUSED(m), PyObject *args)
{
    int fd, level, checksum, crc = 0, direct = 0;
    Py_ssize_t tune_bytes = 0;
    PyObject *data;
    if (!PyArg_ParseTuple(args, "iOip|pnp", &fd, &data, &level, &checksum, &crc, &tune_bytes,
                          &direct)) {
        return NULL;
    }
    size_t r;
    if (zstd_frame(fd, data, level, checksum, crc, tune_bytes, direct, &r) != 0) {
        return NULL;
    }
    return PyLong_FromSize_t(r);
}

/* ---- the codecs' libraries (codecs.c) ---- */

/* codec_library(which, path) -> bool: load a codec's library (see oc_codec_load). */
static PyObject *oc_py_codec_library(PyObject *Py_UNUSED(m), PyObject *args)
{
    int which;
    const char *path;
    if (!PyArg_ParseTuple(args, "is", &which, &path)) {
        return NULL;
    }
    int ok;
    Py_BEGIN_ALLOW_THREADS
    ok = oc_codec_load(which, path);
    Py_END_ALLOW_THREADS
    return PyBool_FromLong(ok);
}

/* codec_ready(codec) -> bool: whether the native reader decodes this codec number. */
static PyObject *oc_py_codec_ready(PyObject *Py_UNUSED(m), PyObject *args)
{
    int codec;
    if (!PyArg_ParseTuple(args, "i", &codec)) {
        return NULL;
    }
    return PyBool_FromLong(OC_CODEC_KIND(codec) != OC_CODEC_H5 && oc_codec_ready(codec));
}

/* crc32c(data, crc=0) -> int: the CRC-32C of a buffer's bytes, continuing ``crc`` (that of
 * the bytes before them), without the GIL. */
static PyObject *oc_py_crc32c(PyObject *Py_UNUSED(m), PyObject *args)
{
    PyObject *data;
    unsigned long seed = 0;
    if (!PyArg_ParseTuple(args, "O|k", &data, &seed)) {
        return NULL;
    }
    if (!oc_codec_lib_ready(OC_LIB_CRC32C)) {
        PyErr_SetString(PyExc_RuntimeError, "the CRC-32C library is not loaded");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_C_CONTIGUOUS) != 0) {
        return NULL;
    }
    uint32_t sum;
    Py_BEGIN_ALLOW_THREADS
    sum = oc_crc32c_extend((uint32_t)seed, view.buf, (size_t)view.len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(sum);
}

/* ---- HDF5 filters (h5filters.c), for tests: the same code paths on bytes ---- */

/* h5_decode(codec, mask, stored, chunk_nbytes, skip, n) -> bytes: decode stored bytes (given
 * as a buffer) through the pipeline, as the pager does from a file. */
static PyObject *oc_py_h5_decode(PyObject *Py_UNUSED(m), PyObject *args)
{
    int codec;
    unsigned mask;
    Py_buffer stored;
    Py_ssize_t chunk_n, skip, n;
    if (!PyArg_ParseTuple(args, "iIy*nnn", &codec, &mask, &stored, &chunk_n, &skip, &n)) {
        return NULL;
    }
    if (chunk_n < 0 || skip < 0 || n < 0 || skip + n > chunk_n) {
        PyBuffer_Release(&stored);
        PyErr_SetString(PyExc_ValueError, "the range is outside the chunk");
        return NULL;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, n);
    int rc = -1;
    char err[256] = "";
    if (out != NULL) {
        oc_source src = {.fd = -1, .path = NULL, .mem = stored.buf, .mem_len = stored.len};
        int c = oc_h5_masked(codec, mask);
        Py_BEGIN_ALLOW_THREADS
        rc = oc_h5_decode(c, &src, 0, (int64_t)stored.len, (size_t)chunk_n, (size_t)skip,
                          PyBytes_AS_STRING(out), (size_t)n, err, sizeof err);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&stored);
    if (out == NULL) {
        return NULL;
    }
    if (rc != 0) {
        Py_DECREF(out);
        PyErr_SetString(PyExc_ValueError, err);
        return NULL;
    }
    return out;
}

/* h5_masked(codec, mask) -> int: the codec without the steps a chunk's filter mask skips */
static PyObject *oc_py_h5_masked(PyObject *Py_UNUSED(m), PyObject *args)
{
    int codec;
    unsigned mask;
    if (!PyArg_ParseTuple(args, "iI", &codec, &mask)) {
        return NULL;
    }
    return PyLong_FromLong(oc_h5_masked(codec, mask));
}

static PyObject *oc_py_zlib_available(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    return PyBool_FromLong(oc_zlib_ready());
}

PyMethodDef oc_py_chunks_methods[] = {
    {"read_chunks", oc_py_read_chunks, METH_VARARGS, "read_chunks(jobs, sources, dests, threads) -> ([(job, message)], [job]): run a read's job table on the native pool; the failed jobs with their reasons, and the jobs whose file does not exist."},
    {"pool_workers", oc_py_pool_workers, METH_NOARGS, "pool_workers() -> int: the native pool's threads started in this process."},
    {"zstd_available", oc_py_zstd_available, METH_NOARGS, "Whether a libzstd is loaded (the one given with codec_library, else the system's libzstd.so.1)."},
    {"zstd_version", oc_py_zstd_version, METH_NOARGS, "zstd_version() -> int: the version number of the libzstd in use; 0 without one."},
    {"codec_library", oc_py_codec_library, METH_VARARGS, "codec_library(which, path) -> bool: load a codec's library (LIB_ZSTD before zstd's first use, LIB_BLOSC, LIB_LZ4, LIB_CRC32C)."},
    {"codec_ready", oc_py_codec_ready, METH_VARARGS, "codec_ready(codec) -> bool: whether the native reader decodes this codec number."},
    {"crc32c", oc_py_crc32c, METH_VARARGS,
     "crc32c(data, crc=0) -> int: the CRC-32C of a buffer's bytes, continuing crc."},
    {"zstd_write", oc_py_zstd_write, METH_VARARGS, "Write one zstd frame of a buffer's bytes to a file, compressed without the GIL."},
    {"zlib_available", oc_py_zlib_available, METH_NOARGS, "Whether libz.so.1 could be loaded (HDF5 deflate chunks)."},
    {"h5_masked", oc_py_h5_masked, METH_VARARGS, "h5_masked(codec, mask) -> int: an HDF5 codec without the filter steps a chunk's mask skips, as the pager applies it."},
    {"h5_decode", oc_py_h5_decode, METH_VARARGS, "h5_decode(codec, mask, stored, chunk_nbytes, skip, n) -> bytes: undo an HDF5 filter pipeline, as the pager does."},
    {NULL, NULL, 0, NULL},
};
