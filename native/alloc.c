/*
 * The NEP 49 data-memory handler.  Every function here may run on any thread, with or without
 * the GIL: counting is atomic, and the region registry has its own mutex.  Only tracing (off by
 * default) and the memory-pressure callback (before a budget refusal) take the GIL, to call
 * back into Python (alloc_calls.c).
 */
#include "oc_core.h"
#include "oc_regions.h"
#include "oc_spill.h"
#include "oc_workspace.h"
#include "oc_alloc.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Measured in BENCHMARKS.md (threshold sweep): see there for why this value. */
atomic_size_t oc_large_threshold = 256 * 1024;


/* ---- small blocks: malloc behind a per-thread cache of recently freed blocks ----
 * NumPy's default allocator caches small blocks too; without a cache of our own, each tiny
 * array would pay a full malloc/free round trip.  Blocks are rounded up to a 64-byte class. */

#define SMALL_CLASS_BYTES 64
#define SMALL_CACHED_MAX_BYTES 1024
#define SMALL_CLASSES (SMALL_CACHED_MAX_BYTES / SMALL_CLASS_BYTES)
#define SMALL_CACHE_DEPTH 16

typedef struct {
    int count[SMALL_CLASSES + 1];
    oc_header *blocks[SMALL_CLASSES + 1][SMALL_CACHE_DEPTH];
} small_cache;

static OC_TLS small_cache *thread_cache;
static pthread_key_t cache_key;
static pthread_once_t cache_key_once = PTHREAD_ONCE_INIT;

static void cache_destroy(void *p)
{
    small_cache *c = p;
    for (int k = 0; k <= SMALL_CLASSES; k++) {
        for (int i = 0; i < c->count[k]; i++) {
            free(c->blocks[k][i]);
        }
    }
    free(c);
}

static void cache_key_create(void) { pthread_key_create(&cache_key, cache_destroy); }

static small_cache *get_cache(void)
{
    if (thread_cache == NULL) {
        pthread_once(&cache_key_once, cache_key_create);
        thread_cache = calloc(1, sizeof(small_cache));
        if (thread_cache != NULL) {
            pthread_setspecific(cache_key, thread_cache);
        }
    }
    return thread_cache;
}

static oc_header *small_get(size_t size, int zero)
{
    oc_header *h = NULL;
    if (size <= SMALL_CACHED_MAX_BYTES) {
        size_t k = (size + SMALL_CLASS_BYTES - 1) / SMALL_CLASS_BYTES;
        size_t capacity = k * SMALL_CLASS_BYTES;
        small_cache *c = get_cache();
        if (c != NULL && c->count[k] > 0) {
            h = c->blocks[k][--c->count[k]];
            if (zero) {
                memset((char *)h + OC_HEADER_BYTES, 0, size);
            }
        }
        else {
            h = zero ? calloc(1, OC_HEADER_BYTES + capacity) : malloc(OC_HEADER_BYTES + capacity);
        }
        if (h != NULL) {
            h->map_bytes = capacity;
        }
        return h;
    }
    h = zero ? calloc(1, OC_HEADER_BYTES + size) : malloc(OC_HEADER_BYTES + size);
    if (h != NULL) {
        h->map_bytes = size;
    }
    return h;
}

/* For small blocks map_bytes is the usable capacity; blocks of a cached class go back to the
 * freeing thread's cache. */
static void small_put(oc_header *h)
{
    size_t capacity = h->map_bytes;
    if (capacity <= SMALL_CACHED_MAX_BYTES && capacity % SMALL_CLASS_BYTES == 0) {
        size_t k = capacity / SMALL_CLASS_BYTES;
        small_cache *c = thread_cache;
        if (c != NULL && c->count[k] < SMALL_CACHE_DEPTH) {
            c->blocks[k][c->count[k]++] = h;
            return;
        }
    }
    free(h);
}

/* ---- allocation ---- */

static void header_init(oc_header *h, oc_node *owner, size_t size, unsigned flags, size_t map_bytes)
{
    h->size = size;
    h->map_bytes = map_bytes;
    h->id = oc_next_alloc_id();
    h->magic = OC_MAGIC;
    h->cycle = 0;
    atomic_init(&h->flags, flags);
    atomic_init(&h->owner, owner);
    oc_count_allocation(owner, (int64_t)size, 1);
    if (atomic_load_explicit(&oc_trace_enabled, memory_order_relaxed) && oc_trace_alloc(h, owner)) {
        atomic_fetch_or(&h->flags, OC_FLAG_TRACED);
    }
}

static void region_registered(oc_header *h, oc_node *owner)
{
    atomic_fetch_add_explicit(&owner->region_bytes, (int64_t)h->size, memory_order_relaxed);
    atomic_fetch_add_explicit(&owner->region_count, 1, memory_order_relaxed);
    oc_registry_lock();
    oc_registry_link(h);
    oc_registry_unlock();
}

/* A block in RAM; its size is already reserved on the owner's budget chain. */
static void *block_new(oc_node *owner, size_t size, int zero)
{
    if (size >= atomic_load_explicit(&oc_large_threshold, memory_order_relaxed)) {
        size_t map_bytes;
        void *data = oc_region_map(size, zero, &map_bytes);
        if (data == NULL) {
            return NULL;
        }
        oc_header *h = oc_header_of(data);
        *oc_region_fd(h) = -1;
        header_init(h, owner, size, OC_FLAG_REGION, map_bytes);
        region_registered(h, owner);
        return data;
    }
    oc_header *h = small_get(size, zero);
    if (h == NULL) {
        return NULL;
    }
    header_init(h, owner, size, 0, h->map_bytes);
    return (char *)h + OC_HEADER_BYTES;
}

/* A block whose data lives in a temporary file from the start: not counted as RAM. */
static void *block_new_on_disk(oc_node *owner, size_t size, int zero, int *err)
{
    size_t page = oc_page_bytes();
    size_t data_bytes = size == 0 ? page : (size + page - 1) / page * page;
    size_t map_bytes;
    /* Small ones: header and data in one mapping of a heap slot; larger ones (EFBIG there) get
     * reserved address space and a file of their own over the data. */
    void *data = oc_map_small_on_disk(data_bytes, zero, &map_bytes, err);
    oc_header *h;
    if (data == NULL && *err != EFBIG) {
        return NULL;
    }
    if (data == NULL) {
        data = oc_map_reserved(data_bytes, &map_bytes);
        if (data == NULL) {
            *err = errno ? errno : ENOMEM;
            return NULL;
        }
        h = oc_header_of(data);
        h->map_bytes = map_bytes;
        atomic_init(&h->flags, 0);
        *err = oc_map_region_to_file(h);
        if (*err) {
            munmap((char *)data - page, map_bytes);
            return NULL;
        }
    }
    h = oc_header_of(data);
    h->map_bytes = map_bytes;
    /* The placement flags (mapped; a heap slot or a file of its own) stay. */
    header_init(h, owner, size, OC_FLAG_REGION | atomic_load(&h->flags), map_bytes);
    atomic_fetch_add(&owner->mapped_bytes, (int64_t)size);
    region_registered(h, owner);
    return data;
}

static void *place_on_disk(oc_node *owner, size_t size, int zero, oc_node *refused)
{
    int err = 0;
    void *data = block_new_on_disk(owner, size, zero, &err);
    if (data == NULL) {
        oc_disk_refused(owner, refused, (int64_t)size, err);
        oc_record_failure(OC_FAIL_SPILL, err, owner, refused, (int64_t)size);
    }
    return data;
}

/* location="zarr": arrays of a spill unit or more start as compressed chunks (none written
 * yet, so they read as zeros); smaller ones are placed in files as with "mmap". */
#define ZARR_PLACED_MIN_BYTES ((size_t)1 << 20)

static void *place_compressed(oc_node *owner, size_t size)
{
    int err = 0;
    void *data = oc_zspill_new_region(owner, size, &err);
    if (data == NULL) {
        oc_disk_refused(owner, NULL, (int64_t)size, err);
        oc_record_failure(OC_FAIL_SPILL, err, owner, NULL, (int64_t)size);
        return NULL;
    }
    oc_header *h = oc_header_of(data);
    *oc_region_fd(h) = -1;
    header_init(h, owner, size, OC_FLAG_REGION | OC_FLAG_ZSPILLED, h->map_bytes);
    atomic_fetch_add(&owner->spilled_bytes, (int64_t)size);
    atomic_fetch_add(&owner->compressed_bytes, (int64_t)size);
    region_registered(h, owner);
    return data;
}

/* Allocates `size` bytes owned by `owner`: reserve on the budget chain, then get the memory.
 * Over budget: collect garbage once, then follow the owner's spill policy. */
static void *alloc_plain(oc_node *owner, size_t size, int zero, int refuse_closed)
{
    if (refuse_closed && atomic_load_explicit(&owner->closed, memory_order_relaxed)) {
        oc_record_failure(OC_FAIL_CLOSED, 0, owner, NULL, (int64_t)size);
        return NULL;
    }
    int location = atomic_load_explicit(&owner->location, memory_order_relaxed);
    if (location == OC_LOCATION_ZARR && size >= ZARR_PLACED_MIN_BYTES && atomic_load(&oc_zspill_enabled)) {
        return place_compressed(owner, size);
    }
    if (location != OC_LOCATION_RAM && size >= oc_page_bytes()) {
        return place_on_disk(owner, size, zero, NULL);
    }
    if (size > (size_t)INT64_MAX / 2) {
        /* Beyond any machine, and too big to add to a counter: the first budget on the way
         * refuses it, else the system does. */
        oc_node *limited = owner;
        while (limited != NULL && atomic_load(&limited->max_bytes) < 0) {
            limited = limited->parent;
        }
        oc_record_failure(limited ? OC_FAIL_BUDGET : OC_FAIL_OS, ENOMEM, owner, limited,
                          (int64_t)(size > (size_t)INT64_MAX ? INT64_MAX : size));
        return NULL;
    }
    oc_node *refused = oc_reserve(owner, (int64_t)size);
    if (refused != NULL) {
        if (oc_relieve_pressure(owner, (int64_t)size)) {
            refused = oc_reserve(owner, (int64_t)size);
        }
        int policy = atomic_load(&owner->spill_policy);
        if (refused != NULL && (policy == OC_SPILL_EVICT || policy == OC_SPILL_ZARR)) {
            int err;
            oc_registry_lock();
            oc_evict(refused, (int64_t)size, &err);
            oc_registry_unlock();
            refused = oc_reserve(owner, (int64_t)size);
        }
        if (refused != NULL) {
            if (policy == OC_SPILL_FAIL) {
                oc_record_failure(OC_FAIL_BUDGET, 0, owner, refused, (int64_t)size);
                return NULL;
            }
            return place_on_disk(owner, size, zero, refused);
        }
    }
    if (size >= atomic_load_explicit(&oc_large_threshold, memory_order_relaxed) &&
        !oc_physical_admit((int64_t)size) && atomic_load(&owner->spill_policy) != OC_SPILL_FAIL) {
        /* Over max_physical_bytes with nothing left to spill: the new array goes to disk. */
        oc_release(owner, (int64_t)size);
        return place_on_disk(owner, size, zero, NULL);
    }
    /* Budgets are checked first: an absurd request under a budget is the budget's refusal. */
    void *data = size > (size_t)PTRDIFF_MAX / 2 ? NULL : block_new(owner, size, zero);
    if (data == NULL) {
        int err = errno && size <= (size_t)PTRDIFF_MAX / 2 ? errno : ENOMEM;
        oc_release(owner, (int64_t)size);
        oc_record_failure(OC_FAIL_OS, err, owner, NULL, (int64_t)size);
        return NULL;
    }
    oc_raise_peaks(owner);
    return data;
}

static void *alloc_owned(oc_node *owner, size_t size, int zero, int refuse_closed)
{
    if (owner->workspace != NULL && !(refuse_closed && atomic_load(&owner->closed))) {
        int handled;
        void *data = oc_workspace_alloc(owner, size, zero, &handled);
        if (handled == OC_WS_DONE) {
            return data;
        }
        if (handled == OC_WS_OUTSIDE) {
            /* made here, not by workspace.c, which is below this file */
            data = alloc_plain(owner, size, zero, 1);
            if (data != NULL) {
                oc_workspace_outside(owner, oc_header_of(data));
            }
            return data;
        }
    }
    return alloc_plain(owner, size, zero, refuse_closed);
}

/* How much of the region cache a region freed by `owner` may leave: all of it without a
 * budget above the owner, else a sixteenth of the tightest budget, at most 16 MiB (cached
 * free regions are memory no budget counts). */
static size_t region_cache_cap(oc_node *owner)
{
    int64_t tightest = -1;
    for (oc_node *p = owner; p != NULL; p = p->parent) {
        int64_t limit = atomic_load_explicit(&p->max_bytes, memory_order_relaxed);
        if (limit >= 0 && (tightest < 0 || limit < tightest)) {
            tightest = limit;
        }
    }
    if (tightest < 0) {
        return SIZE_MAX;
    }
    size_t cap = (size_t)tightest / 16;
    return cap < ((size_t)16 << 20) ? cap : ((size_t)16 << 20);
}

static void block_free(oc_header *h)
{
    oc_node *owner = atomic_load(&h->owner);
    unsigned flags = atomic_load(&h->flags);
    int64_t size = (int64_t)h->size;
    if (flags & OC_FLAG_TRACED) {
        oc_trace_free(h);
    }
    if (flags & OC_FLAG_KEPT) {
        atomic_fetch_sub_explicit(&owner->kept_count, 1, memory_order_relaxed);
        atomic_fetch_sub_explicit(&owner->kept_bytes, size, memory_order_relaxed);
    }
    if (flags & OC_FLAG_ARENA) {
        oc_arena_block_free(h);
        oc_live_add(owner, -1);
        return;
    }
    if (flags & OC_FLAG_CYCLE_EXTERNAL) {
        oc_workspace_block_freed(h, owner);
    }
    if (flags & OC_FLAG_REGION) {
        /* Under the registry lock: an eviction may be moving this very block to disk. */
        oc_registry_lock();
        unsigned now = atomic_load(&h->flags);
        int on_disk = (now & OC_FLAG_ON_DISK) != 0;
        oc_disk_space space = {.fd = -1};
        if (on_disk) {
            space = oc_disk_release(h);
        }
        else if (now & OC_FLAG_ZSPILLED) {
            oc_zspill_forget(h);
        }
        else {
            oc_release(owner, size);
        }
        oc_registry_unlink(h);
        oc_registry_unlock();
        atomic_fetch_sub_explicit(&owner->region_bytes, size, memory_order_relaxed);
        atomic_fetch_sub_explicit(&owner->region_count, 1, memory_order_relaxed);
        h->magic = 0;
        if (on_disk && oc_keep_small_on_disk(h, space)) {
            /* a heap slot kept mapped for the next small region: h is not ours any more */
        }
        else {
            oc_region_unmap(h, region_cache_cap(owner));
            if (on_disk) {
                oc_disk_space_give(space); /* after the unmap: the header may live in that space */
            }
        }
    }
    else {
        oc_release(owner, size);
        h->magic = 0;
        small_put(h);
    }
    oc_live_add(owner, -1);
}

static void *oc_malloc(void *ctx, size_t size) { return alloc_owned((oc_node *)ctx, size, 0, 1); }

static void *oc_calloc(void *ctx, size_t nelem, size_t elsize)
{
    if (elsize != 0 && nelem > SIZE_MAX / elsize) {
        oc_record_failure(OC_FAIL_OS, ENOMEM, (oc_node *)ctx, NULL, INT64_MAX);
        return NULL;
    }
    /* Fresh mappings and files are already zero: only reused memory gets cleared. */
    return alloc_owned((oc_node *)ctx, nelem * elsize, 1, 1);
}

static void oc_free(void *ctx, void *ptr, size_t size)
{
    (void)ctx;
    (void)size; /* the header knows the counted size; NumPy's may differ after realloc */
    if (ptr != NULL) {
        block_free(oc_header_of(ptr));
    }
}

/* Resizes a block without moving it when it has room.  Returns 0, or OC_FAIL_BUDGET when a
 * budget refused the growth (nothing changed then). */
static int resize_in_place(oc_header *h, size_t new_size, int reserved)
{
    oc_node *owner = atomic_load(&h->owner);
    int64_t delta = (int64_t)new_size - (int64_t)h->size;
    unsigned flags = atomic_load(&h->flags);
    int on_disk = (flags & (OC_FLAG_ON_DISK | OC_FLAG_ZSPILLED)) != 0;
    if (!on_disk && delta > 0 && !reserved && oc_reserve(owner, delta) != NULL) {
        return OC_FAIL_BUDGET;
    }
    if (on_disk) {
        atomic_fetch_add((flags & (OC_FLAG_SPILLED | OC_FLAG_ZSPILLED)) ? &owner->spilled_bytes : &owner->mapped_bytes, delta);
        if (flags & OC_FLAG_ZSPILLED) {
            atomic_fetch_add(&owner->compressed_bytes, delta);
        }
    }
    else if (delta < 0) {
        oc_release(owner, -delta);
    }
    if (flags & OC_FLAG_REGION) {
        atomic_fetch_add_explicit(&owner->region_bytes, delta, memory_order_relaxed);
    }
    if (flags & OC_FLAG_KEPT) {
        atomic_fetch_add_explicit(&owner->kept_bytes, delta, memory_order_relaxed);
    }
    if (delta > 0) {
        oc_count_allocation(owner, delta, 0);
        oc_raise_peaks(owner);
    }
    h->size = new_size;
    return 0;
}

/* Moves a block to a new one of the right kind, made under the owner's budget and spill
 * policy; the owner stays the same even if it has closed. */
static void *realloc_by_moving(oc_header *h, size_t new_size)
{
    oc_node *owner = atomic_load(&h->owner);
    unsigned flags = atomic_load(&h->flags);
    size_t old_size = h->size;
    void *data = alloc_owned(owner, new_size, 0, 0);
    if (data == NULL) {
        return NULL;
    }
    memcpy(data, oc_block_data(h), old_size < new_size ? old_size : new_size);
    if (flags & OC_FLAG_KEPT) {
        oc_header *nh = oc_header_of(data);
        atomic_fetch_or(&nh->flags, OC_FLAG_KEPT);
        atomic_fetch_add_explicit(&owner->kept_count, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&owner->kept_bytes, (int64_t)new_size, memory_order_relaxed);
    }
    block_free(h);
    return data;
}

static void *oc_realloc(void *ctx, void *ptr, size_t new_size)
{
    if (ptr == NULL) {
        return oc_malloc(ctx, new_size);
    }
    oc_header *h = oc_header_of(ptr);
    unsigned flags = atomic_load(&h->flags);
    size_t old_size = h->size;
    size_t threshold = atomic_load_explicit(&oc_large_threshold, memory_order_relaxed);
    if (flags & OC_FLAG_ARENA) {
        /* Arena blocks cannot grow in place. */
    }
    else if (flags & OC_FLAG_REGION) {
        if (new_size <= oc_region_data_bytes(h) && new_size >= old_size / 2 && new_size >= threshold / 2) {
            oc_registry_lock();
            int refused = resize_in_place(h, new_size, 0);
            oc_registry_unlock();
            if (!refused) {
                return ptr;
            }
        }
    }
    else if (new_size < threshold) {
        if (new_size <= h->map_bytes) {
            if (!resize_in_place(h, new_size, 0)) {
                return ptr;
            }
        }
        else {
            /* Grow the malloc block: reserve first so that a refusal leaves it untouched. */
            oc_node *owner = atomic_load(&h->owner);
            int64_t delta = (int64_t)new_size - (int64_t)old_size;
            if (oc_reserve(owner, delta) == NULL) {
                oc_header *nh = realloc(h, OC_HEADER_BYTES + new_size);
                if (nh != NULL) {
                    nh->map_bytes = new_size;
                    resize_in_place(nh, new_size, 1);
                    return (char *)nh + OC_HEADER_BYTES;
                }
                oc_release(owner, delta);
            }
        }
    }
    /* Over budget in place, or a change of kind: move, following the spill policy. */
    void *data = realloc_by_moving(h, new_size);
    if (data == NULL) {
        /* NumPy reports a failed resize with a plain MemoryError of its own, which never
         * consults the record: drop it so that no later error is mistaken for this one. */
        oc_take_failure();
    }
    return data;
}

static void handler_init(PyDataMem_Handler *h, oc_node *ctx)
{
    memset(h, 0, sizeof(*h));
    strncpy(h->name, "oocarray", sizeof(h->name) - 1);
    h->version = 1;
    h->allocator.ctx = ctx;
    h->allocator.malloc = oc_malloc;
    h->allocator.calloc = oc_calloc;
    h->allocator.realloc = oc_realloc;
    h->allocator.free = oc_free;
}

/* A node with its handler: node.c, below this file, knows nothing of NumPy's allocator. */
oc_node *oc_handler_node_new(oc_node *parent, int64_t max_bytes)
{
    oc_node *n = oc_node_new(parent, max_bytes);
    if (n != NULL) {
        handler_init(&n->handler, n);
    }
    return n;
}

int oc_is_our_handler(PyObject *capsule)
{
    if (capsule == NULL || !PyCapsule_IsValid(capsule, "mem_handler")) {
        return 0;
    }
    PyDataMem_Handler *h = PyCapsule_GetPointer(capsule, "mem_handler");
    return h != NULL && h->allocator.malloc == oc_malloc;
}
