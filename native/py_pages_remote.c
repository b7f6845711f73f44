/* The methods of a Pages object over an array in an object store (pager_remote.c,
 * pager_feeder.c): how its feeder starts, the chunks its process hands over in memory, and the
 * module function that stops its feeder. */
#include "py_pages.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* A list of bytes as a NULL-terminated array of the strings borrowed from it, or NULL with an
 * exception. */
static char **borrowed_strings(PyObject *list, const char *what)
{
    if (!PyList_Check(list)) {
        PyErr_Format(PyExc_TypeError, "remote_feeder: %s must be a list of bytes", what);
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(list);
    char **out = PyMem_Calloc((size_t)n + 1, sizeof *out);
    if (out == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(list, i);
        const char *s = PyBytes_Check(item) ? PyBytes_AS_STRING(item) : NULL;
        if (s == NULL || strlen(s) != (size_t)PyBytes_GET_SIZE(item)) {
            PyErr_Format(PyExc_TypeError, "remote_feeder: %s must be a list of bytes without NUL", what);
            PyMem_Free(out);
            return NULL;
        }
        out[i] = (char *)s;
    }
    return out;
}

/* remote_feeder=(argv, env, config, log), all bytes: how the pager starts the feeder process,
 * each time a process first needs one (argv[0] an absolute path; env as b"NAME=value"; config
 * written on its stdin; log the file its stderr goes to). */
int oc_py_pages_set_remote(PagesObject *self, PyObject *feeder)
{
    PyObject *argv, *env;
    Py_buffer config;
    const char *log;
    if (!PyArg_ParseTuple(feeder, "O!O!y*y:remote_feeder",
                          &PyList_Type, &argv, &PyList_Type, &env, &config, &log)) {
        return -1;
    }
    oc_feeder_spec spec = {.config = config.buf, .config_n = (size_t)config.len};
    spec.argv = borrowed_strings(argv, "argv");
    spec.envp = spec.argv ? borrowed_strings(env, "env") : NULL;
    spec.log = spec.envp ? (char *)log : NULL;
    int rc = -1;
    if (spec.log != NULL) {
        if (spec.argv[0] == NULL || spec.argv[0][0] != '/') {
            PyErr_SetString(PyExc_ValueError, "remote_feeder: argv[0] must be an absolute path");
        } else {
            int e = oc_pager_set_remote(self->pages, &spec);
            rc = e ? (oc_py_errno_error(e), -1) : 0;
        }
    }
    PyMem_Free(spec.argv);
    PyMem_Free(spec.envp);
    PyBuffer_Release(&config);
    return rc;
}

void oc_py_give_back(void *owner)
{
    PyBuffer_Release((Py_buffer *)owner);
    PyMem_Free(owner);
}

PyObject *oc_py_pages_remote_token(PagesObject *self, PyObject *Py_UNUSED(args))
{
    return PyLong_FromUnsignedLongLong(oc_pager_remote_token(self->pages));
}

PyObject *oc_py_pages_remote_give(PagesObject *self, PyObject *args)
{
    Py_ssize_t c;
    PyObject *data;
    if (!PyArg_ParseTuple(args, "nO", &c, &data)) {
        return NULL;
    }
    if (c < 0) {
        return oc_py_errno_error(EINVAL);
    }
    Py_buffer *view = PyMem_Malloc(sizeof *view);
    if (view == NULL) {
        return PyErr_NoMemory();
    }
    if (PyObject_GetBuffer(data, view, PyBUF_SIMPLE) < 0) {
        PyMem_Free(view);
        return NULL;
    }
    int e;
    Py_BEGIN_ALLOW_THREADS
    e = oc_pager_remote_lend(self->pages, (size_t)c, view->buf, (size_t)view->len, view);
    Py_END_ALLOW_THREADS
    if (e) {
        oc_py_give_back(view);
        return oc_py_errno_error(e);
    }
    return PyLong_FromSize_t(oc_pager_remote_spent(oc_py_give_back));
}

PyObject *oc_py_pages_remote_absent(PagesObject *self, PyObject *arg)
{
    Py_ssize_t c = PyLong_AsSsize_t(arg);
    if (c == -1 && PyErr_Occurred()) {
        return NULL;
    }
    int e = c < 0 ? EINVAL : oc_pager_remote_absent(self->pages, (size_t)c);
    if (e) {
        return oc_py_errno_error(e);
    }
    Py_RETURN_NONE;
}

PyObject *oc_py_pages_remote_keep(PagesObject *self, PyObject *args)
{
    Py_ssize_t lo, hi;
    if (!PyArg_ParseTuple(args, "nn", &lo, &hi)) {
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    oc_pager_remote_keep(self->pages, lo < 0 ? 0 : (size_t)lo, hi < 0 ? 0 : (size_t)hi);
    Py_END_ALLOW_THREADS
    return PyLong_FromSize_t(oc_pager_remote_spent(oc_py_give_back));
}

PyObject *oc_py_pages_remote_position(PagesObject *self, PyObject *Py_UNUSED(args))
{
    return PyLong_FromLongLong(oc_pager_remote_pos(self->pages));
}

PyObject *oc_py_pages_remote_progress(PagesObject *self, PyObject *arg)
{
    long fd = PyLong_AsLong(arg);
    if (fd == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (fd < -1 || fd > INT_MAX) {
        return oc_py_errno_error(EBADF);
    }
    int e = oc_pager_remote_progress(self->pages, (int)fd);
    if (e) {
        return oc_py_errno_error(e);
    }
    Py_RETURN_NONE;
}

static PyObject *pager_stop_feeder(PyObject *Py_UNUSED(m), PyObject *arg)
{
    unsigned long long token = PyLong_AsUnsignedLongLong(arg);
    if (token == (unsigned long long)-1 && PyErr_Occurred()) {
        return NULL;
    }
    int e;
    Py_BEGIN_ALLOW_THREADS
    e = oc_pager_stop_feeder(token);
    Py_END_ALLOW_THREADS
    return PyBool_FromLong(e == 0);
}

PyMethodDef oc_py_pages_remote_methods[] = {
    {"pager_stop_feeder", pager_stop_feeder, METH_O, "pager_stop_feeder(token): kill and wait for the feeder of the remote array with that token in this process, and start none again for it; whether the array is still there."},
    {NULL, NULL, 0, NULL},
};
