/*
 * What the handler (alloc.c) and the workspaces (workspace.c) both give each block and thread:
 * the block's allocation id, and the record of the thread's last failed allocation (read once
 * by Python, through take_failure, to say why it got NULL).
 */
#include "oc_core.h"

#include <string.h>

static atomic_uint_fast64_t next_alloc_id = 1;
static OC_TLS oc_failure last_failure;

/* Ids are handed to each thread in batches, so that the hot path needs no shared atomic. */
#define ALLOC_ID_BATCH 4096
static OC_TLS uint64_t thread_next_id, thread_id_end;

uint64_t oc_next_alloc_id(void)
{
    if (thread_next_id == thread_id_end) {
        thread_next_id = atomic_fetch_add_explicit(&next_alloc_id, ALLOC_ID_BATCH, memory_order_relaxed);
        thread_id_end = thread_next_id + ALLOC_ID_BATCH;
    }
    return thread_next_id++;
}

void oc_record_failure(int kind, int err, oc_node *asked, oc_node *refused, int64_t requested)
{
    last_failure.kind = kind;
    last_failure.err = err;
    last_failure.node_id = asked ? asked->id : 0;
    last_failure.refused_id = refused ? refused->id : 0;
    last_failure.requested = requested;
    last_failure.limit = refused ? atomic_load(&refused->max_bytes) : -1;
    last_failure.used = refused ? atomic_load(&refused->current_bytes) : 0;
}

oc_failure oc_take_failure(void)
{
    oc_failure f = last_failure;
    memset(&last_failure, 0, sizeof(last_failure));
    return f;
}
