/* Module functions of the chunk reader (chunks.c) and the codecs (codecs.c, h5filters.c): the
 * Python side parses and checks, the work runs without the GIL in those files. */
#include "py_module.h"
#include "oc_chunks.h"
#include "oc_codecs.h"

#include <stdio.h>

/* ---- the chunk reader (chunks.c) ---- */

static PyObject *oc_py_zstd_available(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    return PyBool_FromLong(oc_zstd_ready());
}

/*
 * read_chunks(codec, jobs, dests, chunk_nbytes, counter) -> None or (job, message)
 *
 * jobs: C-contiguous int64 (n, 7) array of oc_job_spec rows; dests: writable C-contiguous buffers
 * the jobs' ranges fall in (checked here); counter: an int64 array of one element shared by the
 * threads running the same jobs.  Runs jobs until none is left; the first failure stops every
 * thread and is returned as (index, message).
 */
static PyObject *oc_py_read_chunks(PyObject *Py_UNUSED(m), PyObject *args)
{
    int codec;
    PyObject *jobs_obj, *dests;
    Py_ssize_t chunk_n;
    PyObject *counter_obj;
    if (!PyArg_ParseTuple(args, "iOO!nO", &codec, &jobs_obj, &PyList_Type, &dests, &chunk_n,
                          &counter_obj)) {
        return NULL;
    }
    if (OC_CODEC_KIND(codec) == OC_CODEC_H5 || !oc_codec_ready(codec)) {
        PyErr_Format(PyExc_ValueError, "codec %d is unknown or its library is not loaded", codec);
        return NULL;
    }
    if (chunk_n < 0) {
        PyErr_SetString(PyExc_ValueError, "chunk_nbytes must be >= 0");
        return NULL;
    }
    Py_buffer jobs_view, counter_view;
    if (PyObject_GetBuffer(jobs_obj, &jobs_view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) {
        return NULL;
    }
    if (PyObject_GetBuffer(counter_obj, &counter_view,
                           PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) {
        PyBuffer_Release(&jobs_view);
        return NULL;
    }
    Py_ssize_t nbuf = PyList_GET_SIZE(dests);
    Py_ssize_t n = jobs_view.len / (OC_JOB_FIELDS * 8);
    Py_buffer *views = NULL;
    char **bases = NULL; /* each view's buf */
    Py_ssize_t held = 0;
    PyObject *result = NULL;
    if (jobs_view.itemsize != 8 || jobs_view.len % (OC_JOB_FIELDS * 8) != 0 ||
        counter_view.len != 8 || counter_view.itemsize != 8 ||
        ((uintptr_t)counter_view.buf & 7) != 0 || ((uintptr_t)jobs_view.buf & 7) != 0) {
        PyErr_SetString(PyExc_ValueError, "jobs must be int64 (n, 7), counter int64 (1,)");
        goto done;
    }
    views = PyMem_Calloc((size_t)(nbuf ? nbuf : 1), sizeof *views);
    bases = PyMem_Calloc((size_t)(nbuf ? nbuf : 1), sizeof *bases);
    if (views == NULL || bases == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (; held < nbuf; held++) {
        if (PyObject_GetBuffer(PyList_GET_ITEM(dests, held), &views[held],
                               PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) != 0) {
            goto done;
        }
    }
    const oc_job_spec *specs = jobs_view.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        const oc_job_spec *j = &specs[i];
        if (j->buffer < 0 || j->buffer >= nbuf || j->at < 0 || j->len < 0 || j->skip < 0 ||
            j->at > views[j->buffer].len - j->len || j->offset < 0) {
            PyErr_Format(PyExc_ValueError, "job %zd asks for bytes outside its buffer", i);
            goto done;
        }
    }
    for (Py_ssize_t i = 0; i < nbuf; i++) {
        bases[i] = views[i].buf;
    }
    _Atomic int64_t *next = counter_view.buf;
    Py_ssize_t failed;
    char err[256] = "";
    Py_BEGIN_ALLOW_THREADS
    failed = (Py_ssize_t)oc_run_jobs(codec, specs, (int64_t)n, bases, (size_t)chunk_n, next, err,
                                     sizeof err);
    Py_END_ALLOW_THREADS
    result = failed < 0 ? Py_NewRef(Py_None) : Py_BuildValue("(ns)", failed, err);
done:
    for (Py_ssize_t i = 0; i < held; i++) {
        PyBuffer_Release(&views[i]);
    }
    PyMem_Free(views);
    PyMem_Free(bases);
    PyBuffer_Release(&counter_view);
    PyBuffer_Release(&jobs_view);
    return result;
}

/*
 * zstd_write(fd, data, level, checksum, crc32c=False) -> int: write one zstd frame of data's
 * bytes to fd (from its current position), with the content size in the header, as numcodecs
 * writes it, and a checksum when asked; then, with crc32c, the CRC-32C of the frame (zarr's
 * crc32c codec after zstd).  Compressed without the GIL into this thread's buffer.  Returns the
 * bytes written; a failed write raises OSError with its errno (ENOSPC on a full disk).
 */
static PyObject *oc_py_zstd_write(PyObject *Py_UNUSED(m), PyObject *args)
{
    int fd, level, checksum, crc = 0;
    PyObject *data;
    if (!PyArg_ParseTuple(args, "iOip|p", &fd, &data, &level, &checksum, &crc)) {
        return NULL;
    }
    if (!oc_zstd_ready()) {
        PyErr_SetString(PyExc_RuntimeError, "libzstd.so.1 is not available");
        return NULL;
    }
    if (crc && !oc_codec_lib_ready(OC_LIB_CRC32C)) {
        PyErr_SetString(PyExc_RuntimeError, "the CRC-32C library is not loaded");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_C_CONTIGUOUS) != 0) {
        return NULL;
    }
    size_t r;
    int result;
    Py_BEGIN_ALLOW_THREADS
    result = oc_zstd_write(fd, view.buf, (size_t)view.len, level, checksum, crc, &r);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (result == OC_ZW_NOMEM) {
        return PyErr_NoMemory();
    }
    if (result == OC_ZW_ZSTD) {
        PyErr_Format(PyExc_ValueError, "zstd: %s", oc_zstd.error_name(r));
        return NULL;
    }
    if (result != 0) {
        errno = result;
        return PyErr_SetFromErrno(PyExc_OSError);
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

/* crc32c(data) -> int: the CRC-32C of a buffer's bytes, without the GIL. */
static PyObject *oc_py_crc32c(PyObject *Py_UNUSED(m), PyObject *arg)
{
    if (!oc_codec_lib_ready(OC_LIB_CRC32C)) {
        PyErr_SetString(PyExc_RuntimeError, "the CRC-32C library is not loaded");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_C_CONTIGUOUS) != 0) {
        return NULL;
    }
    uint32_t sum;
    Py_BEGIN_ALLOW_THREADS
    sum = oc_crc32c(view.buf, (size_t)view.len);
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
    FILE *f = tmpfile();
    PyObject *out = PyBytes_FromStringAndSize(NULL, n);
    int rc = -1;
    char err[256] = "";
    if (f != NULL && out != NULL &&
        fwrite(stored.buf, 1, (size_t)stored.len, f) == (size_t)stored.len && fflush(f) == 0) {
        int fd = fileno(f);
        int c = oc_h5_masked(codec, mask);
        Py_BEGIN_ALLOW_THREADS
        rc = oc_h5_decode(c, fd, 0, (int64_t)stored.len, (size_t)chunk_n, (size_t)skip,
                          PyBytes_AS_STRING(out), (size_t)n, err, sizeof err);
        Py_END_ALLOW_THREADS
    }
    else if (out != NULL) {
        snprintf(err, sizeof err, "cannot write a temporary file");
    }
    if (f != NULL) {
        fclose(f);
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

static PyObject *oc_py_zlib_available(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    return PyBool_FromLong(oc_zlib_ready());
}

PyMethodDef oc_py_chunks_methods[] = {
    {"read_chunks", oc_py_read_chunks, METH_VARARGS, "Run chunk jobs (read, decode) until none is left; None or (job, message)."},
    {"zstd_available", oc_py_zstd_available, METH_NOARGS, "Whether libzstd.so.1 could be loaded."},
    {"codec_library", oc_py_codec_library, METH_VARARGS, "codec_library(which, path) -> bool: load a codec's library (LIB_BLOSC, LIB_LZ4, LIB_CRC32C)."},
    {"codec_ready", oc_py_codec_ready, METH_VARARGS, "codec_ready(codec) -> bool: whether the native reader decodes this codec number."},
    {"crc32c", oc_py_crc32c, METH_O, "crc32c(data) -> int: the CRC-32C of a buffer's bytes."},
    {"zstd_write", oc_py_zstd_write, METH_VARARGS, "Write one zstd frame of a buffer's bytes to a file, compressed without the GIL."},
    {"zlib_available", oc_py_zlib_available, METH_NOARGS, "Whether libz.so.1 could be loaded (HDF5 deflate chunks)."},
    {"h5_decode", oc_py_h5_decode, METH_VARARGS, "h5_decode(codec, mask, stored, chunk_nbytes, skip, n) -> bytes: undo an HDF5 filter pipeline, as the pager does."},
    {NULL, NULL, 0, NULL},
};
