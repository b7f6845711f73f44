/*
 * The handler's calls into Python (alloc.c): tracing (off by default), the memory-pressure
 * callback before a budget refusal, and the disk-refusal callback.  Each takes the GIL from any
 * thread and leaves the exception pending in that thread, if any, as it was.
 */
#include "oc_core.h"
#include "oc_alloc.h"

#include <stdarg.h>
#include <time.h>

atomic_int oc_trace_enabled = 0;
PyObject *oc_trace_alloc_cb = NULL;
PyObject *oc_trace_free_cb = NULL;
PyObject *oc_pressure_cb = NULL;
atomic_llong oc_pressure_quiet_until_ns = 0;
atomic_int oc_pressure_heard = 0;
PyObject *oc_disk_refusal_cb = NULL;

/* GIL held: calls cb with the arguments Py_BuildValue makes of format, the pending exception
 * kept.  The result (a new reference), or NULL: a failed call is reported as unraisable. */
static PyObject *call(PyObject *cb, const char *format, ...)
{
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    Py_INCREF(cb);
    va_list va;
    va_start(va, format);
    PyObject *args = Py_VaBuildValue(format, va);
    va_end(va);
    PyObject *r = NULL;
    if (args == NULL) {
        PyErr_Clear();
    }
    else {
        r = PyObject_CallObject(cb, args);
        if (r == NULL) {
            PyErr_WriteUnraisable(cb);
        }
        Py_DECREF(args);
    }
    Py_DECREF(cb);
    PyErr_Restore(et, ev, tb);
    return r;
}

/* Whether the allocation was traced (the callback set and tracing on). */
int oc_trace_alloc(oc_header *h, oc_node *owner)
{
    if (!Py_IsInitialized()) {
        return 0;
    }
    PyGILState_STATE g = PyGILState_Ensure();
    int traced = 0;
    PyObject *cb = oc_trace_alloc_cb;
    if (cb != NULL && atomic_load(&oc_trace_enabled)) {
        Py_XDECREF(call(cb, "(KnK)", (unsigned long long)h->id, (Py_ssize_t)h->size,
                        (unsigned long long)owner->id));
        traced = 1;
    }
    PyGILState_Release(g);
    return traced;
}

void oc_trace_free(oc_header *h)
{
    if (!Py_IsInitialized()) {
        return;
    }
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *cb = oc_trace_free_cb;
    if (cb != NULL) {
        Py_XDECREF(call(cb, "(K)", (unsigned long long)h->id));
    }
    PyGILState_Release(g);
}

/* Asks Python to free memory (a throttled garbage collection) before a budget refusal.
 * Returns whether it is worth trying the reservation again. */
int oc_relieve_pressure(oc_node *asked, int64_t size)
{
    if (oc_pressure_cb == NULL || !Py_IsInitialized()) {
        return 0;
    }
    /* Nothing for Python to do until its next collection is allowed, unless an event listener
     * waits or a refusal (spill="fail") needs its snapshot: a budget that stays full sends every
     * array to disk without taking the GIL. */
    if (!atomic_load_explicit(&oc_pressure_heard, memory_order_relaxed) &&
        atomic_load_explicit(&asked->spill_policy, memory_order_relaxed) != OC_SPILL_FAIL) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        long long ns = (long long)now.tv_sec * 1000000000LL + now.tv_nsec;
        if (ns < atomic_load_explicit(&oc_pressure_quiet_until_ns, memory_order_relaxed)) {
            return 0;
        }
    }
    PyGILState_STATE g = PyGILState_Ensure();
    int retry = 0;
    PyObject *cb = oc_pressure_cb;
    if (cb != NULL) {
        PyObject *r = call(cb, "(KL)", (unsigned long long)asked->id, (long long)size);
        if (r != NULL) {
            retry = PyObject_IsTrue(r) == 1;
            Py_DECREF(r);
        }
    }
    PyGILState_Release(g);
    return retry;
}

/* Tells Python that the disk refused `size` bytes, while the arrays alive at the failure are
 * still alive: NumPy raises its error only after freeing the failed expression's temporaries,
 * so the free space and the arrays on disk must be seen now for the message to be true. */
void oc_disk_refused(oc_node *asked, oc_node *refused, int64_t size, int err)
{
    if (oc_disk_refusal_cb == NULL || !Py_IsInitialized()) {
        return;
    }
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *cb = oc_disk_refusal_cb;
    if (cb != NULL) {
        Py_XDECREF(call(cb, "(KKLi)", (unsigned long long)asked->id,
                        (unsigned long long)(refused ? refused->id : 0), (long long)size, err));
    }
    PyGILState_Release(g);
}
