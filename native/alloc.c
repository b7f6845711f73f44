/*
 * The NEP 49 data-memory handler.  Every function here may run on any thread, with or without
 * the GIL: counting is atomic and the region registry has its own mutex.  Only tracing (off by
 * default) takes the GIL, to call back into Python.
 */
#include "oc_core.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Measured in BENCHMARKS.md: below this, malloc (plus a 64-byte header) is the faster home. */
atomic_size_t oc_large_threshold = 256 * 1024;
atomic_int oc_trace_enabled = 0;
PyObject *oc_trace_alloc_cb = NULL;
PyObject *oc_trace_free_cb = NULL;

#define HUGE_PAGE_BYTES ((size_t)2 << 20)
/* Regions at least this large are 2 MiB aligned and advised to use transparent huge pages,
 * as NumPy's own allocator does from 4 MiB. */
#define HUGE_REGION_MIN_BYTES ((size_t)4 << 20)

static atomic_uint_fast64_t next_alloc_id = 1;
static OC_TLS oc_failure last_failure;

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static oc_header registry = {.prev = &registry, .next = &registry};

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

static size_t page_bytes(void)
{
    static size_t cached;
    if (cached == 0) {
        cached = (size_t)sysconf(_SC_PAGESIZE);
    }
    return cached;
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

oc_header *oc_header_of(void *data) { return (oc_header *)((char *)data - OC_HEADER_BYTES); }

/* ---- regions: page-aligned anonymous mappings with the header in the page before the data ---- */

static void *region_map(size_t size, size_t *map_bytes, void **map_base)
{
    size_t page = page_bytes();
    size_t data_bytes = (size + page - 1) / page * page;
    if (data_bytes == 0) {
        data_bytes = page;
    }
    size_t align = data_bytes >= HUGE_REGION_MIN_BYTES ? HUGE_PAGE_BYTES : page;
    size_t slack = align > page ? align : 0;
    size_t want = page + data_bytes + slack;
    char *base = mmap(NULL, want, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) {
        return NULL;
    }
    char *data = base + page;
    if (slack) {
        /* Put the data on a huge-page boundary and give back the unused ends. */
        data = (char *)(((uintptr_t)base + page + align - 1) & ~(uintptr_t)(align - 1));
        char *start = data - page;
        char *end = data + data_bytes;
        if (start > base) {
            munmap(base, (size_t)(start - base));
        }
        if (base + want > end) {
            munmap(end, (size_t)(base + want - end));
        }
        base = start;
        madvise(data, data_bytes, MADV_HUGEPAGE);
    }
    *map_bytes = page + data_bytes;
    *map_base = base;
    return data;
}

static void registry_link(oc_header *h)
{
    pthread_mutex_lock(&registry_lock);
    h->prev = registry.prev;
    h->next = &registry;
    registry.prev->next = h;
    registry.prev = h;
    pthread_mutex_unlock(&registry_lock);
}

static void registry_unlink(oc_header *h)
{
    pthread_mutex_lock(&registry_lock);
    h->prev->next = h->next;
    h->next->prev = h->prev;
    pthread_mutex_unlock(&registry_lock);
}

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

/* ---- tracing (optional, takes the GIL) ---- */

static void trace_call(PyObject *cb, PyObject *args)
{
    if (args == NULL) {
        PyErr_Clear();
        return;
    }
    PyObject *r = PyObject_CallObject(cb, args);
    if (r == NULL) {
        PyErr_WriteUnraisable(cb);
    }
    Py_XDECREF(r);
    Py_DECREF(args);
}

static int trace_alloc(oc_header *h, oc_node *owner)
{
    if (!Py_IsInitialized()) {
        return 0;
    }
    PyGILState_STATE g = PyGILState_Ensure();
    int traced = 0;
    PyObject *cb = oc_trace_alloc_cb;
    if (cb != NULL && atomic_load(&oc_trace_enabled)) {
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        Py_INCREF(cb);
        trace_call(cb, Py_BuildValue("(KnK)", (unsigned long long)h->id, (Py_ssize_t)h->size,
                                     (unsigned long long)owner->id));
        Py_DECREF(cb);
        PyErr_Restore(et, ev, tb);
        traced = 1;
    }
    PyGILState_Release(g);
    return traced;
}

static void trace_free(oc_header *h)
{
    if (!Py_IsInitialized()) {
        return;
    }
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *cb = oc_trace_free_cb;
    if (cb != NULL) {
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        Py_INCREF(cb);
        trace_call(cb, Py_BuildValue("(K)", (unsigned long long)h->id));
        Py_DECREF(cb);
        PyErr_Restore(et, ev, tb);
    }
    PyGILState_Release(g);
}

/* ---- allocation ---- */

static void *block_new(oc_node *owner, size_t size, int zero)
{
    oc_header *h;
    void *data;
    unsigned flags = 0;
    if (size >= atomic_load_explicit(&oc_large_threshold, memory_order_relaxed)) {
        size_t map_bytes;
        void *base;
        data = region_map(size, &map_bytes, &base);
        if (data == NULL) {
            return NULL;
        }
        h = oc_header_of(data);
        h->map_bytes = map_bytes;
        flags = OC_FLAG_REGION;
    }
    else {
        h = small_get(size, zero);
        if (h == NULL) {
            return NULL;
        }
        data = (char *)h + OC_HEADER_BYTES;
    }
    h->size = size;
    h->id = oc_next_alloc_id();
    h->magic = OC_MAGIC;
    atomic_init(&h->flags, flags);
    atomic_init(&h->owner, owner);
    oc_node_incref(owner);
    oc_count_allocation(owner, (int64_t)size, 1);
    if (flags & OC_FLAG_REGION) {
        atomic_fetch_add_explicit(&owner->region_bytes, (int64_t)size, memory_order_relaxed);
        atomic_fetch_add_explicit(&owner->region_count, 1, memory_order_relaxed);
        registry_link(h);
    }
    if (atomic_load_explicit(&oc_trace_enabled, memory_order_relaxed) && trace_alloc(h, owner)) {
        atomic_fetch_or(&h->flags, OC_FLAG_TRACED);
    }
    return data;
}

/* Allocates `size` bytes owned by `owner`: reserve on the budget chain, then get the memory. */
static void *alloc_owned(oc_node *owner, size_t size, int zero, int refuse_closed)
{
    if (refuse_closed && atomic_load_explicit(&owner->closed, memory_order_relaxed)) {
        oc_record_failure(OC_FAIL_CLOSED, 0, owner, NULL, (int64_t)size);
        return NULL;
    }
    if (size > (size_t)PTRDIFF_MAX / 2) {
        oc_record_failure(OC_FAIL_OS, ENOMEM, owner, NULL, INT64_MAX);
        return NULL;
    }
    oc_node *refused = oc_reserve(owner, (int64_t)size);
    if (refused != NULL) {
        oc_record_failure(OC_FAIL_BUDGET, 0, owner, refused, (int64_t)size);
        return NULL;
    }
    void *data = block_new(owner, size, zero);
    if (data == NULL) {
        int err = errno ? errno : ENOMEM;
        oc_release(owner, (int64_t)size);
        oc_record_failure(OC_FAIL_OS, err, owner, NULL, (int64_t)size);
    }
    return data;
}

static void block_free(oc_header *h)
{
    oc_node *owner = atomic_load(&h->owner);
    unsigned flags = atomic_load(&h->flags);
    int64_t size = (int64_t)h->size;
    if (flags & OC_FLAG_TRACED) {
        trace_free(h);
    }
    oc_release(owner, size);
    if (flags & OC_FLAG_KEPT) {
        atomic_fetch_sub_explicit(&owner->kept_count, 1, memory_order_relaxed);
        atomic_fetch_sub_explicit(&owner->kept_bytes, size, memory_order_relaxed);
    }
    h->magic = 0;
    if (flags & OC_FLAG_REGION) {
        atomic_fetch_sub_explicit(&owner->region_bytes, size, memory_order_relaxed);
        atomic_fetch_sub_explicit(&owner->region_count, 1, memory_order_relaxed);
        registry_unlink(h);
        size_t page = page_bytes();
        munmap((char *)h + OC_HEADER_BYTES - page, h->map_bytes);
    }
    else {
        small_put(h);
    }
    oc_node_decref(owner);
}

static void *oc_malloc(void *ctx, size_t size) { return alloc_owned((oc_node *)ctx, size, 0, 1); }

static void *oc_calloc(void *ctx, size_t nelem, size_t elsize)
{
    if (elsize != 0 && nelem > SIZE_MAX / elsize) {
        oc_record_failure(OC_FAIL_OS, ENOMEM, (oc_node *)ctx, NULL, INT64_MAX);
        return NULL;
    }
    /* Fresh mappings are already zero: only malloc blocks get cleared. */
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

static void *oc_realloc(void *ctx, void *ptr, size_t new_size)
{
    if (ptr == NULL) {
        return oc_malloc(ctx, new_size);
    }
    oc_header *h = oc_header_of(ptr);
    oc_node *owner = atomic_load(&h->owner);
    unsigned flags = atomic_load(&h->flags);
    size_t old_size = h->size;
    int64_t delta = (int64_t)new_size - (int64_t)old_size;
    int fits_in_place;
    if (flags & OC_FLAG_REGION) {
        size_t page = page_bytes();
        fits_in_place = new_size <= h->map_bytes - page && new_size >= old_size / 2;
    }
    else {
        fits_in_place = new_size < atomic_load_explicit(&oc_large_threshold, memory_order_relaxed);
    }
    if (!(flags & OC_FLAG_REGION) && fits_in_place && new_size <= h->map_bytes) {
        fits_in_place = 2; /* within the block's capacity: nothing to move */
    }
    if (!fits_in_place) {
        /* Move to a block of the right kind; the owner stays the same even if it has closed. */
        void *data = alloc_owned(owner, new_size, 0, 0);
        if (data == NULL) {
            return NULL;
        }
        memcpy(data, ptr, old_size < new_size ? old_size : new_size);
        oc_header *nh = oc_header_of(data);
        if (flags & OC_FLAG_KEPT) {
            atomic_fetch_or(&nh->flags, OC_FLAG_KEPT);
            atomic_fetch_add_explicit(&owner->kept_count, 1, memory_order_relaxed);
            atomic_fetch_add_explicit(&owner->kept_bytes, (int64_t)new_size, memory_order_relaxed);
        }
        block_free(h);
        return data;
    }
    if (delta > 0) {
        oc_node *refused = oc_reserve(owner, delta);
        if (refused != NULL) {
            oc_record_failure(OC_FAIL_BUDGET, 0, owner, refused, delta);
            return NULL;
        }
    }
    if (!(flags & OC_FLAG_REGION) && fits_in_place != 2) {
        oc_header *nh = realloc(h, OC_HEADER_BYTES + new_size);
        if (nh == NULL) {
            if (delta > 0) {
                oc_release(owner, delta);
            }
            oc_record_failure(OC_FAIL_OS, ENOMEM, owner, NULL, delta);
            return NULL;
        }
        h = nh;
        h->map_bytes = new_size;
    }
    else {
        atomic_fetch_add_explicit(&owner->region_bytes, delta, memory_order_relaxed);
    }
    if (delta < 0) {
        oc_release(owner, -delta);
    }
    if (delta > 0) {
        oc_count_allocation(owner, delta, 0);
    }
    if (flags & OC_FLAG_KEPT) {
        atomic_fetch_add_explicit(&owner->kept_bytes, delta, memory_order_relaxed);
    }
    h->size = new_size;
    return (char *)h + OC_HEADER_BYTES;
}

void oc_handler_init(PyDataMem_Handler *h, oc_node *ctx)
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

int oc_is_our_handler(PyObject *capsule)
{
    if (capsule == NULL || !PyCapsule_IsValid(capsule, "mem_handler")) {
        return 0;
    }
    PyDataMem_Handler *h = PyCapsule_GetPointer(capsule, "mem_handler");
    return h != NULL && h->allocator.malloc == oc_malloc;
}
