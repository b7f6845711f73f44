/*
 * Regions (regions.c): page-aligned mappings whose first page holds the block's header, and
 * what else that page keeps (the file behind an on-disk region, a compressed one's pager
 * array).  The registry of every region, and the cache of freed ones.
 */
#ifndef OC_REGIONS_H
#define OC_REGIONS_H

#include "oc_core.h"

/* regions.c: page-aligned mappings with the header in the page before the data */
size_t oc_page_bytes(void);
void *oc_region_map(size_t size, int zero, size_t *map_bytes);
void *oc_map_fresh(size_t data_bytes, size_t *map_bytes); /* data after one spare page */
void oc_region_unmap(oc_header *h, size_t cache_cap); /* cached if the cache stays <= cap */
void oc_registry_lock(void);
void oc_registry_unlock(void);
void oc_registry_link(oc_header *h);
void oc_registry_unlink(oc_header *h);
oc_header *oc_registry_first(void);
oc_header *oc_registry_next(oc_header *h);
extern atomic_size_t oc_region_cache_limit;
extern atomic_int oc_huge_pages; /* advise MADV_HUGEPAGE for large regions and arenas */
size_t oc_region_cache_bytes(void);
void oc_region_cache_trim(size_t keep_bytes);
void *oc_map_reserved(size_t data_bytes, size_t *map_bytes); /* data pages inaccessible, uncommitted */
void oc_regions_atfork(int phase);
static inline size_t oc_region_data_bytes(const oc_header *h) { return h->map_bytes - oc_page_bytes(); }
/* A region's header page has room before the header: the descriptor of its file lives there
 * (-1 while the region is in RAM), kept open for fork and for bringing the data back. */
static inline int *oc_region_fd(oc_header *h) { return (int *)((char *)h - sizeof(int)); }
/* Where the region's data starts in that file (0 for a file of its own). */
static inline uint64_t *oc_region_offset(oc_header *h) { return (uint64_t *)((char *)h - 16); }
/* A compressed-spilled region's pager array, in the header page too. */
static inline pg_array **oc_region_pager(oc_header *h) { return (pg_array **)((char *)h - 24); }

#endif
