/*
 * Blocks on disk: same-address spill and eviction (spill.c), the shared heap file (heap.c), writers held while pages move (moves.c),
 * max_physical_bytes (physical.c) and compressed spill (zspill.c).
 */
#ifndef OC_SPILL_H
#define OC_SPILL_H

#include "oc_core.h"
#include "oc_files.h"

/* spill.c: same-address remapping, eviction */
int oc_map_region_to_file(oc_header *h);   /* registry lock held; errno value or 0 */
void *oc_map_small_on_disk(size_t data_bytes, int zero, size_t *map_bytes, int *err); /* data, or NULL */
int oc_spill_block(oc_header *h);          /* registry lock held; errno value or 0 */
int oc_unspill_block(oc_header *h);        /* registry lock held; errno value or 0 */
/* A freed on-disk block's file space, given back once its mapping is gone (a header kept in
 * the file must stay readable until then). */
typedef struct {
    int fd;
    uint64_t offset;
    size_t bytes;
    int heap;
    int shared_by_fork;
} oc_disk_space;
oc_disk_space oc_disk_release(oc_header *h); /* accounts the block; give the space after unmap */
void oc_disk_space_give(oc_disk_space space);
/* A freed region placed whole in a heap slot stays mapped for the next one (1: the caller
 * neither unmaps nor gives it), else 0. */
int oc_keep_small_on_disk(oc_header *h, oc_disk_space space);
int oc_node_in_subtree(oc_node *n, oc_node *root);
int64_t oc_evict(oc_node *scope, int64_t need_bytes, int *err);
int oc_drop_disk_pages(void);
void oc_spill_atfork(int phase);

/* heap.c: one shared file for small on-disk regions */
size_t oc_heap_slot_max_bytes(void);
int oc_heap_take(size_t bytes, int *fd, uint64_t *offset); /* 0 or errno */
void oc_heap_give(uint64_t offset, size_t bytes, int reuse);
/* A freed slot still mapped at `base` (1), or none of that size (0). */
int oc_heap_reuse(size_t bytes, char **base, int *fd, uint64_t *offset);
/* Keeps a freed slot mapped at `base` for oc_heap_reuse (1), or refuses: unmap and give it. */
int oc_heap_keep(char *base, uint64_t offset, size_t bytes);
/* Gives every kept slot's blocks back to the file system (a full disk); the bytes dropped. */
size_t oc_heap_drop_kept(void);
void oc_heap_kept_stats(size_t *slots, size_t *bytes, uint64_t *reused);
void oc_heap_atfork(int phase);

/* moves.c: keeping writers waiting while a region's pages move */
typedef struct {
    char *data;
    size_t bytes;
    int mode;
    int slot;
} oc_guard;
int oc_guard_mode(void);
int oc_guard_request(int wanted);
void oc_guard_out_begin(oc_guard *g, char *data, size_t bytes);
void oc_guard_out_end(oc_guard *g, int failed);
int oc_guard_move_in(char *data, size_t bytes, int fd, uint64_t offset);
int oc_guard_populate_private(char *data, size_t bytes);
void oc_guard_atfork(int phase);

/* physical.c: max_physical_bytes at allocation time */
extern atomic_int_fast64_t oc_physical_limit; /* < 0: none */
void oc_physical_sample(int64_t resident_bytes);
int64_t oc_resident_unreclaimable(void);
int oc_physical_admit(int64_t size); /* 0: place the new block on disk to hold the limit */

/* zspill.c: compressed spill */
extern atomic_int oc_zspill_enabled; /* set from Python when the pager may be used */
int oc_zspill_block(oc_header *h);                  /* registry lock held; errno or 0 */
int oc_zunspill_block(oc_header *h);                /* registry lock held; budget reserved */
int64_t oc_zspill_again(oc_header *h, int *err);    /* RAM released by dropping paged-in units */
void oc_zspill_forget(oc_header *h);                /* the region is being freed */
void oc_zspill_move(oc_header *h, oc_node *from, oc_node *to);
void *oc_zspill_new_region(oc_node *owner, size_t size, int *err); /* location="zarr" */
pg_array *oc_zspill_arena_new(char *base, size_t capacity, oc_node *node, int *err);
void oc_zspill_arena_reset(pg_array *a); /* between cycles: every unit dropped unencoded */
void oc_zspill_arena_free(pg_array *a, size_t capacity, oc_node *node);

#endif
