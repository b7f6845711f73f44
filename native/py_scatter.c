/* Module functions on a rechunk's scatter buffer, a scratch file (oocarray/_compute/_rechunk/
 * _buffer.py): writing many pieces of one size, each at its own offset, and punching holes,
 * both without the GIL; gathering a strided array's short runs; and, for the tests and the
 * benchmarks, counting the pages of a file's range that are in the page cache.
 *
 * Why by hand: a scatter pass writes each source chunk's piece of every target slot, one
 * pwrite each (time -> series at 4 GiB: 131,072 writes of 32 KiB); from Python each took a
 * loop step, a memoryview and a GIL hand-over between the two workers. */
#include "py_module.h"
#include "oc_chunks.h"
#include "oc_codecs.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* The most axes copy_runs walks (NumPy allows 64). */
#define OC_RUN_AXES 30

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

/* Copies `rows` runs of `run` bytes, run j from src + j * s_step to dst + j * d_step: a
 * fixed-size memcpy per run where the size is a common one, which the compiler inlines. */
static void copy_row(char *dst, const char *src, Py_ssize_t rows, size_t run, Py_ssize_t d_step,
                     Py_ssize_t s_step)
{
#define OC_RUNS(size)                                                                              \
    for (Py_ssize_t j = 0; j < rows; j++, dst += d_step, src += s_step) {                          \
        memcpy(dst, src, size);                                                                    \
    }                                                                                              \
    return
    switch (run) {
    case 4: OC_RUNS(4);
    case 8: OC_RUNS(8);
    case 16: OC_RUNS(16);
    case 32: OC_RUNS(32);
    case 64: OC_RUNS(64);
    case 128: OC_RUNS(128);
    case 256: OC_RUNS(256);
    default: OC_RUNS(run);
    }
#undef OC_RUNS
}

/* The bytes from a strided buffer's lowest to its highest element, [*low, *high). */
static void span_of(const Py_buffer *b, const char **low, const char **high)
{
    *low = *high = b->buf;
    for (int a = 0; a < b->ndim; a++) {
        Py_ssize_t reach = (b->shape[a] - 1) * b->strides[a];
        *(reach < 0 ? low : high) += reach;
    }
    *high += b->itemsize;
}

static int spans_overlap(const Py_buffer *x, const Py_buffer *y)
{
    const char *x_low, *x_high, *y_low, *y_high;
    span_of(x, &x_low, &x_high);
    span_of(y, &y_low, &y_high);
    return x_low < y_high && y_low < x_high;
}

/* dst[...] = src for two arrays of `ndim` axes (at most OC_RUN_AXES) of one shape and item
 * size, any strides: the trailing axes both lie contiguous along copied as one run, axis
 * `last` by copy_row, the axes before it walked by an odometer. */
static void copy_strided(char *dst, const Py_ssize_t *d_strides, const char *src,
                         const Py_ssize_t *s_strides, const Py_ssize_t *shape, int ndim,
                         size_t itemsize)
{
    size_t run = itemsize;
    int last = ndim - 1;
    while (last >= 0 && (shape[last] == 1 || (d_strides[last] == (Py_ssize_t)run &&
                                               s_strides[last] == (Py_ssize_t)run))) {
        run *= (size_t)shape[last];
        last--;
    }
    if (last < 0) {
        memcpy(dst, src, run);
        return;
    }
    Py_ssize_t index[OC_RUN_AXES] = {0};
    for (;;) {
        char *d = dst;
        const char *s = src;
        for (int a = 0; a < last; a++) {
            d += index[a] * d_strides[a];
            s += index[a] * s_strides[a];
        }
        copy_row(d, s, shape[last], run, d_strides[last], s_strides[last]);
        int a = last - 1;
        for (; a >= 0; a--) {
            if (++index[a] < shape[a]) {
                break;
            }
            index[a] = 0;
        }
        if (a < 0) {
            return;
        }
    }
}

/* copy_runs(dst, src): dst[...] = src for two arrays of one shape and item size, any strides.
 *
 * Why by hand: NumPy copies a strided array one call per innermost run, which for short runs
 * (a rechunk's pieces of 64-byte rows, gathered before they are written) cost about 2.5x this
 * loop of inlined fixed-size copies. */
static PyObject *copy_runs(PyObject *Py_UNUSED(m), PyObject *args)
{
    PyObject *dst_obj, *src_obj;
    if (!PyArg_ParseTuple(args, "OO", &dst_obj, &src_obj)) {
        return NULL;
    }
    Py_buffer dst, src;
    if (PyObject_GetBuffer(dst_obj, &dst, PyBUF_STRIDES | PyBUF_WRITABLE | PyBUF_FORMAT) != 0) {
        return NULL;
    }
    if (PyObject_GetBuffer(src_obj, &src, PyBUF_STRIDES | PyBUF_FORMAT) != 0) {
        PyBuffer_Release(&dst);
        return NULL;
    }
    /* Python objects ('O' in a format) are references: copying their bytes would not count
     * them, so they are refused. */
    if ((dst.format && strchr(dst.format, 'O')) || (src.format && strchr(src.format, 'O'))) {
        PyBuffer_Release(&src);
        PyBuffer_Release(&dst);
        PyErr_SetString(PyExc_TypeError, "copy_runs: arrays of Python objects are not copied");
        return NULL;
    }
    int ndim = dst.ndim;
    int same = src.ndim == ndim && src.itemsize == dst.itemsize && ndim <= OC_RUN_AXES;
    for (int a = 0; same && a < ndim; a++) {
        same = src.shape[a] == dst.shape[a];
    }
    if (!same) {
        PyBuffer_Release(&src);
        PyBuffer_Release(&dst);
        PyErr_SetString(PyExc_ValueError,
                        "copy_runs: the arrays differ in shape or item size (or have over 30 axes)");
        return NULL;
    }
    Py_ssize_t total = 1;
    for (int a = 0; a < ndim; a++) {
        total *= dst.shape[a];
    }
    /* memcpy's runs must not overlap: arrays sharing bytes are refused (NumPy copies those). */
    if (total > 0 && spans_overlap(&dst, &src)) {
        PyBuffer_Release(&src);
        PyBuffer_Release(&dst);
        PyErr_SetString(PyExc_ValueError, "copy_runs: the arrays share memory");
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    if (total > 0) {
        copy_strided(dst.buf, dst.strides, src.buf, src.strides, dst.shape, ndim,
                     (size_t)dst.itemsize);
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    Py_RETURN_NONE;
}

/* zstd_append_frames(fds, frames, level, checksum, tune_bytes, crcs, scratch): frames[j] (an
 * array of any strides, one frame per index of its first axis) compressed as one zstd frame
 * and appended to fds[j] (int64) from its position, with the content size in the header, and
 * crcs[j] (uint32) extended over what was written; a frame that is not contiguous is gathered
 * first into scratch (a writable buffer of a frame's bytes or more, the caller's: kept from
 * call to call, its pages are not faulted in anew each time).  All of it without the GIL;
 * the first failure stops it (OSError with its errno; the frames before it are written).
 *
 * Why by hand: a rechunk's frames pass (oocarray/_compute/_rechunk/_frames.py) appends a frame
 * to every target chunk a strip touches (time -> series at 4 GiB: 262,144 of 16 KiB), and each
 * call from Python cost tens of microseconds beside the frame's own work. */
static PyObject *zstd_append_frames(PyObject *Py_UNUSED(m), PyObject *args)
{
    PyObject *fds_obj, *frames_obj, *crcs_obj, *scratch_obj;
    int level, checksum;
    Py_ssize_t tune_bytes;
    if (!PyArg_ParseTuple(args, "OOipnOO", &fds_obj, &frames_obj, &level, &checksum, &tune_bytes,
                          &crcs_obj, &scratch_obj)) {
        return NULL;
    }
    if (tune_bytes < 0) {
        PyErr_SetString(PyExc_ValueError, "tune_bytes must be 0 or more");
        return NULL;
    }
    if (!oc_zstd_ready()) {
        PyErr_SetString(PyExc_RuntimeError, "no libzstd is available");
        return NULL;
    }
    if (!oc_codec_lib_ready(OC_LIB_CRC32C)) {
        PyErr_SetString(PyExc_RuntimeError, "the CRC-32C library is not loaded");
        return NULL;
    }
    Py_buffer fds, frames, crcs, scratch;
    if (PyObject_GetBuffer(scratch_obj, &scratch, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) != 0) {
        return NULL;
    }
    if (PyObject_GetBuffer(fds_obj, &fds, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) {
        PyBuffer_Release(&scratch);
        return NULL;
    }
    if (PyObject_GetBuffer(frames_obj, &frames, PyBUF_STRIDES | PyBUF_FORMAT) != 0) {
        PyBuffer_Release(&fds);
        PyBuffer_Release(&scratch);
        return NULL;
    }
    if (PyObject_GetBuffer(crcs_obj, &crcs, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE | PyBUF_FORMAT) !=
        0) {
        PyBuffer_Release(&frames);
        PyBuffer_Release(&fds);
        PyBuffer_Release(&scratch);
        return NULL;
    }
    Py_ssize_t count = fds.len / 8;
    const char *bad = NULL;
    if (fds.itemsize != 8 || crcs.itemsize != 4 || crcs.len / 4 != count) {
        bad = "zstd_append_frames: fds are int64 and crcs uint32, one each per frame";
    } else if (frames.ndim < 1 || frames.ndim > OC_RUN_AXES || frames.shape[0] != count) {
        bad = "zstd_append_frames: frames have one index of their first axis per fd (and at "
              "most 30 axes)";
    } else if (frames.format && strchr(frames.format, 'O')) {
        bad = "zstd_append_frames: arrays of Python objects are not written";
    }
    int ndim = frames.ndim - 1;
    const Py_ssize_t *shape = frames.shape + 1, *strides = frames.strides + 1;
    size_t nbytes = (size_t)frames.itemsize;
    int contiguous = 1;
    for (int a = ndim - 1; bad == NULL && a >= 0; a--) {
        contiguous = contiguous && (shape[a] == 1 || strides[a] == (Py_ssize_t)nbytes);
        nbytes *= (size_t)shape[a];
    }
    if (bad == NULL && !contiguous && (size_t)scratch.len < nbytes) {
        bad = "zstd_append_frames: scratch holds less than a frame";
    }
    if (bad != NULL) {
        PyBuffer_Release(&crcs);
        PyBuffer_Release(&frames);
        PyBuffer_Release(&fds);
        PyBuffer_Release(&scratch);
        PyErr_SetString(PyExc_ValueError, bad);
        return NULL;
    }
    char *gathered = contiguous ? NULL : scratch.buf;
    Py_ssize_t packed[OC_RUN_AXES]; /* a frame's strides in C order, in gathered */
    for (int a = ndim - 1; a >= 0; a--) {
        packed[a] = a == ndim - 1 ? frames.itemsize : packed[a + 1] * shape[a + 1];
    }
    const int64_t *fd_of = fds.buf;
    uint32_t *crc_of = crcs.buf;
    int result = 0;
    size_t r = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t j = 0; j < count && result == 0; j++) {
        const char *frame = (const char *)frames.buf + j * frames.strides[0];
        if (gathered != NULL) {
            copy_strided(gathered, packed, frame, strides, shape, ndim, (size_t)frames.itemsize);
            frame = gathered;
        }
        uint32_t running = crc_of[j];
        result = oc_zstd_write((int)fd_of[j], frame, nbytes, level, checksum, 0,
                               (size_t)tune_bytes, 0, &running, &r);
        if (result == 0) {
            crc_of[j] = running;
        }
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&crcs);
    PyBuffer_Release(&frames);
    PyBuffer_Release(&fds);
    PyBuffer_Release(&scratch);
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

/* cached_pages(fd, offset, nbytes): how many pages of a file's byte range are in the page cache.
 *
 * Why mincore on a mapping never touched: a read that must not wait (preadv RWF_NOWAIT) starts
 * the kernel's readahead of the pages it finds missing, so asking would bring them in. */
static PyObject *cached_pages(PyObject *Py_UNUSED(m), PyObject *args)
{
    int fd;
    long long offset, nbytes;
    if (!PyArg_ParseTuple(args, "iLL", &fd, &offset, &nbytes)) {
        return NULL;
    }
    if (offset < 0 || nbytes < 0 || nbytes > LLONG_MAX - offset) {
        PyErr_SetString(PyExc_ValueError, "offset and nbytes must be >= 0 and end in a file");
        return NULL;
    }
    if (nbytes == 0) {
        return PyLong_FromLong(0);
    }
    long long page = sysconf(_SC_PAGESIZE);
    long long first = offset / page * page;
    size_t length = (size_t)(offset + nbytes - first);
    size_t pages = (length + (size_t)page - 1) / (size_t)page;
    unsigned char *vec = malloc(pages);
    if (vec == NULL) {
        return PyErr_NoMemory();
    }
    int err = 0;
    size_t resident = 0;
    Py_BEGIN_ALLOW_THREADS
    void *map = mmap(NULL, length, PROT_READ, MAP_SHARED, fd, (off_t)first);
    if (map == MAP_FAILED) {
        err = errno;
    } else {
        if (mincore(map, length, vec) != 0) {
            err = errno;
        }
        munmap(map, length);
        for (size_t i = 0; err == 0 && i < pages; i++) {
            resident += vec[i] & 1;
        }
    }
    Py_END_ALLOW_THREADS
    free(vec);
    if (err != 0) {
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return PyLong_FromSize_t(resident);
}

PyMethodDef oc_py_scatter_methods[] = {
    {"pwrite_pieces", pwrite_pieces, METH_VARARGS,
     "Write data as pieces of one size, each at its own offset."},
    {"punch_hole", punch_hole, METH_VARARGS, "Free a file's blocks in a range, unwritten."},
    {"copy_runs", copy_runs, METH_VARARGS, "dst[...] = src, any strides, short runs inlined."},
    {"zstd_append_frames", zstd_append_frames, METH_VARARGS,
     "Append a zstd frame of each frames[j] to fds[j], extending crcs[j], without the GIL."},
    {"cached_pages", cached_pages, METH_VARARGS,
     "How many pages of a file's byte range are in the page cache."},
    {NULL, NULL, 0, NULL},
};
