/*
 * Compressed spill's arrays (zspill.c): a manager's region or a workspace arena whose range the
 * pager borrows.  Adopting and disowning one, filling it whole, encoding its dirty units again,
 * moving it to another manager; dropping its contents when they die (an arena with
 * location="zarr" between cycles, a spilled region being freed); and the encoding of one unit
 * into its spill file, for zspill.c's first spill and the pager's later write-backs.
 */
#include "pager_int.h"
#include "oc_files.h"
#include "oc_codecs.h"
#include "oc_spill.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

/* zstd's level for compressed spill's units (zspill.c). */
#define PG_SPILL_LEVEL 1

/* Encodes n bytes of src as one chunk appended to fd: entry = (0, offset, stored bytes).  The
 * bytes are counted against max_spill_bytes (the whole file, released when it is closed). */
int oc_zs_encode_append(int fd, atomic_llong *file_end, const char *src, size_t n, int64_t entry[3])
{
    char *packed;
    size_t m;
    int err = oc_zstd_pack_shuffled(src, n, PG_SPILL_LEVEL, &packed, &m);
    if (err) {
        return err;
    }
    if ((err = oc_disk_reserve(m)) != 0) {
        oc_zstd_pack_done();
        return err;
    }
    long long at = atomic_fetch_add(file_end, (long long)m);
    /* a write to a full disk fails here with ENOSPC (no file mapping: never SIGBUS) */
    err = oc_pwrite_all(fd, packed, m, (uint64_t)at);
    if (err == ENOSPC && oc_heap_drop_kept() > 0) { /* the heap's kept slots give their blocks */
        err = oc_pwrite_all(fd, packed, m, (uint64_t)at);
    }
    oc_zstd_pack_done();
    if (err != 0) {
        return err;
    }
    entry[0] = 0;
    entry[1] = at;
    entry[2] = (int64_t)m;
    return 0;
}

long long oc_pager_stored_bytes(pg_array *a) { return atomic_load(&a->stored_bytes); }

int oc_pager_is_own(pg_array *a) { return a->pid == getpid(); }

/* A spill array whose contents are dead: every unit is dropped without being encoded and reads
 * as zeros again, and the chunks written so far are forgotten, once write-backs in flight are
 * done.  With fresh_file, a fresh file takes the place of the old one if that holds anything
 * (so that it does not grow cycle after cycle) or is a parent's: a forked child reading the old
 * one holds its own descriptor, and from now on the array is this process's own.  The RAM
 * released.  Nothing is expected to touch the range meanwhile (its contents are dead); a touch
 * of a unit being dropped waits, and faults again once it is empty. */
size_t oc_pager_discard(pg_array *a, int fresh_file)
{
    pthread_mutex_lock(&pg_lock);
    a->pinned = 1; /* no eviction or write-back picks a unit meanwhile */
    while (a->inflight > 0) {
        pthread_cond_wait(&pg_idle_cond, &pg_lock);
    }
    a->inflight++; /* a disown waits for this */
    for (size_t u = 0; u < a->nunits; u++) {
        if (a->state[u] == U_FAILED) {
            mprotect(a->base + u * a->unit_bytes, unit_len(a, u), PROT_READ | PROT_WRITE);
        }
        a->state[u] = a->state[u] == U_EMPTY ? U_EMPTY : U_EVICTING; /* a touch waits */
    }
    pthread_mutex_unlock(&pg_lock);
    madvise(a->base, a->map_bytes, MADV_DONTNEED);
    atomic_store(&a->resident_bytes, 0);
    long long charged = atomic_exchange(&a->charged_bytes, 0);
    oc_release(a->node, (int64_t)charged);
    atomic_fetch_sub(&a->node->compressed_disk_bytes, atomic_exchange(&a->stored_bytes, 0));
    int fd = -1; /* if none can be opened, the old file goes on (appended to) */
    if (fresh_file && (atomic_load(&a->file_end) > 0 || a->pid != getpid())) {
        fd = oc_open_unnamed_file();
    }
    pthread_mutex_lock(&pg_lock);
    for (size_t u = 0; u < a->nunits; u++) {
        a->state[u] = U_EMPTY;
        a->flags[u] = 0;
        a->table[3 * u] = -1;
        a->table[3 * u + 1] = a->table[3 * u + 2] = 0;
    }
    a->ring_head = a->ring_len = 0;
    a->last_fault = -2 - a->readahead;
    if (fd >= 0) {
        close(a->fd);
        oc_disk_unreserve((size_t)atomic_exchange(&a->file_end, 0));
        a->fd = fd;
        a->pid = getpid();
    }
    a->pinned = 0;
    a->inflight--;
    pthread_cond_broadcast(&pg_idle_cond);
    pthread_mutex_unlock(&pg_lock);
    pg_uffd_wake(a->base, a->map_bytes); /* a touch meanwhile faults again, and is filled */
    return (size_t)charged;
}
/* ---- compressed spill (zspill.c): the range of a manager's region, borrowed ----
 *
 * The region's data was encoded to `fd` while writers waited (moves.c).  A fresh anonymous
 * range, registered for missing-page and write-protect faults, replaces the region's pages in
 * one mremap (UFFD_FEATURE_EVENT_REMAP keeps the registration; the reader drops the event), so
 * the old pages are released and the data pointer stays; a touch fills a unit from its chunk,
 * write-protected, and the first write to it marks it dirty.  Units are spill units (1 MiB),
 * one chunk each.  Clean units are dropped under budget pressure like any pager unit; dirty
 * ones stay until the next spill of the region encodes them again (oc_pager_spill_again). */

int oc_pager_adopt(pg_array **out, char *data, size_t bytes, int fd, int64_t *table, long long file_end,
                   long long stored, size_t unit_bytes, oc_node *node)
{
    pg_array *a = calloc(1, sizeof *a);
    if (a == NULL) {
        return ENOMEM;
    }
    a->fd = -1;
    a->spill = 1;
    a->writable = 1;
    a->codec = OC_CODEC_ZSTD_SHUFFLE8;
    a->fill_zero = 1;
    a->chunk_bytes = a->unit_bytes = unit_bytes;
    a->data_bytes = a->map_bytes = bytes;
    a->nunits = a->nchunks = (bytes + unit_bytes - 1) / unit_bytes;
    a->readahead = 2;
    a->last_fault = -2 - a->readahead;
    a->pid = getpid();
    a->state = calloc(a->nunits, 1);
    a->flags = calloc(a->nunits, 1);
    a->ring = calloc(a->nunits, sizeof(size_t));
    a->stamp = calloc(a->nunits, sizeof(uint64_t));
    oc_node_incref(node);
    a->node = node;
    if (a->state == NULL || a->flags == NULL || a->ring == NULL || a->stamp == NULL) {
        pg_array_free(a);
        return ENOMEM;
    }
    char *fresh = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (fresh == MAP_FAILED) {
        int err = errno;
        pg_array_free(a);
        return err;
    }
    madvise(fresh, bytes, MADV_NOHUGEPAGE); /* fills install small pages */
    /* set before the range is published: a fault from another thread may fill at once */
    a->fd = fd;
    a->table = table;
    atomic_store(&a->file_end, file_end);
    atomic_store(&a->stored_bytes, stored);
    pthread_mutex_lock(&pg_life_lock);
    int err = pg_start_threads();
    if (err == 0 && !(pg_features & UFFD_FEATURE_EVENT_REMAP)) {
        err = ENOTSUP;
    }
    if (err == 0) {
        a->base = fresh;
        err = pg_register_range(a);
    }
    if (err == 0) {
        /* listed first: a fault at `data` reaches the reader as soon as the range is there */
        pthread_mutex_lock(&pg_lock);
        a->base = data;
        a->next = pg_arrays;
        pg_arrays = a;
        pg_narrays++;
        pthread_mutex_unlock(&pg_lock);
        if (mremap(fresh, bytes, bytes, MREMAP_MAYMOVE | MREMAP_FIXED, data) == MAP_FAILED) {
            err = errno;
            pthread_mutex_lock(&pg_lock);
            for (pg_array **p = &pg_arrays; *p != NULL; p = &(*p)->next) {
                if (*p == a) {
                    *p = a->next;
                    break;
                }
            }
            pg_narrays--;
            pthread_mutex_unlock(&pg_lock);
            struct uffdio_range r = {.start = (uintptr_t)fresh, .len = bytes};
            ioctl(pg_uffd, UFFDIO_UNREGISTER, &r);
        }
    }
    if (err && pg_narrays == 0) {
        pg_stop_threads();
    }
    pthread_mutex_unlock(&pg_life_lock);
    if (err) {
        munmap(fresh, bytes);
        a->fd = -1; /* table and fd stay the caller's */
        a->table = NULL;
        pg_array_free(a);
        return err;
    }
    *out = a;
    return 0;
}

/* The region is brought back (keep_pages: every unit is resident; the range becomes ordinary
 * anonymous memory) or freed (its mapping goes with the region).  Closes the file. */
void oc_pager_disown(pg_array *a, int keep_pages)
{
    if (keep_pages && pg_uffd >= 0) {
        pg_uffd_protect(a->base, a->map_bytes, 0); /* no write-protect bit is left behind */
    }
    pthread_mutex_lock(&pg_life_lock);
    int last = pg_withdraw(a);
    oc_release(a->node, (int64_t)atomic_load(&a->charged_bytes));
    oc_disk_unreserve((size_t)atomic_load(&a->file_end));
    if (last) {
        pg_stop_threads();
    }
    pthread_mutex_unlock(&pg_life_lock);
    pg_array_free(a);
}

/* Fills every unit that is not resident, and keeps them (no eviction) until disowned.  0, or
 * EIO when a unit cannot be decoded (it stays poisoned; the region stays spilled). */
int oc_pager_fill_all(pg_array *a)
{
    int failed = 0, queued = 0;
    pthread_mutex_lock(&pg_lock);
    a->pinned = 1;
    for (;;) {
        int missing = 0;
        for (size_t u = 0; u < a->nunits; u++) {
            int st = a->state[u];
            if (st == U_EMPTY && pg_enqueue(a, u, 1) == 0) {
                a->state[u] = U_FILLING;
                queued = 1;
            }
            st = a->state[u];
            missing += st == U_EMPTY || st == U_FILLING || st == U_EVICTING;
            failed |= st == U_FAILED;
        }
        if (failed || !missing) {
            break;
        }
        if (queued) {
            pthread_cond_broadcast(&pg_work_cond);
            queued = 0;
        }
        pthread_cond_wait(&pg_idle_cond, &pg_lock);
    }
    if (failed) {
        a->pinned = 0;
    }
    pthread_mutex_unlock(&pg_lock);
    return failed ? EIO : 0;
}

/* Encodes the dirty units again (appended to the file; the table then points at the new
 * chunk) and drops every clean unit: the RAM released.  *err: the first failure (ENOSPC on a
 * full disk); units not written stay dirty and in RAM.  A forked child never writes into the
 * parent's file: there, nothing is dropped. */
long long oc_pager_spill_again(pg_array *a, int *err)
{
    *err = 0;
    if (a->pid != getpid()) {
        return 0;
    }
    pthread_mutex_lock(&pg_lock);
    a->pinned = 1; /* a unit made clean here is not dropped before its chunk is in the table */
    pthread_mutex_unlock(&pg_lock);
    for (size_t u = 0; u < a->nunits && *err == 0; u++) {
        pthread_mutex_lock(&pg_lock);
        int dirty = a->state[u] == U_DIRTY && !(a->flags[u] & F_WB);
        if (dirty) {
            a->flags[u] |= F_WB;
        }
        pthread_mutex_unlock(&pg_lock);
        if (dirty) {
            int chunks;
            char msg[320];
            *err = pg_write_back_unit(a, u, &chunks, msg, sizeof msg);
        }
    }
    pthread_mutex_lock(&pg_lock);
    a->pinned = 0;
    pthread_mutex_unlock(&pg_lock);
    return (long long)pg_evict_lru(a->node, (size_t)-1, a);
}

/* The region changed owner: resident units are counted on the new one. */
void oc_pager_set_node(pg_array *a, oc_node *node)
{
    pthread_mutex_lock(&pg_lock);
    oc_node *old = a->node;
    long long charged = atomic_load(&a->charged_bytes);
    oc_node_incref(node);
    a->node = node;
    pthread_mutex_unlock(&pg_lock);
    oc_release(old, (int64_t)charged);
    pg_force_count(node, (int64_t)charged);
    oc_node_decref(old);
}
