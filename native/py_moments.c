/* Module functions of the compute kernels (moments.c): the Python side checks the buffers,
 * the work runs without the GIL. */
#include "py_module.h"
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

PyMethodDef oc_py_moments_methods[] = {
    {"column_moments", oc_py_column_moments, METH_VARARGS,
     "column_moments(matrix, out): the means (out[:c]) and centred sums of squares (out[c:2c]) "
     "of a C-contiguous float32/float64 (rows, c) matrix's columns, in one pass over memory "
     "without the GIL; out holds 4 * c float64."},
    {NULL, NULL, 0, NULL},
};
