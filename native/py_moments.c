/* Module functions of the compute kernels (moments.c, bins.c): the Python side checks the
 * buffers, the work runs without the GIL. */
#include "py_module.h"
#include "oc_bins.h"
#include "oc_moments.h"

#include <string.h>

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
    if (PyObject_GetBuffer(matrix_obj, &x, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) {
        return NULL;
    }
    if (PyObject_GetBuffer(out_obj, &out, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE | PyBUF_FORMAT) !=
        0) {
        PyBuffer_Release(&x);
        return NULL;
    }
    PyObject *result = NULL;
    const char *xf = x.format == NULL ? "B" : x.format;
    const char *of = out.format == NULL ? "B" : out.format;
    if (xf[0] == '<' || xf[0] == '=' || xf[0] == '@') {
        xf++;
    }
    if (of[0] == '<' || of[0] == '=' || of[0] == '@') {
        of++;
    }
    int known = (strcmp(xf, "f") == 0 && x.itemsize == 4) ||
                (strcmp(xf, "d") == 0 && x.itemsize == 8);
    if (x.ndim != 2 || !known) {
        PyErr_SetString(PyExc_ValueError,
                        "column_moments: matrix must be 2-D float32 or float64");
        goto done;
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
                      const char *name, Py_buffer *view)
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
        PyErr_Format(PyExc_ValueError, "bin_counts: %s must hold %zd items of %zd bytes", name,
                     n, itemsize);
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
    if (PyObject_GetBuffer(matrix_obj, &x, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) {
        return NULL;
    }
    PyObject *result = NULL;
    const char *xf = x.format == NULL ? "B" : x.format;
    if (xf[0] == '<' || xf[0] == '=' || xf[0] == '@') {
        xf++;
    }
    int known = (strcmp(xf, "f") == 0 && x.itemsize == 4) ||
                (strcmp(xf, "d") == 0 && x.itemsize == 8);
    if (x.ndim != 2 || !known) {
        PyErr_SetString(PyExc_ValueError, "bin_counts: matrix must be 2-D float32 or float64");
        goto done;
    }
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
    if (get_vector(own_obj, cols, 1, 0, "own", &own) != 0) {
        goto done;
    }
    for (int i = 0; i < 5; i++) {
        if (get_vector(vectors[i], cols, 8, 0, names[i], &v[i]) != 0) {
            goto done;
        }
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = oc_bin_counts(x.buf, (size_t)x.itemsize, (size_t)rows, (size_t)cols, own.buf, bins,
                       v[0].buf, v[1].buf, v[2].buf, v[3].buf, v[4].buf, counts.buf);
    Py_END_ALLOW_THREADS
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
    {NULL, NULL, 0, NULL},
};
