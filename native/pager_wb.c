/*
 * How a chunk-backed array's written units get back to their store (the pager's write-back):
 *
 *  - r+ arrays over zarr chunk files, and compressed spill, are written back natively, with no
 *    Python: pg_write_back_unit encodes the unit's chunks (writeback.c: each chunk whole, a new
 *    file renamed over the old; zspill.c's file for spill).  The pager's workers call it under
 *    budget pressure (pager_evict.c: pg_evict_lru, pg_write_back_lru), and
 *    oc_pager_spill_again (pager_spill.c) calls it too; flush()
 *    calls oc_pager_write_back on Python's threads without the GIL.
 *  - r+ arrays over HDF5 have no native writer: HDF5 decides where a rewritten chunk goes, so
 *    h5py must write it, from Python (oc_pager_begin_writeback, the store's write, then
 *    oc_pager_end_writeback or oc_pager_abort_writeback).  Under budget pressure their dirty
 *    units stay resident (pager_evict.c never picks them), over the budget until flush().
 *    While the store rewrites a chunk, fills of it copy the new bytes (oc_pager_move_begin)
 *    until the chunk's new place is known (oc_pager_move_end).
 *
 * Either way the writer holds the unit's F_WB flag, one writer at a time: the unit is made
 * clean and write-protected before it is copied out (a write meanwhile makes it dirty again),
 * it is never dropped while F_WB is set (refilled before its chunks are stored, it would show
 * the old ones), and the flag is cleared, with a broadcast on pg_idle_cond, only by its holder.
 */
#include "pager_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- F_WB held: clean, dirty again, released ---- */

/* Unit u (F_WB held by the caller) becomes clean and write-protected, so a write from now on
 * makes it dirty again.  1 when it was dirty, 0 if not; -errno (it stays dirty). */
static int make_clean(pg_array *a, size_t u)
{
    pthread_mutex_lock(&pg_lock);
    int was = a->state[u] == U_DIRTY;
    if (was) {
        a->state[u] = U_CLEAN;
    }
    pthread_mutex_unlock(&pg_lock);
    if (!was) {
        return 0;
    }
    int err = pg_uffd_protect(a->base + u * a->unit_bytes, unit_len(a, u), 1);
    if (err) {
        pthread_mutex_lock(&pg_lock);
        a->state[u] = U_DIRTY;
        pthread_mutex_unlock(&pg_lock);
        return -err;
    }
    return 1;
}

/* The write-back of unit u (F_WB held) failed: it is dirty again, and writable. */
static void make_dirty_again(pg_array *a, size_t u)
{
    pthread_mutex_lock(&pg_lock);
    int clean = a->state[u] == U_CLEAN;
    if (clean) {
        a->state[u] = U_DIRTY;
    }
    pthread_mutex_unlock(&pg_lock);
    if (clean) {
        pg_uffd_protect(a->base + u * a->unit_bytes, unit_len(a, u), 0);
    }
}

/* The holder lets go of F_WB: the unit may be dropped again, and a flush() waiting for it
 * goes on. */
static void release_wb(pg_array *a, size_t u)
{
    pthread_mutex_lock(&pg_lock);
    a->flags[u] &= (uint8_t)~F_WB;
    pthread_cond_broadcast(&pg_idle_cond);
    pthread_mutex_unlock(&pg_lock);
}

/* ---- the store writes (HDF5): Python's protocol ---- */

/* Before the store writes unit u: it takes F_WB, becomes clean and write-protected, and is held
 * in memory until oc_pager_end_writeback (dropped and refilled before its chunks are stored,
 * it would show the old ones).  1 when it was dirty, 0 if not (nothing held); -EBUSY when it
 * is being written back already (the caller writes one unit at a time per array), -errno on
 * failure (it stays dirty). */
int oc_pager_begin_writeback(pg_array *a, size_t u)
{
    if (u >= a->nunits) {
        return -EINVAL;
    }
    pthread_mutex_lock(&pg_lock);
    if (a->flags[u] & F_WB) {
        pthread_mutex_unlock(&pg_lock);
        return -EBUSY;
    }
    int dirty = a->state[u] == U_DIRTY;
    if (dirty) {
        a->flags[u] |= F_WB;
    }
    pthread_mutex_unlock(&pg_lock);
    if (!dirty) {
        return 0;
    }
    int r = make_clean(a, u);
    if (r <= 0) {
        release_wb(a, u);
    }
    return r;
}

/* Whether unit u's F_WB is set (only its holder clears it). */
static int held(pg_array *a, size_t u)
{
    pthread_mutex_lock(&pg_lock);
    int h = (a->flags[u] & F_WB) != 0;
    pthread_mutex_unlock(&pg_lock);
    return h;
}

/* Unit u's chunks are stored: F_WB is released (nothing when it was not held). */
void oc_pager_end_writeback(pg_array *a, size_t u)
{
    if (u < a->nunits && held(a, u)) {
        release_wb(a, u);
    }
}

/* The store's write of unit u failed: it is dirty again (and writable), F_WB released. */
void oc_pager_abort_writeback(pg_array *a, size_t u)
{
    if (u < a->nunits && held(a, u)) {
        make_dirty_again(a, u);
        release_wb(a, u);
    }
}

/* ---- chunk moves (HDF5): fills of a chunk being rewritten copy its new bytes ---- */

void pg_move_release(pg_move *m)
{
    pthread_mutex_lock(&pg_lock);
    int last = --m->refs == 0;
    pthread_mutex_unlock(&pg_lock);
    if (last) {
        free(m);
    }
}

/* Chunk `chunk` is about to be rewritten by its store with `data` (its n bytes in the array):
 * until oc_pager_move_end, fills of it copy these bytes, and fills that read it from the file
 * meanwhile read it again.  The move's id, or 0 when out of memory. */
uint64_t oc_pager_move_begin(pg_array *a, size_t chunk, const char *data, size_t n)
{
    pg_move *m = malloc(sizeof *m + (n ? n : 1));
    if (m == NULL) {
        return 0;
    }
    memcpy(m->data, data, n);
    m->chunk = chunk;
    m->n = n;
    m->refs = 1;
    pthread_mutex_lock(&pg_lock);
    m->id = ++a->move_gen; /* the generation only grows: ids are unique */
    m->next = a->moves;
    a->moves = m;
    pthread_mutex_unlock(&pg_lock);
    return m->id;
}

/* Move `id` is over: its chunk is stored at `entry` (path | mask << 32, offset, stored bytes;
 * NULL: where it was).  0, or ENOENT for an id that is not a move of this array. */
int oc_pager_move_end(pg_array *a, uint64_t id, const int64_t entry[3])
{
    pg_move *m = NULL;
    pthread_mutex_lock(&pg_lock);
    for (pg_move **p = &a->moves; *p != NULL; p = &(*p)->next) {
        if ((*p)->id == id) {
            m = *p;
            *p = m->next;
            break;
        }
    }
    if (m == NULL) {
        pthread_mutex_unlock(&pg_lock);
        return ENOENT;
    }
    if (entry != NULL && m->chunk < a->nchunks) {
        memcpy(&a->table[3 * m->chunk], entry, 3 * sizeof(int64_t));
    }
    a->move_gen++;
    int last = --m->refs == 0;
    pthread_mutex_unlock(&pg_lock);
    if (last) {
        free(m);
    }
    return 0;
}

/* ---- native write-back (zarr chunk files, compressed spill) ---- */

/* Writes dirty unit u back (its F_WB flag set by the caller, who holds it from eviction) and
 * releases F_WB: a spill array's unit is encoded to its file and the table points at the new
 * chunk; a zarr array's chunks are written to their files (writeback.c), each whole.  0 with
 * *chunks written, or errno with what failed in msg: the unit is dirty again then. */
int pg_write_back_unit(pg_array *a, size_t u, int *chunks, char *msg, size_t msg_n)
{
    int err = 0;
    *chunks = 0;
    int r = !a->spill && !a->wb_native ? -EINVAL : make_clean(a, u);
    if (r == -EINVAL) {
        snprintf(msg, msg_n, "bytes %zu-%zu: this array has no native writer", u * a->unit_bytes,
                 u * a->unit_bytes + unit_len(a, u));
        err = EINVAL;
    }
    else if (r < 0) {
        err = -r;
        snprintf(msg, msg_n, "write-protecting bytes %zu-%zu", u * a->unit_bytes,
                 u * a->unit_bytes + unit_len(a, u));
    }
    else if (r > 0 && !a->spill) {
        err = oc_wb_write_range(&a->wb, a->base, u * a->unit_bytes, unit_len(a, u), chunks, msg, msg_n);
        if (err) {
            make_dirty_again(a, u);
        }
    }
    else if (r > 0) {
        int64_t e[3];
        err = oc_zs_encode_append(a->fd, &a->file_end, a->base + u * a->unit_bytes, unit_len(a, u), e);
        if (err) {
            snprintf(msg, msg_n, "compressed spill file");
            make_dirty_again(a, u);
        }
        else {
            pthread_mutex_lock(&pg_lock);
            int64_t *t = &a->table[3 * u];
            long long delta = e[2] - (t[0] >= 0 ? t[2] : 0);
            t[0] = e[0];
            t[1] = e[1];
            t[2] = e[2];
            pthread_mutex_unlock(&pg_lock);
            atomic_fetch_add(&a->stored_bytes, delta);
            atomic_fetch_add(&a->node->compressed_disk_bytes, delta);
            *chunks = 1;
        }
    }
    release_wb(a, u); /* a flush() may wait for it */
    return err;
}

long long pg_now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* After a write-back of a zarr array's unit under budget pressure: counted; a failure is kept
 * for `writeback_error`, said on stderr the first time, and holds further write-backs of the
 * array under pressure off for 0.1 s (the unit stays dirty, in RAM, over the budget). */
void pg_note_write_back(pg_array *a, int err, const char *msg)
{
    if (!err) {
        atomic_fetch_add(&a->writebacks, 1);
        return;
    }
    atomic_fetch_add(&a->wb_failures, 1);
    pthread_mutex_lock(&pg_lock);
    int first = a->wb_error[0] == '\0';
    snprintf(a->wb_error, sizeof a->wb_error, "%s: %s", msg, strerror(err));
    a->wb_retry_ns = pg_now_ns() + 100000000LL;
    pthread_mutex_unlock(&pg_lock);
    if (first) {
        fprintf(stderr,
                "oocarray: writing back a chunk-backed array under memory pressure failed (%s: "
                "%s); its written chunks stay in memory, over the budget, until a write-back "
                "succeeds (flush() raises while it cannot)\n",
                msg, strerror(err));
    }
}

/* Python's part, once, before any write: how the store encodes its chunks.  Only an r+ array
 * over chunk files of its own (zarr: no shared fd) gets the native writer; from then on its
 * dirty units are also written back under budget pressure (pg_evict_lru).  1 when it has it. */
int oc_pager_set_writeback(pg_array *a, int level, int checksum, int file_mode)
{
    pthread_mutex_lock(&pg_lock);
    a->wb = (oc_wb_store){.paths = a->paths,
                          .npaths = a->npaths,
                          .table = a->table,
                          .nchunks = a->nchunks,
                          .chunk_bytes = a->chunk_bytes,
                          .data_bytes = a->data_bytes,
                          .fill = a->fill,
                          .fill_n = a->fill_n,
                          .codec = a->codec,
                          .level = level,
                          .checksum = checksum,
                          .file_mode = file_mode};
    a->wb_native = a->writable && !a->spill && a->fd < 0 &&
                   oc_wb_codec_ok(a->codec);
    int native = a->wb_native;
    pthread_mutex_unlock(&pg_lock);
    return native;
}

/* Whether the array's dirty units are written back natively (else by its store, from
 * Python: HDF5). */
int oc_pager_native_writeback(pg_array *a)
{
    pthread_mutex_lock(&pg_lock);
    int native = a->wb_native;
    pthread_mutex_unlock(&pg_lock);
    return native;
}

/* flush(): writes dirty unit u back natively, after any write-back of it already under way (a
 * unit written meanwhile is written again).  0 with *chunks written (0: it was clean), or
 * errno with what failed in msg: the unit stays dirty and resident.  Nothing in a forked
 * child. */
int oc_pager_write_back(pg_array *a, size_t u, int *chunks, char *msg, size_t msg_n)
{
    *chunks = 0;
    if (u >= a->nunits || !oc_pager_native_writeback(a)) {
        snprintf(msg, msg_n, "unit %zu: the array has no native writer (its store writes it)", u);
        return EINVAL;
    }
    if (a->pid != getpid()) {
        return 0;
    }
    pthread_mutex_lock(&pg_lock);
    while (a->flags[u] & F_WB) {
        pthread_cond_wait(&pg_idle_cond, &pg_lock);
    }
    int dirty = a->state[u] == U_DIRTY;
    if (dirty) {
        a->flags[u] |= F_WB;
    }
    pthread_mutex_unlock(&pg_lock);
    return dirty ? pg_write_back_unit(a, u, chunks, msg, msg_n) : 0;
}

/* The last failed write-back under pressure, into out ("" when none). */
void oc_pager_writeback_error(pg_array *a, char *out, size_t n)
{
    pthread_mutex_lock(&pg_lock);
    snprintf(out, n, "%s", a->wb_error);
    pthread_mutex_unlock(&pg_lock);
}
