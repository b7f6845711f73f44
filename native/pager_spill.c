/*
 * Compressed spill's arrays (zspill.c) whose contents die: a workspace arena with
 * location="zarr" between cycles, a spilled region being freed; and the encoding of one unit
 * into its spill file, for zspill.c's first spill and the pager's later write-backs.  Adopting,
 * disowning, filling and encoding such an array again stay in pager.c, next to the reader and
 * eviction they use.
 */
#include "pager_int.h"

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
