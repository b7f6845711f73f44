/*
 * Workspaces: arena memory reused by every cycle of a loop.
 *
 * During a cycle, allocations routed to a workspace node are bump-allocated from its arena
 * chunk (64-byte aligned, header first).  When the cycle ends the chunk is reset for the next
 * one, unless an arena block is still alive: then the chunk is *retired* instead — it is never
 * reused, and it is unmapped when its last block is freed, from whichever thread frees it.  So
 * memory under a live array is never handed out twice.  Sizing (learning, over-allocation,
 * growth) is decided in Python between cycles; this file only does the memory.
 *
 * location="mmap" backs each arena by a temporary file; location="zarr" hands its range to the
 * pager as compressed-spill memory (zspill.c): only the units a cycle touches come into RAM,
 * charged on the budget by the pager (the arena's capacity is not reserved), and at the end of
 * a cycle they are dropped without being encoded, so the next cycle starts from zeros.
 *
 * A workspace is entered by one thread at a time (enforced in Python), so the bump pointer
 * and the per-cycle fields need no atomics; frees may come from any thread and only touch the
 * atomic counters.
 */
#include "oc_core.h"
#include "oc_regions.h"
#include "oc_files.h"
#include "oc_spill.h"
#include "oc_workspace.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define ARENA_ALIGN 64

static size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

/* Arenas on disk, for fork to find (see oc_workspace_atfork). */
static pthread_mutex_t on_disk_mutex = PTHREAD_MUTEX_INITIALIZER;
static oc_chunk on_disk = {.prev_on_disk = &on_disk, .next_on_disk = &on_disk};

static void on_disk_link(oc_chunk *c)
{
    pthread_mutex_lock(&on_disk_mutex);
    c->next_on_disk = on_disk.next_on_disk;
    c->prev_on_disk = &on_disk;
    on_disk.next_on_disk->prev_on_disk = c;
    on_disk.next_on_disk = c;
    pthread_mutex_unlock(&on_disk_mutex);
}

static void on_disk_unlink(oc_chunk *c)
{
    pthread_mutex_lock(&on_disk_mutex);
    c->prev_on_disk->next_on_disk = c->next_on_disk;
    c->next_on_disk->prev_on_disk = c->prev_on_disk;
    pthread_mutex_unlock(&on_disk_mutex);
}

/* Maps a fresh temporary file over the arena's pages; 0 or an errno value. */
static int chunk_map_file(oc_chunk *c)
{
    int fd = oc_open_reserved_file(c->capacity);
    if (fd < 0) {
        return -fd;
    }
    if (mmap(c->base, c->capacity, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
        int err = errno;
        close(fd);
        oc_disk_unreserve(c->capacity);
        return err;
    }
    c->fd = fd;
    c->cow = 0;
    return 0;
}

static void chunk_unmap(oc_chunk *c)
{
    size_t page = oc_page_bytes();
    if (c->on_disk) {
        on_disk_unlink(c);
    }
    if (c->pager != NULL) {
        oc_zspill_arena_free(c->pager, c->capacity, c->node); /* unregistered before the unmap */
    }
    munmap(c->base - page, c->capacity + page);
    if (c->on_disk) {
        close(c->fd);
        oc_disk_unreserve(c->capacity);
    }
    if (c->pager == NULL) {
        oc_release(c->node, (int64_t)c->capacity);
    }
    oc_node_decref(c->node);
    free(c);
}

/* A new arena chunk of `capacity` bytes reserved on `node`'s budget (compressed: nothing
 * reserved, the pager charges what is touched); NULL with errno set, or with *refused set when
 * a budget said no. */
static oc_chunk *chunk_new(oc_node *node, size_t capacity, int location, oc_node **refused)
{
    capacity = align_up(capacity, oc_page_bytes());
    int compressed = location == OC_LOCATION_ZARR && atomic_load(&oc_zspill_enabled);
    int to_disk = location == OC_LOCATION_MMAP || (location == OC_LOCATION_ZARR && !compressed);
    int64_t reserved = compressed ? 0 : (int64_t)capacity;
    *refused = oc_reserve(node, reserved);
    if (*refused != NULL) {
        return NULL;
    }
    oc_chunk *c = calloc(1, sizeof(oc_chunk));
    size_t map_bytes;
    /* On disk, only address space is reserved first: an arena larger than RAM is allowed. */
    char *base = c == NULL ? NULL : to_disk ? oc_map_reserved(capacity, &map_bytes) : oc_map_fresh(capacity, &map_bytes);
    if (base == NULL) {
        free(c);
        oc_release(node, reserved);
        errno = ENOMEM;
        return NULL;
    }
    c->base = base;
    c->capacity = capacity;
    c->fd = -1;
    if (compressed) {
        int err;
        c->pager = oc_zspill_arena_new(base, capacity, node, &err);
        if (c->pager == NULL) {
            munmap(base - oc_page_bytes(), map_bytes);
            free(c);
            errno = err;
            return NULL;
        }
    }
    if (to_disk) {
        int err = chunk_map_file(c);
        if (err) {
            munmap(base - oc_page_bytes(), map_bytes);
            free(c);
            oc_release(node, (int64_t)capacity);
            errno = err;
            return NULL;
        }
        c->on_disk = 1;
        on_disk_link(c);
    }
    c->node = node;
    oc_node_incref(node);
    oc_raise_peaks(node);
    return c;
}

/* Drops the workspace's hold on its chunk: unmapped now if nothing lives in it, else pinned
 * until its last block is freed. */
static void chunk_retire(oc_workspace *w, oc_chunk *c)
{
    int64_t live = atomic_load(&c->live);
    if (live == 0) {
        chunk_unmap(c);
        return;
    }
    atomic_fetch_add(&w->pinned_bytes, (int64_t)c->capacity);
    atomic_fetch_add(&w->pinned_chunks, 1);
    atomic_store(&c->retired, 1);
    /* A free may have dropped live to 0 between the load and the store: settle it here. */
    if (atomic_load(&c->live) == 0) {
        int expected = 1;
        if (atomic_compare_exchange_strong(&c->retired, &expected, 2)) {
            atomic_fetch_sub(&w->pinned_bytes, (int64_t)c->capacity);
            atomic_fetch_sub(&w->pinned_chunks, 1);
            chunk_unmap(c);
        }
    }
}

void oc_arena_block_free(oc_header *h)
{
    oc_chunk *c = (oc_chunk *)h->prev;
    oc_node *owner = atomic_load(&h->owner);
    oc_workspace *w = owner->workspace;
    h->magic = 0;
    if (atomic_fetch_sub(&c->live, 1) == 1) {
        int expected = 1;
        /* Last block of a retired chunk: whoever flips retired 1 -> 2 unmaps it. */
        if (atomic_load(&c->retired) == 1 && atomic_compare_exchange_strong(&c->retired, &expected, 2)) {
            if (w != NULL) {
                atomic_fetch_sub(&w->pinned_bytes, (int64_t)c->capacity);
                atomic_fetch_sub(&w->pinned_chunks, 1);
            }
            chunk_unmap(c);
        }
    }
}

void oc_workspace_block_freed(oc_header *h, oc_node *owner)
{
    oc_workspace *w = owner->workspace;
    if (w != NULL && h->cycle == atomic_load(&w->cycle)) {
        atomic_fetch_sub(&w->external_live, 1);
    }
}

/* The handler's entry for workspace nodes.  Sets *handled to OC_WS_ORDINARY when the
 * allocation should take the ordinary path (no cycle running, or bypass mode), to OC_WS_OUTSIDE
 * when it is the cycle's but does not go in the arena: the handler makes it the ordinary way
 * and hands it to oc_workspace_outside. */
void *oc_workspace_alloc(oc_node *node, size_t size, int zero, int *handled)
{
    oc_workspace *w = node->workspace;
    if (!atomic_load_explicit(&w->in_cycle, memory_order_relaxed) || w->mode == OC_WS_MODE_BYPASS) {
        *handled = OC_WS_ORDINARY;
        return NULL;
    }
    *handled = OC_WS_DONE;
    size_t need = align_up(OC_HEADER_BYTES + size, ARENA_ALIGN);
    w->cycle_requested += need;
    oc_chunk *c = w->chunk;
    if (w->mode != OC_WS_MODE_SPILL_EVERYTHING && c != NULL && c->offset + need <= c->capacity) {
        oc_header *h = (oc_header *)(c->base + c->offset);
        c->offset += need;
        char *data = (char *)h + OC_HEADER_BYTES;
        /* A compressed arena reads as zeros past the bump pointer (reset drops every unit) */
        if (zero && c->pager == NULL) {
            memset(data, 0, size);
        }
        h->size = size;
        h->map_bytes = 0;
        h->id = oc_next_alloc_id();
        h->magic = OC_MAGIC;
        h->prev = (oc_header *)c;
        h->next = NULL;
        h->cycle = atomic_load(&w->cycle);
        atomic_init(&h->flags, OC_FLAG_ARENA);
        atomic_init(&h->owner, node);
        atomic_fetch_add(&c->live, 1);
        oc_count_allocation(node, (int64_t)size, 1);
        w->arena_allocations++;
        return data;
    }
    /* Outside the arena: the whole cycle's request is remembered so the next arena can fit. */
    if (w->mode != OC_WS_MODE_SPILL_EVERYTHING) {
        if (w->full_policy == OC_WS_FAIL) {
            oc_record_failure(OC_FAIL_WORKSPACE_FULL, 0, node, NULL, (int64_t)size);
            return NULL;
        }
        w->cycle_overflowed = 1;
        if (c != NULL) {
            w->spilled_allocations++; /* an arena exists but is full */
        }
    }
    *handled = OC_WS_OUTSIDE;
    return NULL;
}

/* A block of the cycle made outside the arena (OC_WS_OUTSIDE). */
void oc_workspace_outside(oc_node *node, oc_header *h)
{
    oc_workspace *w = node->workspace;
    h->cycle = atomic_load(&w->cycle);
    atomic_fetch_or(&h->flags, OC_FLAG_CYCLE_EXTERNAL);
    atomic_fetch_add(&w->external_live, 1);
    w->external_allocations++;
}

/* ---- cycles, driven from Python ---- */

/* Starts a cycle with an arena of at least `arena_bytes` (0: none).  Returns 0, an errno
 * value, or -1 when the budget refused the arena (the cycle then runs outside it). */
int oc_workspace_begin(oc_node *node, size_t arena_bytes)
{
    oc_workspace *w = node->workspace;
    int result = 0;
    if (arena_bytes > 0 && (w->chunk == NULL || w->chunk->capacity < arena_bytes)) {
        if (w->chunk != NULL) {
            chunk_retire(w, w->chunk);
            w->chunk = NULL;
        }
        oc_node *refused;
        w->chunk = chunk_new(node, arena_bytes, w->location, &refused);
        if (w->chunk == NULL) {
            result = refused != NULL ? -1 : errno;
        }
        else {
            w->reallocations++;
        }
    }
    else if (w->chunk != NULL && w->chunk->cow) {
        /* fork left the arena a copy-on-write mapping, so this cycle's writes would stay in
         * RAM: it holds nothing alive, so a fresh file replaces it without a copy. */
        pthread_mutex_lock(&on_disk_mutex);
        int fd = w->chunk->fd;
        int err = chunk_map_file(w->chunk);
        pthread_mutex_unlock(&on_disk_mutex);
        if (err) {
            result = err;
        }
        else {
            close(fd);
            oc_disk_unreserve(w->chunk->capacity);
        }
    }
    w->arena_error = result > 0 ? result : 0;
    w->cycle_requested = 0;
    w->cycle_overflowed = 0;
    atomic_store(&w->external_live, 0);
    atomic_fetch_add(&w->cycle, 1);
    atomic_store(&w->in_cycle, 1);
    return result;
}

/* Ends the cycle.  Blocks still alive are escapes: their chunk is retired (pinned) rather than
 * reset.  Fills the escaped arena and external counts and the bytes the cycle asked for. */
void oc_workspace_end(oc_node *node, int64_t *arena_escapes, int64_t *external_escapes,
                      int64_t *requested, int *overflowed)
{
    oc_workspace *w = node->workspace;
    atomic_store(&w->in_cycle, 0);
    *requested = (int64_t)w->cycle_requested;
    *overflowed = w->cycle_overflowed;
    *external_escapes = atomic_load(&w->external_live);
    *arena_escapes = 0;
    oc_chunk *c = w->chunk;
    if (c != NULL) {
        *arena_escapes = atomic_load(&c->live);
        if (*arena_escapes > 0) {
            chunk_retire(w, c);
            w->chunk = NULL;
        }
        else {
            c->offset = 0;
            if (c->pager != NULL) {
                oc_zspill_arena_reset(c->pager); /* dead contents: dropped, never encoded */
            }
        }
    }
    /* Blocks of this cycle that are freed from now on no longer count as its escapes. */
    atomic_fetch_add(&w->cycle, 1);
}

size_t oc_workspace_arena_bytes(oc_node *node)
{
    oc_chunk *c = node->workspace->chunk;
    return c ? c->capacity : 0;
}

void oc_workspace_destroy(oc_node *node)
{
    oc_workspace *w = node->workspace;
    if (w == NULL) {
        return;
    }
    atomic_store(&w->in_cycle, 0);
    if (w->chunk != NULL) {
        chunk_retire(w, w->chunk);
        w->chunk = NULL;
    }
}

/* Before fork: on-disk arenas become copy-on-write mappings of their files, as regions do
 * (spill.c), so neither process sees the other's later writes. */
void oc_workspace_atfork(int phase)
{
    if (phase != OC_FORK_PREPARE) {
        pthread_mutex_unlock(&on_disk_mutex);
        return;
    }
    pthread_mutex_lock(&on_disk_mutex);
    for (oc_chunk *c = on_disk.next_on_disk; c != &on_disk; c = c->next_on_disk) {
        if (!c->cow && oc_make_private(c->base, c->capacity, c->fd, 0) == 0) {
            c->cow = 1;
        }
    }
}
