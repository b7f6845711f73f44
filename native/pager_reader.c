/*
 * The pager's reader thread: it drains the userfaultfd's fault messages, queues fills of the
 * units they fall in (and read-ahead after sequential faults) for the workers (pager_fill.c),
 * and answers write-protect faults itself.
 */
#include "pager_int.h"
#include "oc_regions.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <unistd.h>


/* ---- the reader ---- */

typedef struct {
    char *p;
    size_t n;
    int unprotect;
} pg_wake;

/* After a fault at unit u that follows the previous one closely (a sequential reader), queues
 * the next `readahead` units not resident yet; how many (pg_lock held).  Faults on units still
 * being filled count too: a reader waiting on the decoders keeps them busy, instead of
 * faulting on an empty unit only once the window is used up. */
static int read_ahead(pg_array *a, size_t u)
{
    int queued = 0;
    long long gap = (long long)u - a->last_fault;
    if (gap > 0 && gap <= a->readahead + 1) {
        for (size_t v = u + 1; v <= u + (size_t)a->readahead && v < a->nunits; v++) {
            if (a->state[v] == U_EMPTY && pg_enqueue(a, v, 1) == 0) {
                a->state[v] = U_FILLING;
                queued++;
            }
        }
    }
    a->last_fault = (long long)u;
    return queued;
}

/* Carried-over unprotects (refused with EAGAIN), tried again now that the event is read;
 * pg_lock held.  Only a unit still dirty is made writable: a write-back may have begun since
 * and write-protected it, and its writer, only woken, faults again. */
static void unprotect_pending(pg_wake *pending, int *n)
{
    int kept = 0;
    for (int i = 0; i < *n; i++) {
        pg_array *a = pg_find((uintptr_t)pending[i].p);
        size_t u = a == NULL ? 0 : (size_t)(pending[i].p - a->base) / a->unit_bytes;
        if (a == NULL || a->dead || a->state[u] != U_DIRTY) {
            pg_wake_range(pending[i].p, pending[i].n);
        }
        else if (pg_protect_once(pending[i].p, pending[i].n, 0) == EAGAIN) {
            pending[kept++] = pending[i];
        }
    }
    *n = kept;
}

void *pg_reader_main(void *arg)
{
    (void)arg;
    int fd = pg_uffd, stop_fd = pg_wake_fd;
    struct uffd_msg msgs[128];
    pg_wake wakes[128];
    /* unprotects refused with EAGAIN: each fault message adds at most one, and a writer whose
     * unprotect is pending faults no more, so they stay fewer than the pages written at once */
    pg_wake *pending = NULL;
    int npending = 0, pending_cap = 0;
    size_t page = oc_page_bytes();
    for (;;) {
        struct pollfd p[2] = {{.fd = fd, .events = POLLIN}, {.fd = stop_fd, .events = POLLIN}};
        if (poll(p, 2, npending ? 1 : -1) < 0) {
            if (errno == EINTR) {
                continue;
            }
            break;
        }
        if (p[1].revents) {
            break;
        }
        ssize_t got = p[0].revents ? read(fd, msgs, sizeof msgs) : 0;
        if (got < 0) {
            if (errno != EAGAIN && errno != EINTR) {
                break;
            }
            got = 0;
        }
        int n = (int)(got / (ssize_t)sizeof(struct uffd_msg)), nw = 0, queued = 0;
        pthread_mutex_lock(&pg_lock);
        unprotect_pending(pending, &npending); /* after the read: the event is gone */
        for (int i = 0; i < n; i++) {
            if (msgs[i].event != UFFD_EVENT_PAGEFAULT) {
                continue;
            }
            uintptr_t addr = (uintptr_t)msgs[i].arg.pagefault.address;
            uint64_t fl = msgs[i].arg.pagefault.flags;
            pg_array *a = pg_find(addr);
            if (a == NULL || a->dead) {
                continue;
            }
            atomic_fetch_add_explicit(&a->faults, 1, memory_order_relaxed);
            size_t u = (addr - (uintptr_t)a->base) / a->unit_bytes;
            char *ustart = a->base + u * a->unit_bytes;
            char *pg = (char *)(addr & ~(uintptr_t)(page - 1));
            int st = a->state[u];
            if (fl & UFFD_PAGEFAULT_FLAG_WP) {
                if (st == U_CLEAN && a->writable) {
                    a->state[u] = U_DIRTY;
                    wakes[nw++] = (pg_wake){ustart, unit_len(a, u), 1};
                }
                else if (st == U_DIRTY) {
                    wakes[nw++] = (pg_wake){ustart, unit_len(a, u), 1};
                }
                else if (st == U_FILLING) {
                    a->flags[u] |= F_WRITE; /* the filler unprotects it when done */
                }
                else {
                    wakes[nw++] = (pg_wake){pg, page, 0};
                }
                continue;
            }
            if (st == U_EMPTY) {
                a->state[u] = U_FILLING;
                if (pg_enqueue(a, u, 0) != 0) {
                    a->state[u] = U_EMPTY; /* out of memory: the fault comes again */
                    wakes[nw++] = (pg_wake){pg, page, 0};
                    continue;
                }
                queued++;
                queued += read_ahead(a, u);
            }
            else if (st == U_CLEAN || st == U_DIRTY || st == U_FAILED) {
                wakes[nw++] = (pg_wake){pg, page, 0}; /* filled since the fault was raised */
            }
            else if (st == U_FILLING) {
                /* caught up with a fill under way: the fill wakes it; the window moves on */
                queued += read_ahead(a, u);
            }
            /* U_EVICTING: the eviction wakes it to fault again */
        }
        /* Unprotected under the lock that marked the units dirty: a write-back that then
         * write-protects one (make_clean) comes after, never before, this unprotect. */
        for (int i = 0; i < nw; i++) {
            if (!wakes[i].unprotect) {
                pg_wake_range(wakes[i].p, wakes[i].n);
            }
            else if (pg_protect_once(wakes[i].p, wakes[i].n, 0) == EAGAIN) { /* also wakes them */
                if (npending == pending_cap) {
                    int cap = pending_cap ? 2 * pending_cap : 64;
                    pg_wake *more = realloc(pending, (size_t)cap * sizeof *more);
                    if (more == NULL) {
                        pg_wake_range(wakes[i].p, wakes[i].n); /* out of memory: it faults again */
                        continue;
                    }
                    pending = more;
                    pending_cap = cap;
                }
                pending[npending++] = wakes[i];
            }
        }
        pthread_mutex_unlock(&pg_lock);
        if (queued) {
            pthread_cond_broadcast(&pg_work_cond);
        }
    }
    free(pending);
    atomic_fetch_sub(&oc_pager_threads, 1);
    return NULL;
}
