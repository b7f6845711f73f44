/*
 * The Pages object (py_pages.c), shared with the methods of arrays in object stores
 * (py_pages_remote.c).  Not for any other file.
 */
#ifndef OC_PY_PAGES_H
#define OC_PY_PAGES_H

#include "py_module.h"
#include "oc_pager.h"

typedef struct {
    PyObject_HEAD
    pg_array *pages;
    Py_ssize_t exports;
    PyObject *on_release; /* called with the object once the last view is gone (write-back) */
    PyObject *weakreflist;
} PagesObject;

/* py_pages_remote.c: the feeder of an array in an object store, from Pages(remote_feeder=):
 * 0, or -1 with an exception; a buffer lent to the pager given back (the GIL held); and the
 * methods of such an array. */
int oc_py_pages_set_remote(PagesObject *self, PyObject *feeder);
void oc_py_give_back(void *owner);
PyObject *oc_py_pages_remote_token(PagesObject *self, PyObject *args);
PyObject *oc_py_pages_remote_give(PagesObject *self, PyObject *args);
PyObject *oc_py_pages_remote_absent(PagesObject *self, PyObject *arg);
PyObject *oc_py_pages_remote_keep(PagesObject *self, PyObject *args);
PyObject *oc_py_pages_remote_position(PagesObject *self, PyObject *args);
PyObject *oc_py_pages_remote_progress(PagesObject *self, PyObject *arg);

#endif
