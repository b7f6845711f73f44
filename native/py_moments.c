/* Module functions of the compute kernels (moments.c, bins.c, key_columns.c): the Python side
 * checks the buffers, the work runs without the GIL. */
#include "py_module.h"
#include "oc_bins.h"
#include "oc_keys.h"
#include "oc_moments.h"

#include <string.h>

/* A C-contiguous 2-D float32/float64 buffer (rows, cols), else ValueError naming `what`. */
static int get_float_matrix(PyObject *obj, const char *what, Py_buffer *view)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) {
        view->obj = NULL;
        return -1;
    }
    const char *f = view->format == NULL ? "B" : view->format;
    if (f[0] == '<' || f[0] == '=' || f[0] == '@') {
        f++;
    }
    int known = (strcmp(f, "f") == 0 && view->itemsize == 4) ||
                (strcmp(f, "d") == 0 && view->itemsize == 8);
    if (view->ndim != 2 || !known) {
        PyErr_Format(PyExc_ValueError, "%s: matrix must be 2-D float32 or float64", what);
        PyBuffer_Release(view);
        view->obj = NULL;
        return -1;
    }
    return 0;
}

static void release_all(Py_buffer *views, int n)
{
    for (int i = 0; i < n; i++) {
        if (views[i].obj != NULL) {
            PyBuffer_Release(&views[i]);
        }
    }
}

/*
 * column_moments(matrix, out) -> None
 *
 * matrix: a C-contiguous 2-D buffer of float32 or float64 (rows, cols); out: a writable
 * C-contiguous float64 buffer of 4 * cols items, whose first cols get the columns' means,
 * the next cols their sums of squared deviations from the mean, the rest scratch.
 */
static PyObject *oc_py_column_moments(PyObject *Py_UNUSED(m), PyObject *args)
{
    PyObject *matrix_obj, *out_obj;
    if (!PyArg_ParseTuple(args, "OO", &matrix_obj, &out_obj)) {
        return NULL;
    }
    Py_buffer x, out;
    if (get_float_matrix(matrix_obj, "column_moments", &x) != 0) {
        return NULL;
    }
    if (PyObject_GetBuffer(out_obj, &out, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE | PyBUF_FORMAT) !=
        0) {
        PyBuffer_Release(&x);
        return NULL;
    }
    PyObject *result = NULL;
    const char *of = out.format == NULL ? "B" : out.format;
    if (of[0] == '<' || of[0] == '=' || of[0] == '@') {
        of++;
    }
    size_t rows = (size_t)x.shape[0], cols = (size_t)x.shape[1];
    if (strcmp(of, "d") != 0 || (size_t)out.len != 4 * cols * sizeof(double)) {
        PyErr_SetString(PyExc_ValueError, "column_moments: out must be 4 * columns float64");
        goto done;
    }
    double *o = out.buf;
    Py_BEGIN_ALLOW_THREADS
    (void)oc_column_moments(x.buf, (size_t)x.itemsize, rows, cols, o, o + cols, o + 2 * cols);
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&out);
    PyBuffer_Release(&x);
    return result;
}

/* A C-contiguous buffer of n items of itemsize bytes (None: none, buf NULL). */
static int get_vector(PyObject *obj, Py_ssize_t n, Py_ssize_t itemsize, int writable,
                      const char *what, const char *name, Py_buffer *view)
{
    view->obj = NULL;
    view->buf = NULL;
    if (obj == Py_None) {
        return 0;
    }
    int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) != 0) {
        view->obj = NULL;
        return -1;
    }
    if (view->len != n * itemsize) {
        PyErr_Format(PyExc_ValueError, "%s: %s must hold %zd items of %zd bytes", what, name, n,
                     itemsize);
        PyBuffer_Release(view);
        view->obj = NULL;
        return -1;
    }
    return 0;
}

/*
 * bin_counts(matrix, counts, own, start, scale, low, high, shift) -> None
 *
 * See oc_bin_counts: matrix a C-contiguous 2-D float32/float64 (rows, c) buffer; counts a
 * writable C-contiguous int64 (c, bins) buffer, added to; own c bytes; by value start and
 * scale (c float64 each, low, high and shift None), by key low, high and shift (c uint64
 * each, start and scale None).
 */
static PyObject *oc_py_bin_counts(PyObject *Py_UNUSED(m), PyObject *args)
{
    PyObject *matrix_obj, *counts_obj, *own_obj, *start_obj, *scale_obj, *low_obj, *high_obj,
        *shift_obj;
    if (!PyArg_ParseTuple(args, "OOOOOOOO", &matrix_obj, &counts_obj, &own_obj, &start_obj,
                          &scale_obj, &low_obj, &high_obj, &shift_obj)) {
        return NULL;
    }
    int by_value = start_obj != Py_None && scale_obj != Py_None && low_obj == Py_None &&
                   high_obj == Py_None && shift_obj == Py_None;
    int by_key = start_obj == Py_None && scale_obj == Py_None && low_obj != Py_None &&
                 high_obj != Py_None && shift_obj != Py_None;
    if (!by_value && !by_key) {
        PyErr_SetString(PyExc_ValueError,
                        "bin_counts: give start and scale (by value), or low, high and shift");
        return NULL;
    }
    Py_buffer x, counts, own, v[5];
    for (int i = 0; i < 5; i++) {
        v[i].obj = NULL;
    }
    counts.obj = NULL;
    own.obj = NULL;
    if (get_float_matrix(matrix_obj, "bin_counts", &x) != 0) {
        return NULL;
    }
    PyObject *result = NULL;
    Py_ssize_t rows = x.shape[0], cols = x.shape[1];
    if (PyObject_GetBuffer(counts_obj, &counts,
                           PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE | PyBUF_FORMAT) != 0) {
        counts.obj = NULL;
        goto done;
    }
    const char *cf = counts.format == NULL ? "B" : counts.format;
    if (cf[0] == '<' || cf[0] == '=' || cf[0] == '@') {
        cf++;
    }
    int int64 = counts.itemsize == 8 && (strcmp(cf, "q") == 0 || strcmp(cf, "l") == 0);
    if (!int64 || cols == 0 || counts.len % (cols * 8) != 0 || counts.len == 0) {
        PyErr_SetString(PyExc_ValueError, "bin_counts: counts must be int64 (columns, bins)");
        goto done;
    }
    size_t bins = (size_t)(counts.len / (cols * 8));
    PyObject *vectors[5] = {start_obj, scale_obj, low_obj, high_obj, shift_obj};
    static const char *names[5] = {"start", "scale", "low", "high", "shift"};
    if (get_vector(own_obj, cols, 1, 0, "bin_counts", "own", &own) != 0) {
        goto done;
    }
    for (int i = 0; i < 5; i++) {
        if (get_vector(vectors[i], cols, 8, 0, "bin_counts", names[i], &v[i]) != 0) {
            goto done;
        }
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = oc_bin_counts(x.buf, (size_t)x.itemsize, (size_t)rows, (size_t)cols, own.buf, bins,
                       v[0].buf, v[1].buf, v[2].buf, v[3].buf, v[4].buf, counts.buf);
    Py_END_ALLOW_THREADS
    if (rc == -3) {
        PyErr_SetString(PyExc_ValueError, "bin_counts: counts must have fewer than 65535 bins");
        goto done;
    }
    if (rc != 0) {
        PyErr_NoMemory(); /* (the item size is checked above) */
        goto done;
    }
    result = Py_NewRef(Py_None);
done:
    for (int i = 0; i < 5; i++) {
        if (v[i].obj != NULL) {
            PyBuffer_Release(&v[i]);
        }
    }
    if (own.obj != NULL) {
        PyBuffer_Release(&own);
    }
    if (counts.obj != NULL) {
        PyBuffer_Release(&counts);
    }
    PyBuffer_Release(&x);
    return result;
}

/*
 * key_summary(matrix, valid, low, high) -> None
 *
 * See oc_key_summary: matrix a C-contiguous 2-D float32/float64 (rows, c) buffer; valid a
 * writable int64 buffer of c items, low and high writable uint64 buffers of c items, all set.
 */
static PyObject *oc_py_key_summary(PyObject *Py_UNUSED(m), PyObject *args)
{
    PyObject *objs[4];
    if (!PyArg_ParseTuple(args, "OOOO", &objs[0], &objs[1], &objs[2], &objs[3])) {
        return NULL;
    }
    Py_buffer v[4];
    for (int i = 0; i < 4; i++) {
        v[i].obj = NULL;
    }
    PyObject *result = NULL;
    if (get_float_matrix(objs[0], "key_summary", &v[0]) != 0) {
        goto done;
    }
    Py_ssize_t rows = v[0].shape[0], cols = v[0].shape[1];
    static const char *names[4] = {"matrix", "valid", "low", "high"};
    for (int i = 1; i < 4; i++) {
        if (get_vector(objs[i], cols, 8, 1, "key_summary", names[i], &v[i]) != 0 ||
            v[i].buf == NULL) {
            if (!PyErr_Occurred()) {
                PyErr_Format(PyExc_ValueError, "key_summary: %s must be a buffer", names[i]);
            }
            goto done;
        }
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = oc_key_summary(v[0].buf, (size_t)v[0].itemsize, (size_t)rows, (size_t)cols, v[1].buf,
                        v[2].buf, v[3].buf);
    Py_END_ALLOW_THREADS
    if (rc != 0) {
        PyErr_NoMemory();
        goto done;
    }
    result = Py_NewRef(Py_None);
done:
    release_all(v, 4);
    return result;
}

/*
 * key_gather(matrix, own, low, high, group, found_groups, found_keys) -> int
 *
 * See oc_key_gather: matrix a C-contiguous 2-D float32/float64 (rows, c) buffer; own S * c
 * bytes, low and high S * c uint64, group S * c int64 (S: the slots); found_groups (int64)
 * and found_keys (uint64) writable buffers of the same length, or both None to count only.
 * Returns how many values were found; ValueError where they would not fit.
 */
static PyObject *oc_py_key_gather(PyObject *Py_UNUSED(m), PyObject *args)
{
    PyObject *objs[7];
    if (!PyArg_ParseTuple(args, "OOOOOOO", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4],
                          &objs[5], &objs[6])) {
        return NULL;
    }
    Py_buffer v[7];
    for (int i = 0; i < 7; i++) {
        v[i].obj = NULL;
    }
    PyObject *result = NULL;
    if (get_float_matrix(objs[0], "key_gather", &v[0]) != 0) {
        goto done;
    }
    Py_ssize_t rows = v[0].shape[0], cols = v[0].shape[1];
    if (PyObject_GetBuffer(objs[1], &v[1], PyBUF_C_CONTIGUOUS) != 0) {
        v[1].obj = NULL;
        goto done;
    }
    if (cols == 0 || v[1].len % cols != 0) {
        PyErr_SetString(PyExc_ValueError, "key_gather: own must hold slots x columns bytes");
        goto done;
    }
    Py_ssize_t slots = v[1].len / cols;
    static const char *names[7] = {"matrix", "own", "low", "high", "group", "found_groups",
                                   "found_keys"};
    for (int i = 2; i < 5; i++) {
        if (objs[i] == Py_None) {
            PyErr_Format(PyExc_ValueError, "key_gather: %s must be a buffer", names[i]);
            goto done;
        }
        if (get_vector(objs[i], slots * cols, 8, 0, "key_gather", names[i], &v[i]) != 0) {
            goto done;
        }
    }
    if ((objs[5] == Py_None) != (objs[6] == Py_None)) {
        PyErr_SetString(PyExc_ValueError, "key_gather: give both found buffers, or neither");
        goto done;
    }
    Py_ssize_t capacity = 0;
    if (objs[5] != Py_None) {
        if (PyObject_GetBuffer(objs[5], &v[5], PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) != 0) {
            v[5].obj = NULL;
            goto done;
        }
        capacity = v[5].len / 8;
        if (get_vector(objs[6], capacity, 8, 1, "key_gather", names[6], &v[6]) != 0) {
            goto done;
        }
    }
    size_t found;
    Py_BEGIN_ALLOW_THREADS
    found = oc_key_gather(v[0].buf, (size_t)v[0].itemsize, (size_t)rows, (size_t)cols,
                          (size_t)slots, v[1].buf, v[2].buf, v[3].buf, v[4].buf, v[5].buf,
                          v[6].buf, (size_t)capacity);
    Py_END_ALLOW_THREADS
    if (found == SIZE_MAX) {
        PyErr_NoMemory();
        goto done;
    }
    result = PyLong_FromSize_t(found);
done:
    release_all(v, 7);
    return result;
}

PyMethodDef oc_py_moments_methods[] = {
    {"column_moments", oc_py_column_moments, METH_VARARGS,
     "column_moments(matrix, out): the means (out[:c]) and centred sums of squares (out[c:2c]) "
     "of a C-contiguous float32/float64 (rows, c) matrix's columns, in one pass over memory "
     "without the GIL; out holds 4 * c float64."},
    {"bin_counts", oc_py_bin_counts, METH_VARARGS,
     "bin_counts(matrix, counts, own, start, scale, low, high, shift): add to the int64 "
     "(c, bins) counts the values of the owned columns of a C-contiguous float32/float64 "
     "(rows, c) matrix, binned by value (start, scale) or by order key in [low, high] "
     "(shift), NaN left out, without the GIL."},
    {"key_summary", oc_py_key_summary, METH_VARARGS,
     "key_summary(matrix, valid, low, high): per column of a C-contiguous float32/float64 "
     "(rows, c) matrix, its values that are not NaN (int64 valid) and the smallest and "
     "largest of their order keys (uint64 low, high), without the GIL."},
    {"key_gather", oc_py_key_gather, METH_VARARGS,
     "key_gather(matrix, own, low, high, group, found_groups, found_keys): the order keys of "
     "a C-contiguous float32/float64 (rows, c) matrix in the owned intervals [low, high] of "
     "each slot and column ((S, c) each), with the interval's group, written to the found "
     "buffers as far as they hold (None: counted only); returns how many there are, written "
     "or not, without the GIL."},
    {NULL, NULL, 0, NULL},
};
