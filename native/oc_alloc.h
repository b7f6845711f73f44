/*
 * The NEP 49 handler (alloc.c, its calls into Python in alloc_calls.c): the nodes it serves,
 * its settings and callbacks; and the fork handlers (fork.c), which call every component's.
 */
#ifndef OC_ALLOC_H
#define OC_ALLOC_H

#include "oc_core.h"

/* alloc.c */
oc_node *oc_handler_node_new(oc_node *parent, int64_t max_bytes); /* oc_node_new, with its handler */
extern atomic_size_t oc_large_threshold;
extern atomic_int oc_trace_enabled;
extern PyObject *oc_trace_alloc_cb;
extern PyObject *oc_trace_free_cb;
extern PyObject *oc_pressure_cb;
/* Until when (CLOCK_MONOTONIC ns) the pressure callback has nothing to do, and whether event
 * listeners want every call anyway (set from Python). */
extern atomic_llong oc_pressure_quiet_until_ns;
extern atomic_int oc_pressure_heard;
extern PyObject *oc_disk_refusal_cb; /* cb(node_id, refused_id, size, errno): at the failure */
int oc_is_our_handler(PyObject *capsule);

/* alloc_calls.c: the handler's calls into Python, from any thread */
int oc_trace_alloc(oc_header *h, oc_node *owner); /* whether it was traced */
void oc_trace_free(oc_header *h);
int oc_relieve_pressure(oc_node *asked, int64_t size); /* whether to try the budget again */
void oc_disk_refused(oc_node *asked, oc_node *refused, int64_t size, int err);

/* fork.c */
void oc_fork_install(void);
extern atomic_int_fast64_t oc_forks_prepared;

#endif
