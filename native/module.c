/* Python bindings of oocarray._native: manager nodes, handler activation, block queries. */
#define OC_MODULE_MAIN
#include "oc_core.h"
#include "oc_codecs.h"

#include <fcntl.h>

typedef struct {
    PyObject_HEAD
    oc_node *node;
    PyObject *handler; /* the "mem_handler" capsule NumPy stores in every array it allocates */
} NodeObject;

static PyTypeObject NodeType;

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
    if (parent != Py_None && !PyObject_TypeCheck(parent, &NodeType)) {
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

static PyTypeObject NodeType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "oocarray._native.Node",
    .tp_basicsize = sizeof(NodeObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One manager of the tree: counters, budget and the NumPy handler routed to it.",
    .tp_new = Node_new,
    .tp_dealloc = (destructor)Node_dealloc,
    .tp_methods = Node_methods,
    .tp_getset = Node_getset,
};

/* ---- module functions ---- */

static PyObject *set_handler(PyObject *Py_UNUSED(m), PyObject *capsule)
{
    if (capsule != Py_None && !PyCapsule_IsValid(capsule, "mem_handler")) {
        PyErr_SetString(PyExc_TypeError, "expected a mem_handler capsule or None");
        return NULL;
    }
    return PyDataMem_SetHandler(capsule == Py_None ? NULL : capsule);
}

static PyObject *get_handler(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a)) { return PyDataMem_GetHandler(); }

/* The array that owns the memory under `obj` (an array, a view, or a memoryview of one). */
static PyArrayObject *owning_array(PyObject *obj)
{
    for (int depth = 0; obj != NULL && depth < 4096; depth++) {
        if (PyArray_Check(obj)) {
            PyArrayObject *a = (PyArrayObject *)obj;
            if (PyArray_CHKFLAGS(a, NPY_ARRAY_OWNDATA)) {
                return a;
            }
            obj = PyArray_BASE(a);
        }
        else if (PyMemoryView_Check(obj)) {
            obj = PyMemoryView_GET_BUFFER(obj)->obj;
        }
        else {
            return NULL;
        }
    }
    return NULL;
}

static oc_header *managed_header(PyObject *obj)
{
    PyArrayObject *a = owning_array(obj);
    if (a == NULL || !oc_is_our_handler(PyArray_HANDLER(a)) || PyArray_DATA(a) == NULL) {
        return NULL;
    }
    oc_header *h = oc_header_of(PyArray_DATA(a));
    return h->magic == OC_MAGIC ? h : NULL;
}

static PyObject *block_info(PyObject *Py_UNUSED(m), PyObject *obj)
{
    oc_header *h = managed_header(obj);
    if (h == NULL) {
        Py_RETURN_NONE;
    }
    oc_node *owner = atomic_load(&h->owner);
    return Py_BuildValue("(KKnIKK)", (unsigned long long)owner->id, (unsigned long long)h->id,
                         (Py_ssize_t)h->size, (unsigned)atomic_load(&h->flags),
                         (unsigned long long)(uintptr_t)((char *)h + OC_HEADER_BYTES),
                         (unsigned long long)h->cycle);
}

/* Moves the block under `obj` to `node` (budget permitting) and sets or clears its kept flag.
 * Returns None, or (refused_node_id, limit, used) when a budget on the way refused. */
static PyObject *transfer(PyObject *Py_UNUSED(m), PyObject *args)
{
    PyObject *obj;
    NodeObject *target;
    int kept;
    if (!PyArg_ParseTuple(args, "OO!p", &obj, &NodeType, &target, &kept)) {
        return NULL;
    }
    oc_header *h = managed_header(obj);
    if (h == NULL) {
        PyErr_SetString(PyExc_ValueError, "the array's memory was not allocated by oocarray");
        return NULL;
    }
    oc_node *from = atomic_load(&h->owner);
    oc_node *to = target->node;
    int64_t size = (int64_t)h->size;
    unsigned flags = atomic_load(&h->flags);
    if ((flags & OC_FLAG_ARENA) && from != to) {
        PyErr_SetString(PyExc_ValueError,
                        "arrays in a workspace arena cannot change owner; copy one out with oc.detach(arr)");
        return NULL;
    }
    int region = (flags & OC_FLAG_REGION) != 0;
    if (region) {
        oc_registry_lock(); /* the block's place (RAM or disk) must not change meanwhile */
        flags = atomic_load(&h->flags);
    }
    if (from != to) {
        if (flags & OC_FLAG_ZSPILLED) {
            oc_zspill_move(h, from, to);
        }
        else if (flags & OC_FLAG_ON_DISK) {
            atomic_int_fast64_t *from_disk = (flags & OC_FLAG_SPILLED) ? &from->spilled_bytes : &from->mapped_bytes;
            atomic_int_fast64_t *to_disk = (flags & OC_FLAG_SPILLED) ? &to->spilled_bytes : &to->mapped_bytes;
            atomic_fetch_sub(from_disk, size);
            atomic_fetch_add(to_disk, size);
        }
        else {
            oc_node *common = oc_common_ancestor(from, to);
            oc_node *refused = oc_reserve_until(to, common, size);
            if (refused != NULL) {
                if (region) {
                    oc_registry_unlock();
                }
                return Py_BuildValue("(KLL)", (unsigned long long)refused->id,
                                     (long long)atomic_load(&refused->max_bytes),
                                     (long long)atomic_load(&refused->current_bytes));
            }
            oc_release_until(from, common, size);
            oc_raise_peaks(to);
        }
        if (flags & OC_FLAG_KEPT) {
            atomic_fetch_sub(&from->kept_count, 1);
            atomic_fetch_sub(&from->kept_bytes, size);
            atomic_fetch_and(&h->flags, ~OC_FLAG_KEPT);
            flags &= ~OC_FLAG_KEPT;
        }
        if (flags & OC_FLAG_REGION) {
            atomic_fetch_sub(&from->region_bytes, size);
            atomic_fetch_sub(&from->region_count, 1);
            atomic_fetch_add(&to->region_bytes, size);
            atomic_fetch_add(&to->region_count, 1);
        }
        oc_live_add(to, 1);
        atomic_store(&h->owner, to);
        oc_live_add(from, -1);
    }
    if (kept && !(flags & OC_FLAG_KEPT)) {
        atomic_fetch_or(&h->flags, OC_FLAG_KEPT);
        atomic_fetch_add(&to->kept_count, 1);
        atomic_fetch_add(&to->kept_bytes, size);
    }
    else if (!kept && (flags & OC_FLAG_KEPT)) {
        atomic_fetch_and(&h->flags, ~OC_FLAG_KEPT);
        atomic_fetch_sub(&to->kept_count, 1);
        atomic_fetch_sub(&to->kept_bytes, size);
    }
    if (region) {
        oc_registry_unlock();
    }
    Py_RETURN_NONE;
}

/* ---- spill ---- */

static PyObject *errno_error(int err)
{
    errno = err;
    return PyErr_SetFromErrno(PyExc_OSError);
}

/* Moves the block under `obj` to disk.  Returns the bytes moved: 0 for blocks that are
 * already on disk or too small to live in a region. */
static PyObject *spill(PyObject *Py_UNUSED(m), PyObject *obj)
{
    oc_header *h = managed_header(obj);
    if (h == NULL) {
        PyErr_SetString(PyExc_ValueError, "the array's memory was not allocated by oocarray");
        return NULL;
    }
    if (!(atomic_load(&h->flags) & OC_FLAG_REGION)) {
        return PyLong_FromLong(0);
    }
    int err;
    long long moved = 0;
    Py_BEGIN_ALLOW_THREADS
    oc_registry_lock();
    if (atomic_load(&h->flags) & OC_FLAG_ZSPILLED) {
        oc_zspill_again(h, &err); /* pages touched since: encoded again if written, dropped */
    }
    else if (!(atomic_load(&h->flags) & OC_FLAG_ON_DISK)) {
        err = oc_spill_block(h);
        moved = err ? 0 : (long long)h->size;
    }
    else {
        err = 0;
    }
    oc_registry_unlock();
    Py_END_ALLOW_THREADS
    if (err) {
        return errno_error(err);
    }
    return PyLong_FromLongLong(moved);
}

/* Brings the block under `obj` back to RAM, budget permitting.  Returns the bytes moved, or
 * (refused_node_id, limit, used) when a budget refused. */
static PyObject *unspill(PyObject *Py_UNUSED(m), PyObject *obj)
{
    oc_header *h = managed_header(obj);
    if (h == NULL) {
        PyErr_SetString(PyExc_ValueError, "the array's memory was not allocated by oocarray");
        return NULL;
    }
    int err = 0;
    long long moved = 0;
    oc_node *refused = NULL;
    Py_BEGIN_ALLOW_THREADS
    oc_registry_lock();
    if (atomic_load(&h->flags) & (OC_FLAG_ON_DISK | OC_FLAG_ZSPILLED)) {
        oc_node *owner = atomic_load(&h->owner);
        refused = oc_reserve(owner, (int64_t)h->size);
        if (refused == NULL) {
            err = oc_unspill_block(h);
            if (err) {
                oc_release(owner, (int64_t)h->size);
            }
            else {
                oc_raise_peaks(owner);
                moved = (long long)h->size;
            }
        }
    }
    oc_registry_unlock();
    Py_END_ALLOW_THREADS
    if (refused != NULL) {
        return Py_BuildValue("(KLL)", (unsigned long long)refused->id, (long long)atomic_load(&refused->max_bytes),
                             (long long)atomic_load(&refused->current_bytes));
    }
    if (err) {
        return errno_error(err);
    }
    return PyLong_FromLongLong(moved);
}

/* Spills every RAM region owned in the subtree of `node`; with skip_kept, blocks that `node`
 * itself marked kept stay.  Returns the bytes moved. */
static PyObject *spill_subtree(PyObject *Py_UNUSED(m), PyObject *args)
{
    NodeObject *target;
    int skip_kept;
    if (!PyArg_ParseTuple(args, "O!p", &NodeType, &target, &skip_kept)) {
        return NULL;
    }
    oc_node *scope = target->node;
    int err = 0;
    long long moved = 0;
    size_t page = oc_page_bytes();
    Py_BEGIN_ALLOW_THREADS
    oc_registry_lock();
    for (oc_header *h = oc_registry_first(); h != NULL; h = oc_registry_next(h)) {
        unsigned flags = atomic_load(&h->flags);
        oc_node *owner = atomic_load(&h->owner);
        if ((flags & (OC_FLAG_ON_DISK | OC_FLAG_COW)) || h->size < page || !oc_node_in_subtree(owner, scope) ||
            (skip_kept && owner == scope && (flags & OC_FLAG_KEPT))) {
            continue;
        }
        if (flags & OC_FLAG_ZSPILLED) {
            oc_zspill_again(h, &err);
            if (err) {
                break;
            }
            continue;
        }
        err = oc_spill_block(h);
        if (err) {
            break;
        }
        moved += (long long)h->size;
    }
    oc_registry_unlock();
    Py_END_ALLOW_THREADS
    if (err) {
        return errno_error(err);
    }
    return PyLong_FromLongLong(moved);
}

/* Spills the oldest RAM regions of the whole process until `need` bytes are released. */
static PyObject *evict(PyObject *Py_UNUSED(m), PyObject *arg)
{
    long long need = PyLong_AsLongLong(arg);
    if (need == -1 && PyErr_Occurred()) {
        return NULL;
    }
    int err;
    int64_t released;
    Py_BEGIN_ALLOW_THREADS
    oc_registry_lock();
    released = oc_evict(NULL, need, &err);
    oc_registry_unlock();
    Py_END_ALLOW_THREADS
    if (err && released == 0) {
        return errno_error(err);
    }
    return PyLong_FromLongLong((long long)released);
}

static PyObject *drop_disk_pages(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    int n;
    Py_BEGIN_ALLOW_THREADS
    oc_registry_lock();
    n = oc_drop_disk_pages();
    oc_registry_unlock();
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(n);
}

static PyObject *set_spill_dir(PyObject *Py_UNUSED(m), PyObject *arg)
{
    const char *path = PyUnicode_AsUTF8(arg);
    if (path == NULL) {
        return NULL;
    }
    int err = oc_set_spill_dir(path);
    if (err) {
        return errno_error(err);
    }
    Py_RETURN_NONE;
}

static PyObject *set_spill_limit(PyObject *Py_UNUSED(m), PyObject *arg)
{
    long long v = PyLong_AsLongLong(arg);
    if (v == -1 && PyErr_Occurred()) {
        return NULL;
    }
    atomic_store(&oc_spill_limit, v);
    Py_RETURN_NONE;
}

static PyObject *spill_used(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a)) { return PyLong_FromLongLong((long long)atomic_load(&oc_spill_used)); }

static PyObject *set_pressure_callback(PyObject *Py_UNUSED(m), PyObject *cb)
{
    if (cb != Py_None && !PyCallable_Check(cb)) {
        PyErr_SetString(PyExc_TypeError, "the pressure callback must be callable or None");
        return NULL;
    }
    Py_XSETREF(oc_pressure_cb, cb == Py_None ? NULL : Py_NewRef(cb));
    Py_RETURN_NONE;
}

static PyObject *set_disk_refusal_callback(PyObject *Py_UNUSED(m), PyObject *cb)
{
    if (cb != Py_None && !PyCallable_Check(cb)) {
        PyErr_SetString(PyExc_TypeError, "the disk refusal callback must be callable or None");
        return NULL;
    }
    Py_XSETREF(oc_disk_refusal_cb, cb == Py_None ? NULL : Py_NewRef(cb));
    Py_RETURN_NONE;
}

static PyObject *set_huge_pages(PyObject *Py_UNUSED(m), PyObject *arg)
{
    int on = PyObject_IsTrue(arg);
    if (on < 0) {
        return NULL;
    }
    return PyBool_FromLong(atomic_exchange(&oc_huge_pages, on));
}

static PyObject *region_cache(PyObject *Py_UNUSED(m), PyObject *args)
{
    long long limit = -2;
    if (!PyArg_ParseTuple(args, "|L", &limit)) {
        return NULL;
    }
    if (limit >= 0) {
        atomic_store(&oc_region_cache_limit, (size_t)limit);
        oc_region_cache_trim((size_t)limit);
    }
    else if (limit == -1) {
        oc_region_cache_trim(0);
    }
    return Py_BuildValue("(nn)", (Py_ssize_t)oc_region_cache_bytes(), (Py_ssize_t)atomic_load(&oc_region_cache_limit));
}

/* scratch() -> bytes of decode, encode and staging scratch mapped now (zstd contexts
 * included); scratch(True) first gives back what idle threads hold and the cached free
 * regions (the end of a step). */
static PyObject *scratch(PyObject *Py_UNUSED(m), PyObject *args)
{
    int release = 0;
    if (!PyArg_ParseTuple(args, "|p", &release)) {
        return NULL;
    }
    if (release) {
        Py_BEGIN_ALLOW_THREADS
        oc_scratch_release();
        Py_END_ALLOW_THREADS
    }
    return PyLong_FromLongLong(oc_scratch_bytes());
}

static PyObject *move_guard(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a)) { return PyLong_FromLong(oc_guard_mode()); }

/* Chooses how moves will hold writers (GUARD_* or GUARD_AUTO); OSError EBUSY once another
 * mode is in force. */
static PyObject *set_move_guard(PyObject *Py_UNUSED(m), PyObject *arg)
{
    long wanted = PyLong_AsLong(arg);
    if (wanted == -1 && PyErr_Occurred()) {
        return NULL;
    }
    int err = oc_guard_request((int)wanted);
    if (err) {
        return errno_error(err);
    }
    Py_RETURN_NONE;
}

/* The max_physical_bytes limit for allocations (-1: none), and the watcher's latest look. */
static PyObject *set_physical_limit(PyObject *Py_UNUSED(m), PyObject *arg)
{
    long long v = PyLong_AsLongLong(arg);
    if (v == -1 && PyErr_Occurred()) {
        return NULL;
    }
    atomic_store(&oc_physical_limit, v);
    Py_RETURN_NONE;
}

static PyObject *physical_sample(PyObject *Py_UNUSED(m), PyObject *arg)
{
    long long v = PyLong_AsLongLong(arg);
    if (v == -1 && PyErr_Occurred()) {
        return NULL;
    }
    oc_physical_sample(v);
    Py_RETURN_NONE;
}

static PyObject *forks_prepared(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    return PyLong_FromLongLong((long long)atomic_load(&oc_forks_prepared));
}

static PyObject *take_failure(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    oc_failure f = oc_take_failure();
    if (f.kind == OC_FAIL_NONE) {
        Py_RETURN_NONE;
    }
    return Py_BuildValue("(iiKKLLL)", f.kind, f.err, (unsigned long long)f.node_id,
                         (unsigned long long)f.refused_id, (long long)f.requested, (long long)f.limit,
                         (long long)f.used);
}

static PyObject *set_trace(PyObject *Py_UNUSED(m), PyObject *args)
{
    PyObject *on_alloc, *on_free;
    if (!PyArg_ParseTuple(args, "OO", &on_alloc, &on_free)) {
        return NULL;
    }
    int enable = on_alloc != Py_None;
    if (enable && (!PyCallable_Check(on_alloc) || !PyCallable_Check(on_free))) {
        PyErr_SetString(PyExc_TypeError, "trace callbacks must be callable");
        return NULL;
    }
    atomic_store(&oc_trace_enabled, 0);
    /* The free callback stays installed once set, so that traced blocks still get untraced. */
    Py_XSETREF(oc_trace_alloc_cb, enable ? Py_NewRef(on_alloc) : NULL);
    if (enable) {
        Py_XSETREF(oc_trace_free_cb, Py_NewRef(on_free));
    }
    atomic_store(&oc_trace_enabled, enable);
    Py_RETURN_NONE;
}

static PyObject *get_large_threshold(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    return PyLong_FromSize_t(atomic_load(&oc_large_threshold));
}

static PyObject *set_large_threshold(PyObject *Py_UNUSED(m), PyObject *arg)
{
    size_t v = PyLong_AsSize_t(arg);
    if (v == (size_t)-1 && PyErr_Occurred()) {
        return NULL;
    }
    atomic_store(&oc_large_threshold, v);
    Py_RETURN_NONE;
}


/* ---- chunk-backed ndarrays: the object that owns a paged range (pager.c) ---- */

typedef struct {
    PyObject_HEAD
    pg_array *pages;
    Py_ssize_t exports;
    PyObject *on_release; /* called with the object once the last view is gone (write-back) */
    PyObject *weakreflist;
} PagesObject;

static PyTypeObject PagesType;

/* Pages(paths, table, codec, chunk_nbytes, data_nbytes, unit_nbytes, fill, writable, node,
 *       readahead, fd=-1, zstd_level=0, zstd_checksum=False, file_mode=0o644): all checked
 *       by the Python caller; table is int64 (nchunks, 3) (an HDF5 chunk's filter mask in bits
 *       32-47 of its path number); fd, when given, is the file every chunk is read from (the
 *       object keeps its own duplicate).  A writable one over chunk files of its own (zarr: no
 *       fd) writes its dirty units back to paths natively (write_back, and under budget
 *       pressure), zstd at that level and checksum (a CRC-32C after, when codec says so), each
 *       new file given file_mode; a writable
 *       one over one file (HDF5) is written back by its store (begin_writeback, the store's
 *       write, end_writeback or abort_writeback; move_begin and move_end around the write). */
static PyObject *Pages_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"paths", "table", "codec", "chunk_nbytes", "data_nbytes",
                             "unit_nbytes", "fill", "writable", "node", "readahead", "fd",
                             "zstd_level", "zstd_checksum", "file_mode", NULL};
    PyObject *paths, *table_obj, *node_obj;
    int codec, writable, readahead, fd = -1, level = 0, checksum = 0, file_mode = 0644;
    Py_ssize_t chunk_n, data_n, unit_n;
    Py_buffer fill;
    if (oc_pager_errors_init() < 0) { /* what a chunk that cannot be read raises */
        return NULL;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!Oinnny*pOi|iipi", kwlist, &PyList_Type, &paths,
                                     &table_obj, &codec, &chunk_n, &data_n, &unit_n, &fill,
                                     &writable, &node_obj, &readahead, &fd, &level, &checksum,
                                     &file_mode)) {
        return NULL;
    }
    oc_node *node = NULL;
    if (node_obj != Py_None) {
        if (!PyObject_TypeCheck(node_obj, &NodeType)) {
            PyBuffer_Release(&fill);
            PyErr_SetString(PyExc_TypeError, "node must be a Node or None");
            return NULL;
        }
        node = ((NodeObject *)node_obj)->node;
    }
    Py_buffer tv;
    if (PyObject_GetBuffer(table_obj, &tv, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) {
        PyBuffer_Release(&fill);
        return NULL;
    }
    size_t page = oc_page_bytes();
    Py_ssize_t npaths = PyList_GET_SIZE(paths);
    size_t nchunks = (size_t)tv.len / 24;
    if (tv.itemsize != 8 || tv.len % 24 != 0 || chunk_n <= 0 || data_n <= 0 || unit_n <= 0 ||
        (size_t)unit_n % page != 0 || fill.len <= 0 || readahead < 0 ||
        nchunks * (size_t)chunk_n < (size_t)data_n ||
        /* written back whole chunks at a time, each in one unit; natively (no fd) to files
         * of their own, raw or zstd */
        (writable && ((size_t)unit_n % (size_t)chunk_n != 0 ||
                      (fd < 0 && (!oc_wb_codec_ok(codec) ||
                                  (file_mode & ~07777) != 0))))) {
        PyBuffer_Release(&tv);
        PyBuffer_Release(&fill);
        PyErr_SetString(PyExc_ValueError, "inconsistent Pages arguments");
        return NULL;
    }
    int64_t *table = malloc((size_t)tv.len);
    char **cpaths = calloc((size_t)(npaths ? npaths : 1), sizeof(char *));
    char *cfill = malloc((size_t)fill.len);
    int bad = table == NULL || cpaths == NULL || cfill == NULL;
    if (!bad) {
        memcpy(table, tv.buf, (size_t)tv.len);
        memcpy(cfill, fill.buf, (size_t)fill.len);
        for (size_t i = 0; i < nchunks; i++) {
            if (table[3 * i] >= 0 && OC_CHUNK_PATH(table[3 * i]) >= npaths) {
                bad = 2;
            }
        }
        for (Py_ssize_t i = 0; i < npaths && !bad; i++) {
            const char *p = PyUnicode_AsUTF8(PyList_GET_ITEM(paths, i));
            if (p == NULL || (cpaths[i] = strdup(p)) == NULL) {
                bad = p == NULL ? 3 : 1;
            }
        }
    }
    size_t fill_n = (size_t)fill.len;
    PyBuffer_Release(&tv);
    PyBuffer_Release(&fill);
    if (bad) {
        for (Py_ssize_t i = 0; cpaths != NULL && i < npaths; i++) {
            free(cpaths[i]);
        }
        free(cpaths);
        free(table);
        free(cfill);
        if (bad == 2) {
            PyErr_SetString(PyExc_ValueError, "a chunk names a path that is not given");
        } else if (bad == 1) {
            PyErr_NoMemory();
        }
        return NULL;
    }
    PagesObject *self = (PagesObject *)type->tp_alloc(type, 0);
    if (self == NULL) {
        for (Py_ssize_t i = 0; i < npaths; i++) {
            free(cpaths[i]);
        }
        free(cpaths);
        free(table);
        free(cfill);
        return NULL;
    }
    int own_fd = -1;
    if (fd >= 0 && (own_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0)) < 0) {
        int e = errno;
        for (Py_ssize_t i = 0; i < npaths; i++) {
            free(cpaths[i]);
        }
        free(cpaths);
        free(table);
        free(cfill);
        Py_DECREF(self);
        return errno_error(e);
    }
    int err;
    Py_BEGIN_ALLOW_THREADS
    err = oc_pager_create(&self->pages, cpaths, (int)npaths, table, nchunks, codec, (size_t)chunk_n,
                          (size_t)data_n, (size_t)unit_n, cfill, fill_n, writable, node, readahead,
                          own_fd);
    Py_END_ALLOW_THREADS
    if (err) {
        self->pages = NULL;
        Py_DECREF(self);
        return errno_error(err);
    }
    if (writable) {
        oc_pager_set_writeback(self->pages, level, checksum, file_mode);
    }
    return (PyObject *)self;
}

static void Pages_finalize(PagesObject *self)
{
    PyObject *cb = self->on_release;
    if (cb == NULL || self->pages == NULL) {
        return;
    }
    self->on_release = NULL;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *r = PyObject_CallOneArg(cb, (PyObject *)self);
    if (r == NULL) {
        PyErr_WriteUnraisable(cb);
    }
    Py_XDECREF(r);
    Py_DECREF(cb);
    PyErr_Restore(type, value, tb);
}

static void Pages_dealloc(PagesObject *self)
{
    if (PyObject_CallFinalizerFromDealloc((PyObject *)self) < 0) {
        return; /* the write-back made a new reference: dealloc comes again */
    }
    if (self->weakreflist != NULL) {
        PyObject_ClearWeakRefs((PyObject *)self);
    }
    Py_CLEAR(self->on_release);
    if (self->pages != NULL) {
        pg_array *p = self->pages;
        self->pages = NULL;
        Py_BEGIN_ALLOW_THREADS
        oc_pager_destroy(p);
        Py_END_ALLOW_THREADS
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Pages_getbuffer(PagesObject *self, Py_buffer *view, int flags)
{
    int writable = oc_pager_writable(self->pages);
    if ((flags & PyBUF_WRITABLE) && !writable) {
        PyErr_SetString(PyExc_BufferError, "the chunk-backed array is read-only (mode='r')");
        view->obj = NULL;
        return -1;
    }
    self->exports++;
    return PyBuffer_FillInfo(view, (PyObject *)self, oc_pager_base(self->pages),
                             (Py_ssize_t)oc_pager_data_bytes(self->pages), !writable, flags);
}

static void Pages_releasebuffer(PagesObject *self, Py_buffer *Py_UNUSED(view)) { self->exports--; }

static PyBufferProcs Pages_as_buffer = {
    .bf_getbuffer = (getbufferproc)Pages_getbuffer,
    .bf_releasebuffer = (releasebufferproc)Pages_releasebuffer,
};

static PyObject *Pages_stats(PagesObject *self, PyObject *Py_UNUSED(a))
{
    long long s[12];
    oc_pager_stats(self->pages, s);
    return Py_BuildValue("{sLsLsLsLsLsLsLsLsLsLsLsL}", "fills", s[0], "zero_fills", s[1],
                         "readaheads", s[2], "evictions", s[3], "failures", s[4], "faults", s[5],
                         "decoded_bytes", s[6], "resident_bytes", s[7], "dirty_units", s[8],
                         "unit_bytes", s[9], "writebacks", s[10], "writeback_failures", s[11]);
}

static PyObject *Pages_dirty_units(PagesObject *self, PyObject *Py_UNUSED(a))
{
    size_t n = oc_pager_dirty(self->pages, NULL, 0);
    for (;;) {
        size_t *units = PyMem_Malloc((n ? n : 1) * sizeof(size_t));
        if (units == NULL) {
            return PyErr_NoMemory();
        }
        size_t got = oc_pager_dirty(self->pages, units, n);
        if (got > n) {
            PyMem_Free(units);
            n = got;
            continue;
        }
        PyObject *list = PyList_New((Py_ssize_t)got);
        for (size_t i = 0; list != NULL && i < got; i++) {
            PyObject *v = PyLong_FromSize_t(units[i]);
            if (v == NULL) {
                Py_CLEAR(list);
                break;
            }
            PyList_SET_ITEM(list, (Py_ssize_t)i, v);
        }
        PyMem_Free(units);
        return list;
    }
}

/* write_back(unit) -> chunks written: the unit's chunks, each whole, when it is dirty (after
 * a write-back of it under way elsewhere), without the GIL.  OSError with the errno (ENOSPC on
 * a full disk): the unit stays dirty. */
static PyObject *Pages_write_back(PagesObject *self, PyObject *arg)
{
    Py_ssize_t u = PyLong_AsSsize_t(arg);
    if (u < 0) {
        return PyErr_Occurred() ? NULL : (PyErr_SetString(PyExc_ValueError, "unit < 0"), NULL);
    }
    if (!oc_pager_native_writeback(self->pages)) {
        PyErr_SetString(PyExc_ValueError,
                        "this array has no native writer: its store writes it (begin_writeback)");
        return NULL;
    }
    int chunks = 0, err;
    char msg[320] = "";
    Py_BEGIN_ALLOW_THREADS
    err = oc_pager_write_back(self->pages, (size_t)u, &chunks, msg, sizeof msg);
    Py_END_ALLOW_THREADS
    if (err) {
        PyObject *v = PyUnicode_FromFormat("%s: writing back %s", strerror(err), msg);
        PyObject *e = v == NULL ? NULL : Py_BuildValue("(iN)", err, v);
        if (e != NULL) {
            PyErr_SetObject(PyExc_OSError, e);
            Py_DECREF(e);
        }
        return NULL;
    }
    return PyLong_FromLong(chunks);
}

/* The store's write-back (HDF5), unit by unit; refused for an array written back natively. */
static int store_unit(PagesObject *self, PyObject *arg, size_t *u)
{
    Py_ssize_t v = PyLong_AsSsize_t(arg);
    if (v < 0) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_ValueError, "unit < 0");
        }
        return -1;
    }
    if (oc_pager_native_writeback(self->pages)) {
        PyErr_SetString(PyExc_ValueError, "this array is written back natively: write_back(unit)");
        return -1;
    }
    *u = (size_t)v;
    return 0;
}

static PyObject *Pages_begin_writeback(PagesObject *self, PyObject *arg)
{
    size_t u;
    if (store_unit(self, arg, &u) < 0) {
        return NULL;
    }
    int r = oc_pager_begin_writeback(self->pages, u);
    if (r < 0) {
        return errno_error(-r);
    }
    return PyBool_FromLong(r);
}

static PyObject *Pages_abort_writeback(PagesObject *self, PyObject *arg)
{
    size_t u;
    if (store_unit(self, arg, &u) < 0) {
        return NULL;
    }
    oc_pager_abort_writeback(self->pages, u);
    Py_RETURN_NONE;
}

static PyObject *Pages_end_writeback(PagesObject *self, PyObject *arg)
{
    size_t u;
    if (store_unit(self, arg, &u) < 0) {
        return NULL;
    }
    oc_pager_end_writeback(self->pages, u);
    Py_RETURN_NONE;
}

static PyObject *Pages_move_begin(PagesObject *self, PyObject *args)
{
    Py_ssize_t chunk;
    Py_buffer data;
    if (!PyArg_ParseTuple(args, "ny*", &chunk, &data)) {
        return NULL;
    }
    if (chunk < 0) {
        PyBuffer_Release(&data);
        PyErr_SetString(PyExc_ValueError, "chunk < 0");
        return NULL;
    }
    uint64_t id = oc_pager_move_begin(self->pages, (size_t)chunk, data.buf, (size_t)data.len);
    PyBuffer_Release(&data);
    return id == 0 ? PyErr_NoMemory() : PyLong_FromUnsignedLongLong(id);
}

static PyObject *Pages_move_end(PagesObject *self, PyObject *args)
{
    unsigned long long id;
    PyObject *entry_obj;
    int64_t entry[3];
    if (!PyArg_ParseTuple(args, "KO", &id, &entry_obj)) {
        return NULL;
    }
    if (entry_obj != Py_None &&
        !PyArg_ParseTuple(entry_obj, "LLL", (long long *)&entry[0], (long long *)&entry[1],
                          (long long *)&entry[2])) {
        return NULL;
    }
    if (oc_pager_move_end(self->pages, id, entry_obj == Py_None ? NULL : entry) != 0) {
        PyErr_Format(PyExc_ValueError, "no move %llu of this array", id);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *Pages_trim(PagesObject *self, PyObject *Py_UNUSED(a))
{
    size_t freed;
    Py_BEGIN_ALLOW_THREADS
    freed = oc_pager_trim(self->pages);
    Py_END_ALLOW_THREADS
    return PyLong_FromSize_t(freed);
}

static PyObject *Pages_prefetch(PagesObject *self, PyObject *args)
{
    Py_ssize_t first, last;
    if (!PyArg_ParseTuple(args, "nn", &first, &last)) {
        return NULL;
    }
    if (first >= 0 && last > first) {
        oc_pager_prefetch(self->pages, (size_t)first, (size_t)last);
    }
    Py_RETURN_NONE;
}

static PyObject *Pages_get_error(PagesObject *self, void *Py_UNUSED(c))
{
    const char *e = oc_pager_error(self->pages);
    return e[0] ? PyUnicode_FromString(e) : Py_NewRef(Py_None);
}

static PyObject *Pages_get_writeback_error(PagesObject *self, void *Py_UNUSED(c))
{
    char e[400];
    oc_pager_writeback_error(self->pages, e, sizeof e);
    return e[0] ? PyUnicode_FromString(e) : Py_NewRef(Py_None);
}

static PyObject *Pages_get_native_writeback(PagesObject *self, void *Py_UNUSED(c))
{
    return PyBool_FromLong(oc_pager_native_writeback(self->pages));
}

static PyObject *Pages_get_address(PagesObject *self, void *Py_UNUSED(c))
{
    return PyLong_FromVoidPtr(oc_pager_base(self->pages));
}

static PyMethodDef Pages_methods[] = {
    {"stats", (PyCFunction)Pages_stats, METH_NOARGS, "Counters of fills, evictions and faults."},
    {"dirty_units", (PyCFunction)Pages_dirty_units, METH_NOARGS, "Units written since their last write-back."},
    {"write_back", (PyCFunction)Pages_write_back, METH_O, "Write a dirty unit's chunks back natively, each whole; the chunks written."},
    {"begin_writeback", (PyCFunction)Pages_begin_writeback, METH_O, "The store writes a unit: mark it clean, write-protect and hold it; whether it was dirty."},
    {"abort_writeback", (PyCFunction)Pages_abort_writeback, METH_O, "The store's write failed: the unit is dirty again."},
    {"end_writeback", (PyCFunction)Pages_end_writeback, METH_O, "A unit's chunks are stored: it may be dropped again."},
    {"move_begin", (PyCFunction)Pages_move_begin, METH_VARARGS, "move_begin(chunk, data) -> id: the store rewrites a chunk; fills copy data meanwhile."},
    {"move_end", (PyCFunction)Pages_move_end, METH_VARARGS, "move_end(id, (path, offset, stored) or None): the chunk is stored there."},
    {"trim", (PyCFunction)Pages_trim, METH_NOARGS, "Drop every clean resident unit; the bytes released."},
    {"prefetch", (PyCFunction)Pages_prefetch, METH_VARARGS, "Queue fills of units [first, last)."},
    {NULL},
};

static PyObject *Pages_get_on_release(PagesObject *self, void *Py_UNUSED(c))
{
    return Py_NewRef(self->on_release ? self->on_release : Py_None);
}

static int Pages_set_on_release(PagesObject *self, PyObject *v, void *Py_UNUSED(c))
{
    Py_XSETREF(self->on_release, v == NULL || v == Py_None ? NULL : Py_NewRef(v));
    return 0;
}

static PyGetSetDef Pages_getset[] = {
    {"on_release", (getter)Pages_get_on_release, (setter)Pages_set_on_release, "cb(pages), called once when the last view is gone.", NULL},
    {"error", (getter)Pages_get_error, NULL, "Why the last failed fill failed, or None.", NULL},
    {"address", (getter)Pages_get_address, NULL, "Where the data starts.", NULL},
    {"writeback_error", (getter)Pages_get_writeback_error, NULL, "Why the last write-back under memory pressure failed, or None.", NULL},
    {"native_writeback", (getter)Pages_get_native_writeback, NULL, "Whether dirty units are written back natively (zarr r+), not by the store (HDF5 r+).", NULL},
    {NULL},
};

static PyTypeObject PagesType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "oocarray._native.Pages",
    .tp_basicsize = sizeof(PagesObject),
    .tp_dealloc = (destructor)Pages_dealloc,
    .tp_finalize = (destructor)Pages_finalize,
    .tp_weaklistoffset = offsetof(PagesObject, weakreflist),
    .tp_as_buffer = &Pages_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An address range filled from chunks on first touch; the base of its ndarrays.",
    .tp_new = Pages_new,
    .tp_methods = Pages_methods,
    .tp_getset = Pages_getset,
};

static PyObject *pager_take_fault(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    char msg[512];
    oc_pager_take_fault(msg, sizeof msg);
    return msg[0] ? PyUnicode_FromString(msg) : Py_NewRef(Py_None);
}

static PyObject *pager_check(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    int wp = 0;
    int err = oc_pager_check(&wp, NULL);
    return Py_BuildValue("(iO)", err, wp ? Py_True : Py_False);
}

/* 0 when compressed spill can work in this process (kernel-mode userfaultfd with write-protect
 * faults and the remap event, and libzstd), else the errno of what is missing. */
static PyObject *zspill_check(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    int wp = 0, ok = 0;
    int err = oc_pager_check(&wp, &ok);
    if (err == 0 && !ok) {
        err = ENOTSUP;
    }
    if (err == 0 && !oc_zstd_ready()) {
        err = ENOSYS;
    }
    return PyLong_FromLong(err);
}

static PyObject *set_zspill(PyObject *Py_UNUSED(m), PyObject *arg)
{
    int on = PyObject_IsTrue(arg);
    if (on < 0) {
        return NULL;
    }
    if (on && oc_pager_errors_init() < 0) { /* what a unit that cannot be read raises */
        return NULL;
    }
    atomic_store(&oc_zspill_enabled, on);
    Py_RETURN_NONE;
}

static PyObject *pager_threads(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    return PyLong_FromLong(atomic_load(&oc_pager_threads));
}

static PyMethodDef module_methods[] = {
    {"set_handler", set_handler, METH_O, "Install a handler capsule (None: NumPy's default); return the old one."},
    {"get_handler", get_handler, METH_NOARGS, "The handler capsule of the current context."},
    {"block_info", block_info, METH_O, "(owner_id, alloc_id, size, flags, address) or None."},
    {"transfer", transfer, METH_VARARGS, "Move a block to a node; None or (refused_id, limit, used)."},
    {"take_failure", take_failure, METH_NOARGS, "This thread's last allocation failure, cleared."},
    {"set_trace", set_trace, METH_VARARGS, "Install (on_alloc, on_free) callbacks, or (None, None)."},
    {"get_large_threshold", get_large_threshold, METH_NOARGS, "Bytes from which blocks are regions."},
    {"set_large_threshold", set_large_threshold, METH_O, "Set the region threshold in bytes."},
    {"spill", spill, METH_O, "Move an array's block to disk; the bytes moved."},
    {"unspill", unspill, METH_O, "Bring a block back to RAM; bytes moved or (refused_id, limit, used)."},
    {"spill_subtree", spill_subtree, METH_VARARGS, "Spill every RAM region of a node's subtree."},
    {"evict", evict, METH_O, "Spill the oldest RAM regions until the given bytes are released."},
    {"drop_disk_pages", drop_disk_pages, METH_NOARGS, "Drop resident pages of on-disk regions."},
    {"set_spill_dir", set_spill_dir, METH_O, "Directory for temporary files."},
    {"set_spill_limit", set_spill_limit, METH_O, "Cap on bytes on disk (-1: none)."},
    {"spill_used", spill_used, METH_NOARGS, "Bytes reserved on disk now."},
    {"set_pressure_callback", set_pressure_callback, METH_O, "cb(node_id, size) -> retry?, or None."},
    {"set_disk_refusal_callback", set_disk_refusal_callback, METH_O,
     "cb(node_id, refused_id, size, errno) when placing an array on disk fails, or None."},
    {"set_huge_pages", set_huge_pages, METH_O, "Advise huge pages for large mappings; returns the old setting."},
    {"region_cache", region_cache, METH_VARARGS, "(cached, limit); region_cache(n) sets the limit, (-1) empties."},
    {"scratch", scratch, METH_VARARGS, "Scratch bytes mapped; scratch(True) first releases idle threads' scratch and cached regions."},
    {"move_guard", move_guard, METH_NOARGS, "How moves hold concurrent writers: a GUARD_* constant."},
    {"set_move_guard", set_move_guard, METH_O, "Choose the guard (GUARD_*) for moves; OSError EBUSY once another is in force."},
    {"set_physical_limit", set_physical_limit, METH_O, "max_physical_bytes for allocations (-1: none)."},
    {"physical_sample", physical_sample, METH_O, "Resident anonymous + shared bytes just measured."},
    {"forks_prepared", forks_prepared, METH_NOARGS, "How many times this process prepared a fork."},
    {"zspill_check", zspill_check, METH_NOARGS, "0, or the errno of why compressed spill cannot work here."},
    {"set_zspill", set_zspill, METH_O, "Allow compressed spill (after zspill_check)."},
    {"pager_check", pager_check, METH_NOARGS, "(errno or 0, write-protect faults?) of opening a kernel-mode userfaultfd."},
    {"pager_take_fault", pager_take_fault, METH_NOARGS, "This thread's pager failure (None if none), taken; failed units are dropped."},
    {"pager_threads", pager_threads, METH_NOARGS, "Threads serving chunk-backed arrays now."},
    {"read_chunks", oc_py_read_chunks, METH_VARARGS, "Run chunk jobs (read, decode) until none is left; None or (job, message)."},
    {"zstd_available", oc_py_zstd_available, METH_NOARGS, "Whether libzstd.so.1 could be loaded."},
    {"codec_library", oc_py_codec_library, METH_VARARGS, "codec_library(which, path) -> bool: load a codec's library (LIB_BLOSC, LIB_LZ4, LIB_CRC32C)."},
    {"codec_ready", oc_py_codec_ready, METH_VARARGS, "codec_ready(codec) -> bool: whether the native reader decodes this codec number."},
    {"crc32c", oc_py_crc32c, METH_O, "crc32c(data) -> int: the CRC-32C of a buffer's bytes."},
    {"zstd_write", oc_py_zstd_write, METH_VARARGS, "Write one zstd frame of a buffer's bytes to a file, compressed without the GIL."},
    {"zlib_available", oc_py_zlib_available, METH_NOARGS, "Whether libz.so.1 could be loaded (HDF5 deflate chunks)."},
    {"h5_decode", oc_py_h5_decode, METH_VARARGS, "h5_decode(codec, mask, stored, chunk_nbytes, skip, n) -> bytes: undo an HDF5 filter pipeline, as the pager does."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "oocarray._native",
    .m_doc = "oocarray's native NEP 49 allocation handler.",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__native(void)
{
    import_array();
    if (PyType_Ready(&NodeType) < 0 || PyType_Ready(&PagesType) < 0) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&native_module);
    if (m == NULL) {
        return NULL;
    }
    oc_fork_install();
    if (PyModule_AddObjectRef(m, "Node", (PyObject *)&NodeType) < 0 ||
        PyModule_AddObjectRef(m, "Pages", (PyObject *)&PagesType) < 0 ||
        PyModule_AddIntConstant(m, "HEADER_BYTES", OC_HEADER_BYTES) < 0 ||
        PyModule_AddIntConstant(m, "FLAG_REGION", OC_FLAG_REGION) < 0 ||
        PyModule_AddIntConstant(m, "FLAG_KEPT", OC_FLAG_KEPT) < 0 ||
        PyModule_AddIntConstant(m, "FLAG_TRACED", OC_FLAG_TRACED) < 0 ||
        PyModule_AddIntConstant(m, "FAIL_BUDGET", OC_FAIL_BUDGET) < 0 ||
        PyModule_AddIntConstant(m, "FAIL_CLOSED", OC_FAIL_CLOSED) < 0 ||
        PyModule_AddIntConstant(m, "FAIL_OS", OC_FAIL_OS) < 0 ||
        PyModule_AddIntConstant(m, "FAIL_SPILL", OC_FAIL_SPILL) < 0 ||
        PyModule_AddIntConstant(m, "FLAG_SPILLED", OC_FLAG_SPILLED) < 0 ||
        PyModule_AddIntConstant(m, "FLAG_ZSPILLED", OC_FLAG_ZSPILLED) < 0 ||
        PyModule_AddIntConstant(m, "SPILL_ZARR", OC_SPILL_ZARR) < 0 ||
        PyModule_AddIntConstant(m, "LOCATION_ZARR", OC_LOCATION_ZARR) < 0 ||
        PyModule_AddIntConstant(m, "FLAG_MAPPED", OC_FLAG_MAPPED) < 0 ||
        PyModule_AddIntConstant(m, "SPILL_FAIL", OC_SPILL_FAIL) < 0 ||
        PyModule_AddIntConstant(m, "SPILL_MMAP", OC_SPILL_MMAP) < 0 ||
        PyModule_AddIntConstant(m, "SPILL_EVICT", OC_SPILL_EVICT) < 0 ||
        PyModule_AddIntConstant(m, "LOCATION_RAM", OC_LOCATION_RAM) < 0 ||
        PyModule_AddIntConstant(m, "LOCATION_MMAP", OC_LOCATION_MMAP) < 0 ||
        PyModule_AddIntConstant(m, "FLAG_ARENA", OC_FLAG_ARENA) < 0 ||
        PyModule_AddIntConstant(m, "FLAG_COW", OC_FLAG_COW) < 0 ||
        PyModule_AddIntConstant(m, "GUARD_AUTO", OC_GUARD_AUTO) < 0 ||
        PyModule_AddIntConstant(m, "GUARD_SIGNAL", OC_GUARD_SIGNAL) < 0 ||
        PyModule_AddIntConstant(m, "GUARD_UFFD_USER", OC_GUARD_UFFD_USER) < 0 ||
        PyModule_AddIntConstant(m, "GUARD_UFFD", OC_GUARD_UFFD) < 0 ||
        PyModule_AddIntConstant(m, "FLAG_CYCLE_EXTERNAL", OC_FLAG_CYCLE_EXTERNAL) < 0 ||
        PyModule_AddIntConstant(m, "CODEC_RAW", OC_CODEC_RAW) < 0 ||
        PyModule_AddIntConstant(m, "CODEC_ZSTD", OC_CODEC_ZSTD) < 0 ||
        PyModule_AddIntConstant(m, "CODEC_H5", OC_CODEC_H5) < 0 ||
        PyModule_AddIntConstant(m, "CODEC_BLOSC", OC_CODEC_BLOSC) < 0 ||
        PyModule_AddIntConstant(m, "CODEC_GZIP", OC_CODEC_GZIP) < 0 ||
        PyModule_AddIntConstant(m, "CODEC_LZ4", OC_CODEC_LZ4) < 0 ||
        PyModule_AddIntConstant(m, "CODEC_CRC32C", OC_CODEC_CRC32C) < 0 ||
        PyModule_AddIntConstant(m, "CODEC_VERIFY", OC_CODEC_VERIFY) < 0 ||
        PyModule_AddIntConstant(m, "LIB_BLOSC", OC_LIB_BLOSC) < 0 ||
        PyModule_AddIntConstant(m, "LIB_LZ4", OC_LIB_LZ4) < 0 ||
        PyModule_AddIntConstant(m, "LIB_CRC32C", OC_LIB_CRC32C) < 0 ||
        PyModule_AddIntConstant(m, "H5_SHUFFLE", OC_H5_SHUFFLE) < 0 ||
        PyModule_AddIntConstant(m, "H5_DEFLATE", OC_H5_DEFLATE) < 0 ||
        PyModule_AddIntConstant(m, "H5_FLETCHER32", OC_H5_FLETCHER32) < 0 ||
        PyModule_AddIntConstant(m, "H5_MAX_STEPS", OC_H5_MAX_STEPS) < 0 ||
        PyModule_AddIntConstant(m, "FAIL_WORKSPACE_FULL", OC_FAIL_WORKSPACE_FULL) < 0 ||
        PyModule_AddIntConstant(m, "WS_EXTERNAL", OC_WS_EXTERNAL) < 0 ||
        PyModule_AddIntConstant(m, "WS_REALLOCATE", OC_WS_REALLOCATE) < 0 ||
        PyModule_AddIntConstant(m, "WS_FAIL", OC_WS_FAIL) < 0 ||
        PyModule_AddIntConstant(m, "WS_MODE_NORMAL", OC_WS_MODE_NORMAL) < 0 ||
        PyModule_AddIntConstant(m, "WS_MODE_BYPASS", OC_WS_MODE_BYPASS) < 0 ||
        PyModule_AddIntConstant(m, "WS_MODE_SPILL_EVERYTHING", OC_WS_MODE_SPILL_EVERYTHING) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
