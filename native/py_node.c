/* The Python type Node: one manager of the tree (node.c), with its handler capsule and, for a
 * workspace, its cycles (workspace.c). */
#include "py_module.h"
#include "oc_workspace.h"
#include "oc_alloc.h"


static void capsule_destructor(PyObject *capsule)
{
    oc_node *n = PyCapsule_GetContext(capsule);
    if (n != NULL) {
        oc_node_decref(n);
    }
}

static PyObject *Node_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"parent", "max_bytes", NULL};
    PyObject *parent = Py_None;
    long long max_bytes = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|OL", kwlist, &parent, &max_bytes)) {
        return NULL;
    }
    if (parent != Py_None && !PyObject_TypeCheck(parent, &oc_py_NodeType)) {
        PyErr_SetString(PyExc_TypeError, "parent must be a Node or None");
        return NULL;
    }
    oc_sweep_zombies();
    NodeObject *self = (NodeObject *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->node = oc_handler_node_new(parent == Py_None ? NULL : ((NodeObject *)parent)->node, max_bytes);
    if (self->node == NULL) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    self->handler = PyCapsule_New(&self->node->handler, "mem_handler", capsule_destructor);
    if (self->handler == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    oc_node_incref(self->node);
    PyCapsule_SetContext(self->handler, self->node);
    return (PyObject *)self;
}

static void Node_dealloc(NodeObject *self)
{
    Py_XDECREF(self->handler);
    if (self->node != NULL) {
        oc_node_decref(self->node);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Node_close(NodeObject *self, PyObject *Py_UNUSED(ignored))
{
    atomic_store(&self->node->closed, 1);
    Py_RETURN_NONE;
}

static PyObject *Node_reset_peak(NodeObject *self, PyObject *Py_UNUSED(ignored))
{
    atomic_store(&self->node->peak_bytes, atomic_load(&self->node->current_bytes));
    Py_RETURN_NONE;
}

static PyObject *Node_counters(NodeObject *self, PyObject *Py_UNUSED(ignored))
{
    oc_node *n = self->node;
    long long live = (long long)oc_live_count(n);
#define COUNTER(name) #name, (long long)atomic_load(&n->name)
    return Py_BuildValue("{sLsLsLsLsLsLsLsLsLsLsLsLsLsLsLsLsL}", COUNTER(current_bytes), COUNTER(peak_bytes),
                         "total_bytes", (long long)oc_total_bytes(n), "total_count",
                         (long long)oc_total_count(n), "live_count", live, COUNTER(kept_count),
                         COUNTER(kept_bytes), COUNTER(region_bytes), COUNTER(region_count),
                         COUNTER(spilled_bytes), COUNTER(mapped_bytes), COUNTER(spill_count),
                         COUNTER(spill_moved_bytes), COUNTER(unspill_count), COUNTER(unspill_moved_bytes),
                         COUNTER(compressed_bytes), COUNTER(compressed_disk_bytes));
#undef COUNTER
}

static PyObject *Node_get_id(NodeObject *self, void *Py_UNUSED(c)) { return PyLong_FromUnsignedLongLong(self->node->id); }

static PyObject *Node_get_closed(NodeObject *self, void *Py_UNUSED(c)) { return PyBool_FromLong(atomic_load(&self->node->closed)); }

static PyObject *Node_get_handler(NodeObject *self, void *Py_UNUSED(c)) { return Py_NewRef(self->handler); }

static PyObject *Node_get_max_bytes(NodeObject *self, void *Py_UNUSED(c))
{
    return PyLong_FromLongLong((long long)atomic_load(&self->node->max_bytes));
}

static int Node_set_max_bytes(NodeObject *self, PyObject *value, void *Py_UNUSED(c))
{
    long long v = value ? PyLong_AsLongLong(value) : -1;
    if (v == -1 && PyErr_Occurred()) {
        return -1;
    }
    atomic_store(&self->node->max_bytes, v);
    return 0;
}

/* ---- workspaces ---- */

static PyObject *Node_make_workspace(NodeObject *self, PyObject *args)
{
    int full_policy, location, mode;
    if (!PyArg_ParseTuple(args, "iii", &full_policy, &location, &mode)) {
        return NULL;
    }
    if (self->node->workspace != NULL) {
        PyErr_SetString(PyExc_ValueError, "already a workspace");
        return NULL;
    }
    oc_workspace *w = calloc(1, sizeof(oc_workspace));
    if (w == NULL) {
        return PyErr_NoMemory();
    }
    w->full_policy = full_policy;
    w->location = location;
    w->mode = mode;
    self->node->workspace = w;
    Py_RETURN_NONE;
}

static oc_workspace *workspace_of(NodeObject *self)
{
    if (self->node->workspace == NULL) {
        PyErr_SetString(PyExc_ValueError, "not a workspace");
    }
    return self->node->workspace;
}

static PyObject *Node_ws_begin(NodeObject *self, PyObject *arg)
{
    if (workspace_of(self) == NULL) {
        return NULL;
    }
    size_t bytes = PyLong_AsSize_t(arg);
    if (bytes == (size_t)-1 && PyErr_Occurred()) {
        return NULL;
    }
    /* An arena the budget or the disk refused leaves the cycle outside it (size 0 in stats). */
    oc_workspace_begin(self->node, bytes);
    return PyLong_FromUnsignedLongLong((unsigned long long)atomic_load(&self->node->workspace->cycle));
}

static PyObject *Node_ws_end(NodeObject *self, PyObject *Py_UNUSED(a))
{
    if (workspace_of(self) == NULL) {
        return NULL;
    }
    int64_t arena_escapes, external_escapes, requested;
    int overflowed;
    oc_workspace_end(self->node, &arena_escapes, &external_escapes, &requested, &overflowed);
    return Py_BuildValue("(LLLO)", (long long)arena_escapes, (long long)external_escapes,
                         (long long)requested, overflowed ? Py_True : Py_False);
}

static PyObject *Node_ws_stats(NodeObject *self, PyObject *Py_UNUSED(a))
{
    oc_workspace *w = workspace_of(self);
    if (w == NULL) {
        return NULL;
    }
    return Py_BuildValue("{snsLsLsLsLsLsLsLsKsi}", "arena_bytes", (Py_ssize_t)oc_workspace_arena_bytes(self->node),
                         "pinned_bytes", (long long)atomic_load(&w->pinned_bytes), "pinned_chunks",
                         (long long)atomic_load(&w->pinned_chunks), "reallocations", (long long)w->reallocations,
                         "arena_allocations", (long long)w->arena_allocations, "external_allocations",
                         (long long)w->external_allocations, "spilled_allocations",
                         (long long)w->spilled_allocations, "in_cycle", (long long)atomic_load(&w->in_cycle),
                         "cycle", (unsigned long long)atomic_load(&w->cycle), "arena_error", w->arena_error);
}

static PyObject *Node_ws_destroy(NodeObject *self, PyObject *Py_UNUSED(a))
{
    if (workspace_of(self) == NULL) {
        return NULL;
    }
    oc_workspace_destroy(self->node);
    Py_RETURN_NONE;
}

static int set_choice(atomic_int *field, PyObject *value, long lo, long hi)
{
    long v = value ? PyLong_AsLong(value) : -1;
    if (v == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (v < lo || v > hi) {
        PyErr_SetString(PyExc_ValueError, "out of range");
        return -1;
    }
    atomic_store(field, (int)v);
    return 0;
}

static PyObject *Node_get_spill_policy(NodeObject *self, void *Py_UNUSED(c)) { return PyLong_FromLong(atomic_load(&self->node->spill_policy)); }

static int Node_set_spill_policy(NodeObject *self, PyObject *value, void *Py_UNUSED(c))
{
    return set_choice(&self->node->spill_policy, value, OC_SPILL_FAIL, OC_SPILL_ZARR);
}

static PyObject *Node_get_location(NodeObject *self, void *Py_UNUSED(c)) { return PyLong_FromLong(atomic_load(&self->node->location)); }

static int Node_set_location(NodeObject *self, PyObject *value, void *Py_UNUSED(c))
{
    return set_choice(&self->node->location, value, OC_LOCATION_RAM, OC_LOCATION_ZARR);
}

static PyMethodDef Node_methods[] = {
    {"close", (PyCFunction)Node_close, METH_NOARGS, "Refuse further allocations through this node."},
    {"reset_peak", (PyCFunction)Node_reset_peak, METH_NOARGS, "Set the peak to the current bytes."},
    {"counters", (PyCFunction)Node_counters, METH_NOARGS, "A dict of the node's counters."},
    {"make_workspace", (PyCFunction)Node_make_workspace, METH_VARARGS, "Turn the node into a workspace."},
    {"ws_begin", (PyCFunction)Node_ws_begin, METH_O, "Start a cycle with an arena of at least n bytes; returns the cycle number."},
    {"ws_end", (PyCFunction)Node_ws_end, METH_NOARGS, "End the cycle: (arena_escapes, external_escapes, requested, overflowed)."},
    {"ws_stats", (PyCFunction)Node_ws_stats, METH_NOARGS, "The workspace's counters."},
    {"ws_destroy", (PyCFunction)Node_ws_destroy, METH_NOARGS, "Release the arena (pinned if in use)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Node_getset[] = {
    {"id", (getter)Node_get_id, NULL, "process-unique node id", NULL},
    {"closed", (getter)Node_get_closed, NULL, "whether close() was called", NULL},
    {"handler", (getter)Node_get_handler, NULL, "the NEP 49 handler capsule", NULL},
    {"max_bytes", (getter)Node_get_max_bytes, (setter)Node_set_max_bytes, "budget, -1 unlimited", NULL},
    {"spill_policy", (getter)Node_get_spill_policy, (setter)Node_set_spill_policy, "SPILL_* constant", NULL},
    {"location", (getter)Node_get_location, (setter)Node_set_location, "LOCATION_* constant", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject oc_py_NodeType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "oocarray._native.Node",
    .tp_basicsize = sizeof(NodeObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One manager of the tree: counters, budget and the NumPy handler routed to it.",
    .tp_new = Node_new,
    .tp_dealloc = (destructor)Node_dealloc,
    .tp_methods = Node_methods,
    .tp_getset = Node_getset,
};
