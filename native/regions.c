/*
 * Regions: page-aligned anonymous mappings that hold large blocks.  The first page holds the
 * 64-byte header right before the data, so the data pages alone can be remapped to a file.
 *
 * Freed regions are kept in a small LRU cache (64 MiB by default) and handed out again for
 * requests of about the same size: a fresh mapping costs one page fault per 4 KiB touched,
 * which made regions 15-20x slower than malloc for repeated mid-size arrays (BENCHMARKS.md).
 * A request the cache cannot serve first gives back as many bytes of the least recently freed
 * regions, so sizes that vary do not pile up unused regions (the cache added up to 52 MiB of
 * resident memory over plain NumPy before; about nothing since).
 * A cached region is never under a live array: it went through free().  No budget counts the
 * cache, so a region freed under one is kept only while the cache stays within a sixteenth of
 * the tightest budget above its owner (at most 16 MiB), and the end of each step of the chunk
 * loop, the feed and ingestion empties it (oc_scratch_release).
 */
#include "oc_core.h"
#include "oc_regions.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define HUGE_PAGE_BYTES ((size_t)2 << 20)
/* Regions at least this large are 2 MiB aligned and advised to use transparent huge pages,
 * as NumPy's own allocator does from 4 MiB. */
#define HUGE_REGION_MIN_BYTES ((size_t)4 << 20)

atomic_size_t oc_region_cache_limit = (size_t)64 << 20;
atomic_int oc_huge_pages = 1;

static pthread_mutex_t registry_mutex = PTHREAD_MUTEX_INITIALIZER;
static oc_header registry = {.prev = &registry, .next = &registry};

static pthread_mutex_t cache_mutex = PTHREAD_MUTEX_INITIALIZER;
static oc_header cache = {.prev = &cache, .next = &cache}; /* most recently freed first */
static size_t cache_bytes;

size_t oc_page_bytes(void)
{
    static size_t cached;
    if (cached == 0) {
        cached = (size_t)sysconf(_SC_PAGESIZE);
    }
    return cached;
}

static void list_remove(oc_header *h)
{
    h->prev->next = h->next;
    h->next->prev = h->prev;
}

static void list_push_front(oc_header *list, oc_header *h)
{
    h->next = list->next;
    h->prev = list;
    list->next->prev = h;
    list->next = h;
}

static void list_push_back(oc_header *list, oc_header *h)
{
    h->prev = list->prev;
    h->next = list;
    list->prev->next = h;
    list->prev = h;
}

void *oc_map_fresh(size_t data_bytes, size_t *map_bytes)
{
    size_t page = oc_page_bytes();
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
        if (atomic_load_explicit(&oc_huge_pages, memory_order_relaxed)) {
            madvise(data, data_bytes, MADV_HUGEPAGE);
        }
    }
    *map_bytes = page + data_bytes;
    return data;
}

/* Address space for data that will live in a file: the pages are inaccessible and charge no
 * memory commitment, so an array larger than RAM fits (the kernel's overcommit rule refuses a
 * read-write anonymous mapping that size).  Only the header page is usable. */
void *oc_map_reserved(size_t data_bytes, size_t *map_bytes)
{
    size_t page = oc_page_bytes();
    char *base = mmap(NULL, page + data_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) {
        return NULL;
    }
    if (mprotect(base, page, PROT_READ | PROT_WRITE) != 0) {
        int err = errno;
        munmap(base, page + data_bytes);
        errno = err;
        return NULL;
    }
    *map_bytes = page + data_bytes;
    return base + page;
}

/* A cached region whose data is at least data_bytes and at most 1/8 larger. */
static void *take_cached(size_t data_bytes, size_t *map_bytes)
{
    size_t page = oc_page_bytes();
    void *data = NULL;
    pthread_mutex_lock(&cache_mutex);
    for (oc_header *h = cache.next; h != &cache; h = h->next) {
        size_t have = h->map_bytes - page;
        if (have >= data_bytes && have <= data_bytes + data_bytes / 8) {
            list_remove(h);
            cache_bytes -= h->map_bytes;
            *map_bytes = h->map_bytes;
            data = oc_block_data(h);
            break;
        }
    }
    pthread_mutex_unlock(&cache_mutex);
    return data;
}

/* Unmaps the least recently freed cached regions until `bytes` are given back (or none is
 * left): a request the cache cannot serve must not add to what it keeps, so the process's
 * footprint stays that of the live arrays plus what loops really reuse. */
static void give_back_cached(size_t bytes)
{
    size_t page = oc_page_bytes();
    size_t given = 0;
    while (given < bytes) {
        pthread_mutex_lock(&cache_mutex);
        if (cache.prev == &cache) {
            pthread_mutex_unlock(&cache_mutex);
            return;
        }
        oc_header *oldest = cache.prev;
        list_remove(oldest);
        cache_bytes -= oldest->map_bytes;
        pthread_mutex_unlock(&cache_mutex);
        given += oldest->map_bytes;
        munmap(oc_block_data(oldest) - page, oldest->map_bytes);
    }
}

void *oc_region_map(size_t size, int zero, size_t *map_bytes)
{
    size_t page = oc_page_bytes();
    size_t data_bytes = size == 0 ? page : (size + page - 1) / page * page;
    if (atomic_load_explicit(&oc_region_cache_limit, memory_order_relaxed) >= data_bytes) {
        void *data = take_cached(data_bytes, map_bytes);
        if (data != NULL) {
            if (zero) {
                memset(data, 0, size);
            }
            return data;
        }
    }
    give_back_cached(data_bytes);
    return oc_map_fresh(data_bytes, map_bytes);
}

void oc_region_unmap(oc_header *h, size_t cache_cap)
{
    size_t page = oc_page_bytes();
    size_t limit = atomic_load_explicit(&oc_region_cache_limit, memory_order_relaxed);
    limit = cache_cap < limit ? cache_cap : limit;
    char *base = oc_block_data(h) - page;
    /* Only anonymous memory is cached: a file or copy-on-write mapping goes back whole. */
    if (!(atomic_load(&h->flags) & (OC_FLAG_ON_DISK | OC_FLAG_COW | OC_FLAG_ZSPILLED)) &&
        h->map_bytes - page <= limit / 4) {
        oc_header *evicted = NULL;
        pthread_mutex_lock(&cache_mutex);
        list_push_front(&cache, h);
        cache_bytes += h->map_bytes;
        pthread_mutex_unlock(&cache_mutex);
        /* the least recently freed go until the cache is within this free's limit */
        for (;;) {
            pthread_mutex_lock(&cache_mutex);
            if (cache_bytes <= limit || cache.prev == &cache) {
                pthread_mutex_unlock(&cache_mutex);
                break;
            }
            evicted = cache.prev;
            list_remove(evicted);
            cache_bytes -= evicted->map_bytes;
            pthread_mutex_unlock(&cache_mutex);
            munmap(oc_block_data(evicted) - page, evicted->map_bytes);
        }
        return;
    }
    munmap(base, h->map_bytes);
}

size_t oc_region_cache_bytes(void)
{
    pthread_mutex_lock(&cache_mutex);
    size_t n = cache_bytes;
    pthread_mutex_unlock(&cache_mutex);
    return n;
}

void oc_region_cache_trim(size_t keep_bytes)
{
    size_t page = oc_page_bytes();
    for (;;) {
        oc_header *evicted = NULL;
        pthread_mutex_lock(&cache_mutex);
        if (cache_bytes > keep_bytes && cache.prev != &cache) {
            evicted = cache.prev;
            list_remove(evicted);
            cache_bytes -= evicted->map_bytes;
        }
        pthread_mutex_unlock(&cache_mutex);
        if (evicted == NULL) {
            return;
        }
        munmap(oc_block_data(evicted) - page, evicted->map_bytes);
    }
}

/* ---- the registry of live regions, oldest first (the eviction order) ---- */

void oc_registry_lock(void) { pthread_mutex_lock(&registry_mutex); }

void oc_registry_unlock(void) { pthread_mutex_unlock(&registry_mutex); }

void oc_registry_link(oc_header *h) { list_push_back(&registry, h); }

void oc_registry_unlink(oc_header *h) { list_remove(h); }

oc_header *oc_registry_first(void) { return registry.next == &registry ? NULL : registry.next; }

oc_header *oc_registry_next(oc_header *h) { return h->next == &registry ? NULL : h->next; }

void oc_regions_atfork(int phase)
{
    if (phase == OC_FORK_PREPARE) {
        pthread_mutex_lock(&registry_mutex);
        pthread_mutex_lock(&cache_mutex);
        return;
    }
    pthread_mutex_unlock(&cache_mutex);
    pthread_mutex_unlock(&registry_mutex);
}
