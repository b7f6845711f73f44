/*
 * Workspaces (workspace.c): arena chunks reused by every cycle of a loop.
 */
#ifndef OC_WORKSPACE_H
#define OC_WORKSPACE_H

#include "oc_core.h"

/* workspace.c: arena chunks and cycles */
typedef struct oc_chunk {
    char *base;
    size_t capacity;
    size_t offset;
    atomic_int_fast64_t live; /* arena blocks not yet freed */
    atomic_int retired;       /* no longer the workspace's arena: unmapped when live is 0 */
    int on_disk;
    int fd;  /* the file behind an on-disk arena, else -1 */
    int cow; /* fork left it a copy-on-write mapping of its file */
    pg_array *pager; /* location="zarr": the pager's array over it (zspill.c), else NULL */
    struct oc_chunk *prev_on_disk, *next_on_disk;
    oc_node *node; /* holds a reference; the capacity is reserved on its budget chain */
} oc_chunk;

struct oc_workspace {
    oc_chunk *chunk;
    atomic_int in_cycle;
    atomic_uint_fast64_t cycle;
    int mode;
    int full_policy; /* OC_WS_* */
    int location;    /* OC_LOCATION_* */
    int arena_error; /* errno of the last arena that could not be made (0: none) */
    size_t cycle_requested;
    int cycle_overflowed;
    atomic_int_fast64_t external_live;
    atomic_int_fast64_t pinned_bytes;
    atomic_int_fast64_t pinned_chunks;
    int64_t reallocations;
    int64_t arena_allocations;
    int64_t external_allocations;
    int64_t spilled_allocations;
};

#define OC_WS_ORDINARY 0 /* oc_workspace_alloc's *handled: not the workspace's */
#define OC_WS_DONE 1     /* made in the arena, or refused (NULL) */
#define OC_WS_OUTSIDE 2  /* the cycle's, made the ordinary way then given to oc_workspace_outside */
void *oc_workspace_alloc(oc_node *node, size_t size, int zero, int *handled);
void oc_workspace_outside(oc_node *node, oc_header *h);
void oc_arena_block_free(oc_header *h);
void oc_workspace_block_freed(oc_header *h, oc_node *owner);
void oc_workspace_destroy(oc_node *node);
int oc_workspace_begin(oc_node *node, size_t arena_bytes);
void oc_workspace_end(oc_node *node, int64_t *arena_escapes, int64_t *external_escapes,
                      int64_t *requested, int *overflowed);
size_t oc_workspace_arena_bytes(oc_node *node);
void oc_workspace_atfork(int phase);

#endif
