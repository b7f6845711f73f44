/*
 * The pager's arrays: made, registered and withdrawn, and what Python asks of one (its
 * counters, dirty units, trimming, prefetch).
 */
#include "pager_int.h"
#include "oc_regions.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>


/* ---- arrays ---- */

void pg_array_free(pg_array *a)
{
    if (a->fd >= 0) {
        close(a->fd);
    }
    if (a->paths != NULL) {
        for (int i = 0; i < a->npaths; i++) {
            free(a->paths[i]);
        }
    }
    free(a->paths);
    free(a->table);
    pg_remote_free(a);
    while (a->moves != NULL) {
        pg_move *m = a->moves;
        a->moves = m->next;
        free(m);
    }
    free(a->fill);
    free(a->state);
    free(a->flags);
    free(a->ring);
    free(a->stamp);
    for (size_t u = 0; a->unit_errors != NULL && u < a->nunits; u++) {
        free(a->unit_errors[u]);
    }
    free(a->unit_errors);
    if (a->node != NULL) {
        oc_node_decref(a->node);
    }
    free(a);
}

/* Takes ownership of paths, table, fill and fd (-1: none; else every chunk is read from it)
 * (freed and closed on failure too).  0 with *out, or errno. */
int oc_pager_create(pg_array **out, char **paths, int npaths, int64_t *table, size_t nchunks,
                    int codec, size_t chunk_bytes, size_t data_bytes, size_t unit_bytes,
                    char *fill, size_t fill_n, int writable, oc_node *node, int readahead, int fd)
{
    size_t page = oc_page_bytes();
    pg_array *a = calloc(1, sizeof *a);
    if (a == NULL) {
        for (int i = 0; i < npaths; i++) {
            free(paths[i]);
        }
        free(paths);
        free(table);
        free(fill);
        if (fd >= 0) {
            close(fd);
        }
        return ENOMEM;
    }
    a->fd = fd;
    a->paths = paths;
    a->npaths = npaths;
    a->table = table;
    a->nchunks = nchunks;
    a->fill = fill;
    a->fill_n = fill_n;
    a->fill_zero = 1;
    for (size_t i = 0; i < fill_n; i++) {
        a->fill_zero &= fill[i] == 0;
    }
    a->codec = codec;
    a->chunk_bytes = chunk_bytes;
    a->data_bytes = data_bytes;
    a->unit_bytes = unit_bytes;
    a->map_bytes = (data_bytes + page - 1) / page * page;
    a->nunits = (a->map_bytes + unit_bytes - 1) / unit_bytes;
    a->writable = writable;
    a->readahead = readahead;
    a->last_fault = -2 - readahead;
    a->pid = getpid();
    a->state = calloc(a->nunits, 1);
    a->flags = calloc(a->nunits, 1);
    a->ring = calloc(a->nunits, sizeof(size_t));
    a->stamp = calloc(a->nunits, sizeof(uint64_t));
    if (node != NULL) {
        oc_node_incref(node);
        a->node = node;
    }
    if (a->state == NULL || a->flags == NULL || a->ring == NULL || a->stamp == NULL) {
        pg_array_free(a);
        return ENOMEM;
    }
    a->base = mmap(NULL, a->map_bytes, writable ? PROT_READ | PROT_WRITE : PROT_READ,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (a->base == MAP_FAILED) {
        int err = errno;
        pg_array_free(a);
        return err;
    }
    madvise(a->base, a->map_bytes, MADV_NOHUGEPAGE); /* fills install small pages */
    pthread_mutex_lock(&pg_life_lock);
    int err = pg_start_threads();
    if (err == 0 && (err = pg_register_range(a)) == 0) {
        pthread_mutex_lock(&pg_lock);
        a->next = pg_arrays;
        pg_arrays = a;
        pg_narrays++;
        pthread_mutex_unlock(&pg_lock);
    }
    else if (pg_narrays == 0) {
        pg_stop_threads();
    }
    pthread_mutex_unlock(&pg_life_lock);
    if (err) {
        munmap(a->base, a->map_bytes);
        pg_array_free(a);
        return err;
    }
    *out = a;
    return 0;
}

/* Takes `a` out of the pager (pg_life_lock held): no new fault reaches it, the fills queued for it
 * are waited for, and its range is unregistered.  Whether it was the last array. */
int pg_withdraw(pg_array *a)
{
    pthread_mutex_lock(&pg_lock);
    a->dead = 1;
    for (pg_array **p = &pg_arrays; *p != NULL; p = &(*p)->next) {
        if (*p == a) {
            *p = a->next;
            break;
        }
    }
    while (a->inflight > 0) {
        pthread_cond_wait(&pg_idle_cond, &pg_lock);
    }
    pg_narrays--;
    int last = pg_narrays == 0;
    pthread_mutex_unlock(&pg_lock);
    if (pg_uffd >= 0) {
        struct uffdio_range r = {.start = (uintptr_t)a->base, .len = a->map_bytes};
        ioctl(pg_uffd, UFFDIO_UNREGISTER, &r);
    }
    return last;
}

/* The last view is gone: wait for the fills queued for it, then unregister and unmap. */
void oc_pager_destroy(pg_array *a)
{
    pthread_mutex_lock(&pg_life_lock);
    int last = pg_withdraw(a);
    munmap(a->base, a->map_bytes);
    if (a->node != NULL) {
        oc_release(a->node, (int64_t)atomic_load(&a->charged_bytes));
    }
    if (last) {
        pg_stop_threads();
    }
    pthread_mutex_unlock(&pg_life_lock);
    pg_array_free(a);
}

char *oc_pager_base(pg_array *a) { return a->base; }
size_t oc_pager_data_bytes(pg_array *a) { return a->data_bytes; }
int oc_pager_writable(pg_array *a) { return a->writable; }

void oc_pager_stats(pg_array *a, long long out[16])
{
    out[0] = atomic_load(&a->fills);
    out[1] = atomic_load(&a->zero_fills);
    out[2] = atomic_load(&a->readaheads);
    out[3] = atomic_load(&a->evictions);
    out[4] = atomic_load(&a->failures);
    out[5] = atomic_load(&a->faults);
    out[6] = atomic_load(&a->decoded_bytes);
    out[7] = atomic_load(&a->resident_bytes);
    pthread_mutex_lock(&pg_lock);
    long long dirty = 0;
    for (size_t u = 0; u < a->nunits; u++) {
        dirty += a->state[u] == U_DIRTY;
    }
    pthread_mutex_unlock(&pg_lock);
    out[8] = dirty;
    out[9] = (long long)a->unit_bytes;
    out[10] = atomic_load(&a->writebacks);
    out[11] = atomic_load(&a->wb_failures);
    out[12] = atomic_load(&a->given_reads);
    out[13] = atomic_load(&a->given_bytes);
    oc_pager_remote_counts(a, &out[14], &out[15]);
}

const char *oc_pager_error(pg_array *a) { return a->error; }

/* Dirty units and those being written back, into out (at most n); how many there are.  None
 * in a forked child: only the process that made the array writes it back. */
size_t oc_pager_dirty(pg_array *a, size_t *out, size_t n)
{
    size_t k = 0;
    if (a->pid != getpid()) {
        return 0;
    }
    pthread_mutex_lock(&pg_lock);
    for (size_t u = 0; u < a->nunits; u++) {
        if (a->state[u] == U_DIRTY || (a->flags[u] & F_WB)) { /* written back now: wait for it */
            if (k < n) {
                out[k] = u;
            }
            k++;
        }
    }
    pthread_mutex_unlock(&pg_lock);
    return k;
}

/* Drops every clean unit of this array; the bytes released. */
size_t oc_pager_trim(pg_array *a)
{
    if (a->node != NULL) {
        return pg_evict_lru(a->node, (size_t)-1, a);
    }
    return 0;
}

/* Queues fills of units [first, last) that are not resident yet (read-ahead on request). */
void oc_pager_prefetch(pg_array *a, size_t first, size_t last)
{
    int queued = 0;
    pthread_mutex_lock(&pg_lock);
    for (size_t u = first; u < last && u < a->nunits; u++) {
        if (a->state[u] == U_EMPTY && pg_enqueue(a, u, 1) == 0) {
            a->state[u] = U_FILLING;
            queued = 1;
        }
    }
    pthread_mutex_unlock(&pg_lock);
    if (queued) {
        pthread_cond_broadcast(&pg_work_cond);
    }
}
