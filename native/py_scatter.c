/* Module functions on a rechunk's scatter buffer, a scratch file (oocarray/_compute/_rechunk/
 * _buffer.py): writing many pieces of one size, each at its own offset, and punching holes,
 * both without the GIL.
 *
 * Why by hand: a scatter pass writes each source chunk's piece of every target slot, one
 * pwrite each (time -> series at 4 GiB: 131,072 writes of 32 KiB); from Python each took a
 * loop step, a memoryview and a GIL hand-over between the two workers. */
#include "py_module.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

/* pwrite_pieces(fd, data, offsets): write data (C-contiguous) as len(offsets) pieces of one
 * size, piece j at byte offsets[j] (an int64 buffer) of the file. */
static PyObject *pwrite_pieces(PyObject *Py_UNUSED(m), PyObject *args)
{
    int fd;
    PyObject *data, *offsets;
    if (!PyArg_ParseTuple(args, "iOO", &fd, &data, &offsets)) {
        return NULL;
    }
    Py_buffer view, at;
    if (PyObject_GetBuffer(data, &view, PyBUF_C_CONTIGUOUS) != 0) {
        return NULL;
    }
    if (PyObject_GetBuffer(offsets, &at, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    Py_ssize_t count = at.len / (Py_ssize_t)sizeof(int64_t);
    if (at.itemsize != (Py_ssize_t)sizeof(int64_t) || count == 0 || view.len % count != 0) {
        PyBuffer_Release(&at);
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError,
                        "pwrite_pieces: offsets are int64, one per piece of the data");
        return NULL;
    }
    size_t piece = (size_t)(view.len / count);
    const int64_t *where = at.buf;
    int err = 0;
    for (Py_ssize_t j = 0; j < count; j++) {
        if (where[j] < 0) {
            err = EINVAL;
        }
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t j = 0; j < count && !err; j++) {
        const char *from = (const char *)view.buf + (size_t)j * piece;
        off_t to = (off_t)where[j];
        size_t left = piece;
        while (left > 0) {
            ssize_t wrote = pwrite(fd, from, left, to);
            if (wrote < 0 && errno == EINTR) {
                continue;
            }
            if (wrote <= 0) {
                err = wrote < 0 ? errno : EIO;
                break;
            }
            from += wrote;
            to += wrote;
            left -= (size_t)wrote;
        }
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&at);
    PyBuffer_Release(&view);
    if (err) {
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    Py_RETURN_NONE;
}

/* punch_hole(fd, offset, nbytes): free a file's blocks and page-cache pages in a range, dirty
 * ones unwritten (the file system may wait for the disk to discard them). */
static PyObject *punch_hole(PyObject *Py_UNUSED(m), PyObject *args)
{
    int fd;
    long long offset, nbytes;
    if (!PyArg_ParseTuple(args, "iLL", &fd, &offset, &nbytes)) {
        return NULL;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)offset, (off_t)nbytes);
    Py_END_ALLOW_THREADS
    if (rc != 0) {
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    Py_RETURN_NONE;
}

PyMethodDef oc_py_scatter_methods[] = {
    {"pwrite_pieces", pwrite_pieces, METH_VARARGS,
     "Write data as pieces of one size, each at its own offset."},
    {"punch_hole", punch_hole, METH_VARARGS, "Free a file's blocks in a range, unwritten."},
    {NULL, NULL, 0, NULL},
};
