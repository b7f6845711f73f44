/* Module functions of spill: moving blocks to disk and back (spill.c), eviction, the spill
 * directory and limit, the guard that holds writers during moves (moves.c), and compressed
 * spill's switch (zspill.c). */
#include "py_module.h"
#include "oc_regions.h"
#include "oc_files.h"
#include "oc_spill.h"
#include "oc_codecs.h"
#include "oc_pager.h"

/* Moves the block under `obj` to disk.  Returns the bytes moved: 0 for blocks that are
 * already on disk or too small to live in a region. */
static PyObject *spill(PyObject *Py_UNUSED(m), PyObject *obj)
{
    oc_header *h = oc_py_managed_header(obj);
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
        return oc_py_errno_error(err);
    }
    return PyLong_FromLongLong(moved);
}

/* Brings the block under `obj` back to RAM, budget permitting.  Returns the bytes moved, or
 * (refused_node_id, limit, used) when a budget refused. */
static PyObject *unspill(PyObject *Py_UNUSED(m), PyObject *obj)
{
    oc_header *h = oc_py_managed_header(obj);
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
        return oc_py_errno_error(err);
    }
    return PyLong_FromLongLong(moved);
}

/* Spills every RAM region owned in the subtree of `node`; with skip_kept, blocks that `node`
 * itself marked kept stay.  Returns the bytes moved. */
static PyObject *spill_subtree(PyObject *Py_UNUSED(m), PyObject *args)
{
    NodeObject *target;
    int skip_kept;
    if (!PyArg_ParseTuple(args, "O!p", &oc_py_NodeType, &target, &skip_kept)) {
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
        return oc_py_errno_error(err);
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
        return oc_py_errno_error(err);
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
        return oc_py_errno_error(err);
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
        return oc_py_errno_error(err);
    }
    Py_RETURN_NONE;
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

static PyObject *heap_kept(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    size_t slots, bytes;
    uint64_t reused;
    oc_heap_kept_stats(&slots, &bytes, &reused);
    return Py_BuildValue("(nnK)", (Py_ssize_t)slots, (Py_ssize_t)bytes, (unsigned long long)reused);
}

PyMethodDef oc_py_spill_methods[] = {
    {"spill", spill, METH_O, "Move an array's block to disk; the bytes moved."},
    {"unspill", unspill, METH_O, "Bring a block back to RAM; bytes moved or (refused_id, limit, used)."},
    {"spill_subtree", spill_subtree, METH_VARARGS, "Spill every RAM region of a node's subtree."},
    {"evict", evict, METH_O, "Spill the oldest RAM regions until the given bytes are released."},
    {"drop_disk_pages", drop_disk_pages, METH_NOARGS, "Drop resident pages of on-disk regions."},
    {"set_spill_dir", set_spill_dir, METH_O, "Directory for temporary files."},
    {"set_spill_limit", set_spill_limit, METH_O, "Cap on bytes on disk (-1: none)."},
    {"spill_used", spill_used, METH_NOARGS, "Bytes reserved on disk now."},
    {"heap_kept", heap_kept, METH_NOARGS, "(slots, bytes) of the heap file kept mapped for reuse, and the reuses so far."},
    {"move_guard", move_guard, METH_NOARGS, "How moves hold concurrent writers: a GUARD_* constant."},
    {"set_move_guard", set_move_guard, METH_O, "Choose the guard (GUARD_*) for moves; OSError EBUSY once another is in force."},
    {"zspill_check", zspill_check, METH_NOARGS, "0, or the errno of why compressed spill cannot work here."},
    {"set_zspill", set_zspill, METH_O, "Allow compressed spill (after zspill_check)."},
    {NULL, NULL, 0, NULL},
};
