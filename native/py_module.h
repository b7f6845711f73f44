/*
 * What the files of the Python bindings (module.c, py_*.c) share: the Node object, the two
 * types, each file's table of module functions, and their small helpers.
 */
#ifndef OC_PY_MODULE_H
#define OC_PY_MODULE_H

#include "oc_core.h"

#include <errno.h>

typedef struct {
    PyObject_HEAD
    oc_node *node;
    PyObject *handler; /* the "mem_handler" capsule NumPy stores in every array it allocates */
} NodeObject;

int oc_py_numpy_import(void);        /* py_numpy.c */
extern PyTypeObject oc_py_NodeType;  /* py_node.c */
extern PyTypeObject oc_py_PagesType; /* py_pages.c */
extern PyTypeObject oc_py_CountedType; /* py_counted.c */
extern PyMethodDef oc_py_handler_methods[];
extern PyMethodDef oc_py_spill_methods[];
extern PyMethodDef oc_py_scatter_methods[];
extern PyMethodDef oc_py_pages_methods[];
extern PyMethodDef oc_py_pages_remote_methods[];
extern PyMethodDef oc_py_chunks_methods[];
extern PyMethodDef oc_py_moments_methods[];

/* py_handler.c: the header of the block under an ndarray the handler made, or NULL with an
 * exception. */
oc_header *oc_py_managed_header(PyObject *obj);

static inline PyObject *oc_py_errno_error(int err)
{
    errno = err;
    return PyErr_SetFromErrno(PyExc_OSError);
}

#endif
