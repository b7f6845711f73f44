/*
 * The pager's budget: resident units charged on their manager node, and under pressure the
 * least recently filled dropped (or written back first, then dropped).
 */
#include "pager_int.h"

#include <sys/mman.h>
#include <unistd.h>


/* ---- budget and eviction ---- */

void pg_force_count(oc_node *n, int64_t bytes) { oc_force_reserve(n, bytes); }

void oc_pager_count_room(oc_node *node, int64_t bytes)
{
    while (oc_reserve(node, bytes) != NULL) {
        if (pg_evict_lru(node, (size_t)bytes, NULL) == 0) {
            oc_force_reserve(node, bytes);
            break;
        }
    }
    oc_raise_peaks(node);
}

/* Whether eviction writes a dirty unit of `a` back and drops it (r+ over chunk files), where
 * the unit is the least recently filled; lock held. */
static int evicts_dirty(pg_array *a, pid_t me, long long now)
{
    return a->wb_native && a->pid == me && now >= a->wb_retry_ns;
}

/* Drops clean units of arrays counted on `node`, least recently filled first, until `want`
 * bytes are released or none is left; the bytes released.  Under budget pressure (not `only`)
 * a dirty unit of an r+ zarr array first in that order is written back, then dropped.  Units
 * being written back (F_WB) are never dropped, nor dirty ones of arrays with no native writer
 * (HDF5: they stay until flush()); an array with nothing it may drop is passed over. */
size_t pg_evict_lru(oc_node *node, size_t want, pg_array *only)
{
    size_t freed = 0;
    pid_t me = getpid();
    long long now = pg_now_ns();
    while (freed < want) {
        pthread_mutex_lock(&pg_lock);
        pg_array *victim = NULL;
        size_t vu = 0;
        int write_first = 0;
        pg_array *passed[4];
        int npassed = 0;
        for (int guard = 0; guard < 4 && victim == NULL; guard++) {
            pg_array *best = NULL;
            for (pg_array *a = pg_arrays; a != NULL; a = a->next) {
                if (a->dead || a->node != node || a->ring_len == 0 || (only && a != only) ||
                    (a->pinned && !only)) {
                    continue;
                }
                int skip = 0;
                for (int i = 0; i < npassed; i++) {
                    skip |= passed[i] == a;
                }
                if (skip) {
                    continue;
                }
                if (best == NULL || a->stamp[a->ring[a->ring_head]] < best->stamp[best->ring[best->ring_head]]) {
                    best = a;
                }
            }
            if (best == NULL) {
                break;
            }
            /* Pop entries of `best` until a clean one; dirty ones go to the back. */
            for (size_t tries = best->ring_len; tries > 0 && best->ring_len > 0; tries--) {
                size_t u = best->ring[best->ring_head];
                best->ring_head = (best->ring_head + 1) % best->nunits;
                best->ring_len--;
                if (best->state[u] == U_CLEAN && !(best->flags[u] & F_WB)) {
                    victim = best;
                    vu = u;
                    break;
                }
                if (best->state[u] == U_DIRTY && !(best->flags[u] & F_WB) && only == NULL &&
                    evicts_dirty(best, me, now)) {
                    victim = best; /* out of the ring while it is written back */
                    vu = u;
                    write_first = 1;
                    break;
                }
                if (best->state[u] == U_DIRTY || best->state[u] == U_CLEAN) {
                    best->ring[(best->ring_head + best->ring_len) % best->nunits] = u;
                    best->ring_len++;
                }
            }
            if (victim == NULL) {
                /* nothing this array has can go now: the next least recently filled one */
                passed[npassed++] = best;
            }
        }
        if (victim == NULL) {
            pthread_mutex_unlock(&pg_lock);
            break;
        }
        if (write_first) {
            victim->flags[vu] |= F_WB;
            victim->inflight++;
            pthread_mutex_unlock(&pg_lock);
            int chunks;
            char msg[320] = "";
            int err = pg_write_back_unit(victim, vu, &chunks, msg, sizeof msg);
            pg_note_write_back(victim, err, msg);
            pthread_mutex_lock(&pg_lock);
            victim->inflight--;
            pthread_cond_broadcast(&pg_idle_cond);
            if (err || victim->state[vu] != U_CLEAN || (victim->flags[vu] & F_WB)) {
                pg_ring_push(victim, vu); /* dirty still (or again): dropped some other time */
                pthread_mutex_unlock(&pg_lock);
                now = pg_now_ns(); /* a failure holds write-backs of this array off a while */
                continue;
            }
        }
        victim->state[vu] = U_EVICTING;
        victim->inflight++;
        pthread_mutex_unlock(&pg_lock);
        char *p = victim->base + vu * victim->unit_bytes;
        size_t len = unit_len(victim, vu);
        madvise(p, len, MADV_DONTNEED);
        atomic_fetch_sub(&victim->resident_bytes, (long long)len);
        atomic_fetch_sub(&victim->charged_bytes, (long long)len);
        oc_release(victim->node, (int64_t)len);
        atomic_fetch_add(&victim->evictions, 1);
        pthread_mutex_lock(&pg_lock);
        victim->state[vu] = U_EMPTY;
        victim->inflight--;
        pthread_cond_broadcast(&pg_idle_cond);
        pthread_mutex_unlock(&pg_lock);
        pg_wake_range(p, len); /* threads that faulted meanwhile fault again, and are filled */
        freed += len;
    }
    return freed;
}

void pg_charge(pg_array *a, size_t bytes)
{
    atomic_fetch_add(&a->resident_bytes, (long long)bytes);
    if (a->node == NULL) {
        return;
    }
    atomic_fetch_add(&a->charged_bytes, (long long)bytes);
    for (;;) {
        if (oc_reserve(a->node, (int64_t)bytes) == NULL) {
            break;
        }
        /* Over the budget: release a little more than needed (the low watermark), so that the
         * next fills fit without evicting again. */
        size_t slack = (size_t)atomic_load(&a->resident_bytes) / 8;
        if (pg_evict_lru(a->node, bytes + slack, NULL) == 0 && pg_write_back_lru(a->node, bytes + slack) == 0) {
            pg_force_count(a->node, (int64_t)bytes); /* nothing left to drop: this unit must go in */
            break;
        }
    }
    oc_raise_peaks(a->node);
}

void pg_ring_push(pg_array *a, size_t u)
{
    a->ring[(a->ring_head + a->ring_len) % a->nunits] = u;
    a->ring_len++;
}

/* Budget pressure with nothing clean to drop (pager workers, from pg_charge()): the least
 * recently filled dirty units of spill arrays and r+ store arrays counted on `node` are
 * written back, so that they can be dropped.  The bytes made clean; 0 when there are none, or
 * the disk refused (the unit stays dirty and in RAM, counted over the budget; a store array
 * is not tried again for a moment, and the failure is kept for `writeback_error`). */
size_t pg_write_back_lru(oc_node *node, size_t want)
{
    size_t done = 0;
    pid_t me = getpid();
    long long now = pg_now_ns();
    while (done < want) {
        pthread_mutex_lock(&pg_lock);
        pg_array *best = NULL;
        size_t bu = 0;
        for (pg_array *a = pg_arrays; a != NULL; a = a->next) {
            if (!(a->spill || (a->wb_native && now >= a->wb_retry_ns)) || a->dead || a->pinned ||
                a->node != node || a->pid != me) {
                continue;
            }
            for (size_t u = 0; u < a->nunits; u++) {
                if (a->state[u] == U_DIRTY && !(a->flags[u] & F_WB) &&
                    (best == NULL || a->stamp[u] < best->stamp[bu])) {
                    best = a;
                    bu = u;
                }
            }
        }
        if (best != NULL) {
            best->flags[bu] |= F_WB;
            best->inflight++; /* the array stays until this is done */
        }
        pthread_mutex_unlock(&pg_lock);
        if (best == NULL) {
            break;
        }
        int chunks;
        char msg[320] = "";
        int err = pg_write_back_unit(best, bu, &chunks, msg, sizeof msg);
        if (!best->spill) {
            pg_note_write_back(best, err, msg);
        }
        size_t len = unit_len(best, bu); /* `best` may be freed once inflight drops */
        pthread_mutex_lock(&pg_lock);
        best->inflight--;
        pthread_cond_broadcast(&pg_idle_cond);
        pthread_mutex_unlock(&pg_lock);
        if (err) {
            break; /* a full disk: the unit stays in RAM, counted over the budget */
        }
        done += len;
    }
    return done;
}
