/*
 * Counted bytes: the buffer of another object (the bytes an object-store library fetched),
 * counted on a manager's node for as long as this object lives.  A read then decodes from the
 * bytes the network layer made, with no copy into a buffer of the manager, and the budget
 * still counts them.  Given a number instead, it counts that many bytes and has no buffer:
 * what a request in flight will hold before its bytes can be seen.
 */
#include "py_module.h"
#include "oc_pager.h"

typedef struct {
    PyObject_HEAD
    Py_buffer view; /* view.obj is NULL until the buffer is held */
    oc_node *node;  /* a reference; NULL: counted nowhere */
} CountedObject;

static PyObject *Counted_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"data", "node", NULL};
    PyObject *data, *node_obj;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO", kwlist, &data, &node_obj)) {
        return NULL;
    }
    if (node_obj != Py_None && !PyObject_TypeCheck(node_obj, &oc_py_NodeType)) {
        PyErr_SetString(PyExc_TypeError, "node must be a Node or None");
        return NULL;
    }
    CountedObject *self = (CountedObject *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    if (PyLong_Check(data)) {
        /* A count alone: bytes another library is still receiving (a request in flight),
         * held where no buffer of theirs can be seen yet. */
        Py_ssize_t nbytes = PyLong_AsSsize_t(data);
        if (nbytes < 0) {
            if (!PyErr_Occurred()) {
                PyErr_SetString(PyExc_ValueError, "a count of bytes must be >= 0");
            }
            Py_DECREF(self);
            return NULL;
        }
        self->view.obj = NULL;
        self->view.buf = NULL;
        self->view.len = nbytes;
    } else if (PyObject_GetBuffer(data, &self->view, PyBUF_SIMPLE) < 0) {
        self->view.obj = NULL;
        self->view.len = 0;
        Py_DECREF(self);
        return NULL;
    }
    if (node_obj != Py_None) {
        self->node = ((NodeObject *)node_obj)->node;
        oc_node_incref(self->node);
        if (self->view.obj == NULL) {
            /* Bytes about to exist: pages of the manager's paged arrays make room, as for a
             * chunk handed to a pager (they can be filled again). */
            Py_BEGIN_ALLOW_THREADS
            oc_pager_count_room(self->node, (int64_t)self->view.len);
            Py_END_ALLOW_THREADS
        } else {
            oc_force_reserve(self->node, (int64_t)self->view.len); /* the bytes exist already */
            oc_raise_peaks(self->node);
        }
    }
    return (PyObject *)self;
}

static void Counted_dealloc(CountedObject *self)
{
    if (self->node != NULL) {
        oc_release(self->node, (int64_t)self->view.len);
        oc_node_decref(self->node);
    }
    if (self->view.obj != NULL) {
        PyBuffer_Release(&self->view);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Counted_getbuffer(CountedObject *self, Py_buffer *view, int flags)
{
    if (self->view.obj == NULL) {
        PyErr_SetString(PyExc_BufferError, "a count of bytes held elsewhere has no buffer");
        view->obj = NULL;
        return -1;
    }
    return PyBuffer_FillInfo(view, (PyObject *)self, self->view.buf, self->view.len, 1, flags);
}

static Py_ssize_t Counted_length(CountedObject *self) { return self->view.len; }

static PyBufferProcs Counted_as_buffer = {.bf_getbuffer = (getbufferproc)Counted_getbuffer};
static PySequenceMethods Counted_as_sequence = {.sq_length = (lenfunc)Counted_length};

PyTypeObject oc_py_CountedType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "oocarray._native.Counted",
    .tp_basicsize = sizeof(CountedObject),
    .tp_dealloc = (destructor)Counted_dealloc,
    .tp_as_buffer = &Counted_as_buffer,
    .tp_as_sequence = &Counted_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Counted(data, node): data's buffer (read-only), its bytes counted on node while "
              "this object lives; Counted(nbytes, node): that many bytes counted, no buffer.",
    .tp_new = Counted_new,
};
