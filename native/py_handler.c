/* Module functions of the handler: its activation, the blocks it made (queries, moves between
 * nodes), failures, tracing and the callbacks it makes, and the process's memory settings
 * (region threshold, huge pages, caches, scratch, max_physical_bytes, forks). */
#include "py_module.h"
#include "oc_regions.h"
#include "oc_spill.h"
#include "oc_alloc.h"
#include "oc_chunks.h"

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

oc_header *oc_py_managed_header(PyObject *obj)
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
    oc_header *h = oc_py_managed_header(obj);
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
    if (!PyArg_ParseTuple(args, "OO!p", &obj, &oc_py_NodeType, &target, &kept)) {
        return NULL;
    }
    oc_header *h = oc_py_managed_header(obj);
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

/* Sets a callback the handler calls (None: none); what names it in the TypeError. */
static PyObject *set_callback(PyObject **slot, PyObject *cb, const char *what)
{
    if (cb != Py_None && !PyCallable_Check(cb)) {
        PyErr_Format(PyExc_TypeError, "the %s callback must be callable or None", what);
        return NULL;
    }
    Py_XSETREF(*slot, cb == Py_None ? NULL : Py_NewRef(cb));
    Py_RETURN_NONE;
}

static PyObject *set_pressure_callback(PyObject *Py_UNUSED(m), PyObject *cb)
{
    return set_callback(&oc_pressure_cb, cb, "pressure");
}

static PyObject *set_pressure_quiet(PyObject *Py_UNUSED(m), PyObject *args)
{
    double until;
    int heard;
    if (!PyArg_ParseTuple(args, "dp", &until, &heard)) {
        return NULL;
    }
    atomic_store(&oc_pressure_quiet_until_ns, (long long)(until * 1e9));
    atomic_store(&oc_pressure_heard, heard);
    Py_RETURN_NONE;
}

static PyObject *set_disk_refusal_callback(PyObject *Py_UNUSED(m), PyObject *cb)
{
    return set_callback(&oc_disk_refusal_cb, cb, "disk refusal");
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

PyMethodDef oc_py_handler_methods[] = {
    {"set_handler", set_handler, METH_O, "Install a handler capsule (None: NumPy's default); return the old one."},
    {"get_handler", get_handler, METH_NOARGS, "The handler capsule of the current context."},
    {"block_info", block_info, METH_O, "(owner_id, alloc_id, size, flags, address) or None."},
    {"transfer", transfer, METH_VARARGS, "Move a block to a node; None or (refused_id, limit, used)."},
    {"take_failure", take_failure, METH_NOARGS, "This thread's last allocation failure, cleared."},
    {"set_trace", set_trace, METH_VARARGS, "Install (on_alloc, on_free) callbacks, or (None, None)."},
    {"get_large_threshold", get_large_threshold, METH_NOARGS, "Bytes from which blocks are regions."},
    {"set_large_threshold", set_large_threshold, METH_O, "Set the region threshold in bytes."},
    {"set_pressure_callback", set_pressure_callback, METH_O, "cb(node_id, size) -> retry?, or None."},
    {"set_pressure_quiet", set_pressure_quiet, METH_VARARGS,
     "(until, heard): no pressure callback before time.monotonic() reaches until, unless heard."},
    {"set_disk_refusal_callback", set_disk_refusal_callback, METH_O,
     "cb(node_id, refused_id, size, errno) when placing an array on disk fails, or None."},
    {"set_huge_pages", set_huge_pages, METH_O, "Advise huge pages for large mappings; returns the old setting."},
    {"region_cache", region_cache, METH_VARARGS, "(cached, limit); region_cache(n) sets the limit, (-1) empties."},
    {"scratch", scratch, METH_VARARGS, "Scratch bytes mapped; scratch(True) first releases idle threads' scratch and cached regions."},
    {"set_physical_limit", set_physical_limit, METH_O, "max_physical_bytes for allocations (-1: none)."},
    {"physical_sample", physical_sample, METH_O, "Resident anonymous + shared bytes just measured."},
    {"forks_prepared", forks_prepared, METH_NOARGS, "How many times this process prepared a fork."},
    {NULL, NULL, 0, NULL},
};
