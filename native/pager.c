/*
 * Chunk-backed ndarrays: an address range whose pages are filled from a chunk store on first
 * touch (Linux userfaultfd).  See ../shared/notes/userfaultfd.md for the lessons this follows.
 *
 * An array's range is reserved (anonymous, MAP_NORESERVE) and registered for missing-page
 * faults (and write-protect faults when it is writable).  The range is cut into fill units: a
 * page-aligned run of bytes, the chunk's size rounded up to pages (the chunk itself where its
 * size is a whole number of pages).  A unit that straddles chunks is filled from the parts of
 * each it needs: the native reader decodes byte ranges of a chunk without the rest.
 *
 * Threads (none of them needs the GIL, and none waits on anything but its own queue):
 *  - one reader drains many fault messages per read(), rounds each to its unit, drops the
 *    ones already being filled, queues fills (and read-ahead after sequential faults) for the
 *    workers, and answers write-protect faults itself (a unit's first write makes it dirty and
 *    unprotects the whole unit);
 *  - workers decode a unit into their own staging buffer and install it with UFFDIO_COPY
 *    (UFFDIO_ZEROPAGE for read-only units of absent chunks with a zero fill value), which
 *    wakes every thread waiting on it.  A unit that cannot be decoded is poisoned
 *    (UFFDIO_POISON, Linux 6.6+; PROT_NONE before that), never a hang: its accesses get
 *    SIGBUS, which pager_errors.c turns into CorruptChunkError in the Python thread that
 *    touched it (SIGSEGV without poison); the reason is written to stderr and kept for
 *    `error`.  A read-only unit keeps the pages of its chunks that could be read.
 *
 * Chunks: a table per array gives each chunk's file (a path number, or -1: absent, the fill
 * value), byte offset and stored size; the decoding is chunks.c's (raw, zstd) or h5filters.c's
 * (HDF5 filter pipelines; an HDF5 chunk's filter mask rides in its path number).  zarr chunk
 * files are opened per fill (a missing one holds the fill value); an HDF5 array reads every
 * chunk from one descriptor of its file, kept open.  HDF5 can move a chunk in its file when it
 * is rewritten, and free and reuse its old bytes: the store announces each rewrite with the new
 * bytes (oc_pager_move_begin), which fills of that chunk copy until the move ends with the
 * chunk's new table entry (oc_pager_move_end); a fill that read the file while a move began or
 * ended (move_gen changed) reads again.  Nothing waits for the writer, which may need the GIL
 * that a faulting thread holds.
 *
 * Resident units are counted against the owning manager node's budget; a fill that does not
 * fit drops the least recently filled clean units of arrays of the same node (one
 * MADV_DONTNEED per unit, refilled on the next touch), with some slack so that not every fill
 * evicts.  Dirty units are not dropped as they are.  Where the least recently filled unit of
 * an r+ array over zarr chunk files is dirty, the worker making room writes it back first
 * (pager_wb.c, writeback.c: each chunk encoded, written beside its file and renamed over it,
 * never calling Python) and then drops it; a failed write (ENOSPC) leaves it dirty and
 * resident, counted over the budget, and holds that array's write-backs off for a moment.
 * Dirty units of compressed spill are encoded only when nothing clean is left to drop.  An
 * r+ array over HDF5 has no native writer (HDF5 places a rewritten chunk, so h5py must write
 * it): its dirty units are written back by Python through the store (flush()) and stay
 * resident until then, over the budget if need be; eviction passes over an array with
 * nothing it may drop to the next least recently filled one.  A unit being written back
 * carries F_WB, held by one writer at a time (pager_wb.c): it is clean and write-protected
 * before it is copied out (a write meanwhile makes it dirty again), it is never dropped (a
 * refill before its chunks are stored would read the old ones), and a native flush() waits
 * for it rather than writing the same unit at once.
 *
 * The mapping lives as long as the Pages object, which is the base of every ndarray over it:
 * unregistered and unmapped only when the last view is gone, after every fill queued for it
 * has finished.  The threads stop when the last such array is gone, and start again with the
 * next.  fork: the child's copy of a range is no longer registered (no EVENT_FORK, which needs
 * CAP_SYS_PTRACE), so the child opens its own descriptor, registers every range again and
 * starts its own threads; units not yet filled are filled in the child from the store.
 */
#include "pager_int.h"
#include "oc_codecs.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <signal.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Newer than the build machine's kernel headers, checked at run time. */
#ifndef USERFAULTFD_IOC_NEW
#define USERFAULTFD_IOC_NEW _IO(0xAA, 0x00)
#endif

typedef struct {
    pg_array *a;
    size_t unit;
    int ahead;
} pg_job;

static pthread_mutex_t life_lock = PTHREAD_MUTEX_INITIALIZER; /* starting and stopping */
pthread_mutex_t pg_lock = PTHREAD_MUTEX_INITIALIZER; /* arrays, states, the queue */
static pthread_cond_t work_cond = PTHREAD_COND_INITIALIZER;
pthread_cond_t pg_idle_cond = PTHREAD_COND_INITIALIZER; /* a job or write-back is over */
static int uffd = -1;
static int wake_fd = -1;
static uint64_t features;
static pg_array *arrays;
static int narrays;
static pg_job *queue;
static size_t q_head, q_len, q_cap;
static pthread_t reader_thread;
static pthread_t *worker_threads;
static int nworkers;
static int running;
static int stopping;
static uint64_t fill_seq;
atomic_int oc_pager_threads; /* reader and workers alive, for tests */

/* ---- the descriptor ---- */

static int uffd_new(void)
{
    int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
    if (fd < 0 && errno == EPERM) {
        /* Linux 6.1+: access to /dev/userfaultfd grants kernel-mode fault handling. */
        int dev = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
        if (dev >= 0) {
            fd = ioctl(dev, USERFAULTFD_IOC_NEW, O_CLOEXEC | O_NONBLOCK);
            close(dev);
        }
        else {
            errno = EPERM;
        }
    }
    return fd < 0 ? -errno : fd;
}

/* A descriptor serving kernel-mode faults too, with write-protect faults and poison where the
 * kernel has them; or -errno. */
static int uffd_open(uint64_t *granted)
{
    int fd = uffd_new();
    if (fd < 0) {
        return fd;
    }
    struct uffdio_api api = {.api = UFFD_API, .features = 0};
    if (ioctl(fd, UFFDIO_API, &api) != 0) {
        int err = errno;
        close(fd);
        return -err;
    }
    close(fd);
    uint64_t wanted = api.features & (UFFD_FEATURE_PAGEFAULT_FLAG_WP | PG_FEATURE_POISON | UFFD_FEATURE_EVENT_REMAP);
    fd = uffd_new();
    if (fd < 0) {
        return fd;
    }
    api = (struct uffdio_api){.api = UFFD_API, .features = wanted};
    if (ioctl(fd, UFFDIO_API, &api) != 0) {
        int err = errno;
        close(fd);
        return -err;
    }
    *granted = wanted;
    return fd;
}

int oc_pager_check(int *write_protect, int *spill_ok)
{
    uint64_t granted = 0;
    int fd = uffd_open(&granted);
    if (fd < 0) {
        return -fd;
    }
    close(fd);
    *write_protect = (granted & UFFD_FEATURE_PAGEFAULT_FLAG_WP) != 0;
    if (spill_ok != NULL) {
        /* compressed spill moves a registered range into place (mremap) and tracks writes */
        *spill_ok = (granted & (UFFD_FEATURE_PAGEFAULT_FLAG_WP | UFFD_FEATURE_EVENT_REMAP)) ==
                    (UFFD_FEATURE_PAGEFAULT_FLAG_WP | UFFD_FEATURE_EVENT_REMAP);
    }
    return 0;
}

static void uffd_wake(char *p, size_t n)
{
    struct uffdio_range r = {.start = (uintptr_t)p, .len = n};
    ioctl(uffd, UFFDIO_WAKE, &r);
}

/* For pager_spill.c: threads waiting on faults in [p, p + n) fault again; nothing while no
 * descriptor is open. */
void pg_uffd_wake(char *p, size_t n)
{
    if (uffd >= 0) {
        uffd_wake(p, n);
    }
}

/* While a non-cooperative event (the mremap of compressed spill) waits to be read, the
 * kernel refuses UFFDIO_COPY, ZEROPAGE and WRITEPROTECT with EAGAIN; only the reader reading
 * the event ends that.  So the reader never waits for such an ioctl (see reader_main), and
 * the other threads pause before they try again. */
void pg_eagain_pause(void)
{
    struct timespec pause = {0, 100000};
    nanosleep(&pause, NULL);
}

static int protect_once(char *p, size_t n, int on)
{
    struct uffdio_writeprotect w = {.range = {.start = (uintptr_t)p, .len = n},
                                    .mode = on ? UFFDIO_WRITEPROTECT_MODE_WP : 0};
    return ioctl(uffd, UFFDIO_WRITEPROTECT, &w) == 0 ? 0 : errno;
}

/* Not for the reader thread (see pg_eagain_pause). */
int pg_uffd_protect(char *p, size_t n, int on)
{
    int err;
    while ((err = protect_once(p, n, on)) == EAGAIN) {
        pg_eagain_pause();
    }
    return err;
}

/* ---- the queue (lock held) ---- */

static int enqueue(pg_array *a, size_t unit, int ahead)
{
    if (q_len == q_cap) {
        size_t cap = q_cap ? 2 * q_cap : 256;
        pg_job *q = malloc(cap * sizeof *q);
        if (q == NULL) {
            return -1;
        }
        for (size_t i = 0; i < q_len; i++) {
            q[i] = queue[(q_head + i) % q_cap];
        }
        free(queue);
        queue = q;
        q_cap = cap;
        q_head = 0;
    }
    queue[(q_head + q_len) % q_cap] = (pg_job){a, unit, ahead};
    q_len++;
    a->inflight++;
    return 0;
}

static pg_array *find(uintptr_t addr)
{
    for (pg_array *a = arrays; a != NULL; a = a->next) {
        if (addr >= (uintptr_t)a->base && addr < (uintptr_t)a->base + a->map_bytes) {
            return a;
        }
    }
    return NULL;
}

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
            if (a->state[v] == U_EMPTY && enqueue(a, v, 1) == 0) {
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
        pg_array *a = find((uintptr_t)pending[i].p);
        size_t u = a == NULL ? 0 : (size_t)(pending[i].p - a->base) / a->unit_bytes;
        if (a == NULL || a->dead || a->state[u] != U_DIRTY) {
            uffd_wake(pending[i].p, pending[i].n);
        }
        else if (protect_once(pending[i].p, pending[i].n, 0) == EAGAIN) {
            pending[kept++] = pending[i];
        }
    }
    *n = kept;
}

static void *reader_main(void *arg)
{
    (void)arg;
    int fd = uffd, stop_fd = wake_fd;
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
            pg_array *a = find(addr);
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
                if (enqueue(a, u, 0) != 0) {
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
                uffd_wake(wakes[i].p, wakes[i].n);
            }
            else if (protect_once(wakes[i].p, wakes[i].n, 0) == EAGAIN) { /* also wakes them */
                if (npending == pending_cap) {
                    int cap = pending_cap ? 2 * pending_cap : 64;
                    pg_wake *more = realloc(pending, (size_t)cap * sizeof *more);
                    if (more == NULL) {
                        uffd_wake(wakes[i].p, wakes[i].n); /* out of memory: it faults again */
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
            pthread_cond_broadcast(&work_cond);
        }
    }
    free(pending);
    atomic_fetch_sub(&oc_pager_threads, 1);
    return NULL;
}

/* ---- budget and eviction ---- */

static void force_count(oc_node *n, int64_t bytes)
{
    for (oc_node *p = n; p != NULL; p = p->parent) {
        atomic_fetch_add_explicit(&p->current_bytes, bytes, memory_order_relaxed);
    }
}

static void ring_push(pg_array *a, size_t u);

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
static size_t evict_lru(oc_node *node, size_t want, pg_array *only)
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
            for (pg_array *a = arrays; a != NULL; a = a->next) {
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
                ring_push(victim, vu); /* dirty still (or again): dropped some other time */
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
        uffd_wake(p, len); /* threads that faulted meanwhile fault again, and are filled */
        freed += len;
    }
    return freed;
}

static size_t write_back_lru(oc_node *node, size_t want);

static void charge(pg_array *a, size_t bytes)
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
        if (evict_lru(a->node, bytes + slack, NULL) == 0 && write_back_lru(a->node, bytes + slack) == 0) {
            force_count(a->node, (int64_t)bytes); /* nothing left to drop: this unit must go in */
            break;
        }
    }
    oc_raise_peaks(a->node);
}

/* ---- filling ---- */

static void fill_pattern(pg_array *a, char *d, size_t lo, size_t hi)
{
    if (a->fill_zero) {
        memset(d, 0, hi - lo);
        return;
    }
    for (size_t i = lo; i < hi; i++) {
        d[i - lo] = a->fill[i % a->fill_n];
    }
}

/* Bytes [lo, hi) of chunk c, whose table entry is t, into d; 0, 1 when the chunk is absent
 * (the fill value), or -1 with a message. */
static int read_part(pg_array *a, size_t c, const int64_t t[3], size_t lo, size_t hi, char *d,
                     char *err, size_t err_n)
{
    size_t C = a->chunk_bytes, cs = c * C;
    if (t[0] < 0) {
        fill_pattern(a, d, lo, hi);
        return 1;
    }
    int64_t path = OC_CHUNK_PATH(t[0]);
    const char *where = a->spill ? "compressed spill file" : a->paths[path];
    if (t[1] < 0) {
        snprintf(err, err_n, "chunk %zu (%s): its place in the file is unknown after a write that failed", c, where);
        return -1;
    }
    int fd = a->fd >= 0 ? a->fd : open(a->paths[path], O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) { /* a chunk never written holds the fill value */
            fill_pattern(a, d, lo, hi);
            return 1;
        }
        snprintf(err, err_n, "chunk %zu: cannot open %s: %s", c, where, strerror(errno));
        return -1;
    }
    char why[256];
    /* a spill's last chunk is as long as the data left (a zarr or HDF5 chunk is always whole) */
    size_t cn = a->spill && cs + C > a->data_bytes ? a->data_bytes - cs : C;
    int codec = a->codec;
    if (OC_CODEC_KIND(codec) == OC_CODEC_H5) {
        codec = oc_h5_masked(codec, OC_CHUNK_MASK(t[0])); /* the filters this chunk skipped */
    }
    int rc = oc_decode_range(codec, fd, t[1], t[2], cn, lo - cs, d, hi - lo, why, sizeof why);
    if (a->fd < 0) {
        close(fd);
    }
    if (rc != 0) {
        snprintf(err, err_n, "chunk %zu (%s) cannot be decoded: %s", c, where, why);
        return -1;
    }
    return 0;
}

/* Decode unit u into stage; 0, or -1 with a message.  *absent: every chunk was absent.  With
 * `bad` (a byte per page of the unit, zeroed), a chunk that cannot be read marks the pages it
 * overlaps and the others are decoded still: 1 when some failed (the message is the first
 * failure's); without it, the first failure fails the unit. */
static int decode_unit(pg_array *a, size_t u, char *stage, size_t len, int *absent, char *err,
                       size_t err_n, uint8_t *bad)
{
    int failed = 0;
    char more[320];
    size_t page = oc_page_bytes();
    size_t start = u * a->unit_bytes;
    size_t end = start + len < a->data_bytes ? start + len : a->data_bytes;
    *absent = 1;
    if (end < start + len) {
        memset(stage + (end - start), 0, start + len - end);
    }
    size_t C = a->chunk_bytes;
    for (size_t c = start / C; c < a->nchunks && c * C < end; c++) {
        size_t cs = c * C;
        size_t lo = start > cs ? start : cs;
        size_t hi = end < cs + C ? end : cs + C;
        char *d = stage + (lo - start);
        for (;;) {
            /* The entry and the moves are read together; a read from the file that a move
             * overlapped (the bytes may have been freed and reused) is done again. */
            int64_t t[3];
            pthread_mutex_lock(&pg_lock);
            uint64_t gen = a->move_gen;
            memcpy(t, &a->table[3 * c], sizeof t);
            pg_move *m = a->moves;
            while (m != NULL && m->chunk != c) {
                m = m->next;
            }
            if (m != NULL) {
                m->refs++;
            }
            pthread_mutex_unlock(&pg_lock);
            if (m != NULL) {
                size_t from = lo - cs, to = hi - cs; /* the new bytes cover the array's part */
                size_t have = m->n < from ? 0 : m->n - from < to - from ? m->n - from : to - from;
                memcpy(d, m->data + from, have);
                fill_pattern(a, d + have, lo + have, hi);
                pg_move_release(m);
                *absent = 0;
                break;
            }
            int rc = read_part(a, c, t, lo, hi, d, failed ? more : err, failed ? sizeof more : err_n);
            pthread_mutex_lock(&pg_lock);
            int moved = a->move_gen != gen;
            pthread_mutex_unlock(&pg_lock);
            if (moved) {
                continue;
            }
            if (rc < 0 && bad == NULL) {
                return -1;
            }
            if (rc < 0) {
                for (size_t p = (lo - start) / page; p < (hi - start + page - 1) / page; p++) {
                    bad[p] = 1;
                }
                failed = 1;
                break;
            }
            if (rc == 0) {
                *absent = 0;
                atomic_fetch_add_explicit(&a->decoded_bytes, (long long)(hi - lo), memory_order_relaxed);
            }
            break;
        }
    }
    return failed;
}

/* Install src at dst with UFFDIO_COPY; 0 or errno. */
static int install(char *dst, const char *src, size_t len, int wp)
{
    size_t page = oc_page_bytes();
    for (size_t done = 0; done < len;) {
        struct uffdio_copy c = {.dst = (uintptr_t)(dst + done),
                                .src = (uintptr_t)(src + done),
                                .len = len - done,
                                .mode = wp ? UFFDIO_COPY_MODE_WP : 0};
        if (ioctl(uffd, UFFDIO_COPY, &c) == 0) {
            break;
        }
        if (c.copy > 0) {
            done += (size_t)c.copy;
            continue;
        }
        if (errno == EAGAIN || errno == ENOMEM) {
            pg_eagain_pause();
            continue;
        }
        if (errno == EEXIST) {
            done += page; /* present already (a fill cut short by fork): keep it */
            continue;
        }
        return errno;
    }
    return 0;
}

/* The pages of a read-only unit whose chunks could be read, where others could not: each run
 * of them installed; 0 or errno.  Only where pages hold nothing of a failed chunk (a chunk
 * not a whole number of pages shares a page with its neighbour, which then fails too). */
static int install_good(char *dst, const char *stage, size_t len, const uint8_t *bad)
{
    size_t page = oc_page_bytes(), n = len / page;
    for (size_t p = 0; p < n;) {
        size_t q = p;
        while (q < n && !bad[q]) {
            q++;
        }
        if (q > p) {
            int e = install(dst + p * page, stage + p * page, (q - p) * page, 0);
            if (e != 0) {
                return e;
            }
        }
        p = q + 1;
    }
    return 0;
}

static void poison(pg_array *a, char *dst, size_t len)
{
    size_t page = oc_page_bytes();
    if (features & PG_FEATURE_POISON) {
        for (size_t off = 0; off < len; off += page) {
            struct pg_uffdio_poison p = {.range = {.start = (uintptr_t)(dst + off), .len = page}};
            while (ioctl(uffd, PG_UFFDIO_POISON, &p) != 0 && errno != EEXIST) {
                if (errno != EAGAIN) {
                    goto fallback;
                }
                pg_eagain_pause();
            }
        }
        return;
    }
fallback:
    (void)a;
    mprotect(dst, len, PROT_NONE); /* accesses get SIGSEGV */
    uffd_wake(dst, len);
}

/* ---- units that cannot be filled (see pager_errors.c) ---- */

/* Keeps the reason unit u failed (pg_lock held), for the thread that touches it; out of
 * memory, the array's last error stands for it. */
static void note_unit_error(pg_array *a, size_t u)
{
    if (a->unit_errors == NULL) {
        a->unit_errors = calloc(a->nunits, sizeof(char *));
    }
    if (a->unit_errors != NULL) {
        free(a->unit_errors[u]);
        a->unit_errors[u] = strdup(a->error);
    }
}

int pg_uffd_fd(void) { return uffd; }

/* For pager_errors.c (pg_lock held): the array holding addr, or NULL; the first array. */
pg_array *pg_find(uintptr_t addr) { return find(addr); }
pg_array *pg_first_array(void) { return arrays; }
int pg_can_poison(void) { return (features & PG_FEATURE_POISON) != 0; }

static void ring_push(pg_array *a, size_t u)
{
    a->ring[(a->ring_head + a->ring_len) % a->nunits] = u;
    a->ring_len++;
}

/* The worker's scratch while it fills a unit of `a` (its staging buffer, and the decoder's
 * buffers and contexts at their size after the last fill, or as large as the unit before the
 * first) counts against a's budget like resident units: the least recently filled go to make
 * room.  Only where the budget holds eight times that much: under a budget of a few units,
 * dropping units for the scratch of every fill would drop the units being read too (and the
 * scratch is then small beside the memory the budget allows over it). */
static size_t charge_scratch(pg_array *a, size_t stage_n, oc_node **charged)
{
    /* The array may move to another manager meanwhile (oc_pager_set_node): the scratch is
     * released from the node it was charged to, held until then. */
    *charged = NULL;
    pthread_mutex_lock(&pg_lock);
    oc_node *node = a->node;
    if (node != NULL) {
        oc_node_incref(node);
    }
    pthread_mutex_unlock(&pg_lock);
    if (node == NULL) {
        return 0;
    }
    size_t decoder = oc_chunk_state_bytes_mine();
    size_t bytes = stage_n + (decoder > 0 ? decoder : stage_n);
    int64_t tightest = -1;
    for (oc_node *p = node; p != NULL; p = p->parent) {
        int64_t limit = atomic_load_explicit(&p->max_bytes, memory_order_relaxed);
        if (limit >= 0 && (tightest < 0 || limit < tightest)) {
            tightest = limit;
        }
    }
    if (tightest < 0 || (uint64_t)tightest < 8 * (uint64_t)bytes) {
        oc_node_decref(node);
        return 0;
    }
    while (oc_reserve(node, (int64_t)bytes) != NULL) {
        if (evict_lru(node, bytes, NULL) == 0 && write_back_lru(node, bytes) == 0) {
            force_count(node, (int64_t)bytes);
            break;
        }
    }
    oc_raise_peaks(node);
    *charged = node;
    return bytes;
}

static void fill(pg_array *a, size_t u, char **stage, size_t *stage_n)
{
    char *dst = a->base + u * a->unit_bytes;
    size_t len = unit_len(a, u);
    char err[320] = "";
    int absent = 0, rc = 0, partial = 0;
    /* read-only: a chunk that cannot be read fails only its pages (see install_good) */
    uint8_t *bad = a->writable ? NULL : calloc(len / oc_page_bytes(), 1);
    if (*stage_n < len && oc_scratch_grow(stage, stage_n, len) == NULL) {
        snprintf(err, sizeof err, "out of memory for a staging buffer of %zu bytes", len);
        rc = -1;
    }
    oc_node *scratch_node = NULL;
    size_t scratch = rc == 0 ? charge_scratch(a, *stage_n, &scratch_node) : 0;
    if (rc == 0) {
        charge(a, len);
        rc = decode_unit(a, u, *stage, len, &absent, err, sizeof err, bad);
        if (scratch_node != NULL) {
            /* Decoded: released before the install wakes the threads waiting on the unit, so
             * that what they see counted is the unit alone. */
            oc_release(scratch_node, (int64_t)scratch);
            oc_node_decref(scratch_node);
            scratch_node = NULL;
        }
        if (rc > 0) {
            partial = install_good(dst, *stage, len, bad) == 0;
            rc = -1;
        }
        else if (rc == 0) {
            int e = absent && a->fill_zero && !a->writable ? 0 : install(dst, *stage, len, a->writable);
            if (absent && a->fill_zero && !a->writable) {
                struct uffdio_zeropage z = {.range = {.start = (uintptr_t)dst, .len = len}};
                while (ioctl(uffd, UFFDIO_ZEROPAGE, &z) != 0 && errno == EAGAIN) {
                    z.zeropage = 0;
                    pg_eagain_pause();
                }
                atomic_fetch_add(&a->zero_fills, 1);
            }
            if (e != 0) {
                snprintf(err, sizeof err, "installing the pages failed: %s", strerror(e));
                rc = -1;
            }
        }
        if (rc != 0 && !partial) { /* a partly failed unit stays counted until dropped */
            atomic_fetch_sub(&a->resident_bytes, (long long)len);
            if (a->node != NULL) {
                atomic_fetch_sub(&a->charged_bytes, (long long)len);
                oc_release(a->node, (int64_t)len);
            }
        }
    }
    int unprotect = 0;
    free(bad);
    if (rc != 0) {
        /* counted before the poison wakes the faulting thread: its SIGBUS, raised again by a
         * faulthandler installed over the pager's handler, is recognised by this count */
        atomic_fetch_add(&pg_failures_seen, 1);
        /* poisoned while still U_FILLING (an access meanwhile is retried: pg_fault_touch), so
         * that no unit is poisoned after oc_pager_drop_failed has made it empty; the pages
         * installed already (install_good) are kept */
        poison(a, dst, len);
    }
    pthread_mutex_lock(&pg_lock);
    if (rc != 0) {
        a->state[u] = U_FAILED;
        snprintf(a->error, sizeof a->error, "bytes %zu-%zu: %s", u * a->unit_bytes, u * a->unit_bytes + len, err);
        note_unit_error(a, u);
    }
    else {
        unprotect = a->writable && (a->flags[u] & F_WRITE);
        a->state[u] = unprotect ? U_DIRTY : U_CLEAN;
        a->stamp[u] = ++fill_seq;
        ring_push(a, u);
    }
    a->flags[u] = partial ? F_PARTIAL : 0;
    if (unprotect) {
        /* under the lock, as the reader does: a write-back cannot protect it in between */
        pg_uffd_protect(dst, len, 0);
    }
    pthread_mutex_unlock(&pg_lock);
    if (rc != 0) {
        atomic_fetch_add(&a->failures, 1);
        fprintf(stderr,
                "oocarray: a chunk-backed array cannot fill bytes %zu-%zu: %s; %s\n",
                u * a->unit_bytes, u * a->unit_bytes + len, err,
                oc_pager_errors_armed() ? "a Python thread touching them gets CorruptChunkError"
                                        : "accesses to them get a signal");
    }
    else {
        atomic_fetch_add(&a->fills, 1);
    }
}

static void *worker_main(void *arg)
{
    (void)arg;
    char *stage = NULL;
    size_t stage_n = 0;
    for (;;) {
        pthread_mutex_lock(&pg_lock);
        if (q_len == 0 && !stopping && stage != NULL) {
            /* Nothing queued: the scratch goes back to the system until the next fill. */
            pthread_mutex_unlock(&pg_lock);
            oc_scratch_drop(&stage, &stage_n);
            oc_chunk_state_release_mine();
            oc_h5_state_release_mine();
            pthread_mutex_lock(&pg_lock);
        }
        while (q_len == 0 && !stopping) {
            pthread_cond_wait(&work_cond, &pg_lock);
        }
        if (stopping) {
            pthread_mutex_unlock(&pg_lock);
            break;
        }
        pg_job job = queue[q_head];
        q_head = (q_head + 1) % q_cap;
        q_len--;
        int dead = job.a->dead;
        if (dead) {
            job.a->state[job.unit] = U_EMPTY;
        }
        pthread_mutex_unlock(&pg_lock);
        if (!dead) {
            if (job.ahead) {
                atomic_fetch_add(&job.a->readaheads, 1);
            }
            fill(job.a, job.unit, &stage, &stage_n);
        }
        pthread_mutex_lock(&pg_lock);
        job.a->inflight--;
        pthread_cond_broadcast(&pg_idle_cond);
        pthread_mutex_unlock(&pg_lock);
    }
    oc_scratch_drop(&stage, &stage_n);
    oc_chunk_state_release_mine();
    oc_h5_state_release_mine();
    atomic_fetch_sub(&oc_pager_threads, 1);
    return NULL;
}

/* ---- starting and stopping (life_lock held) ---- */

static int spawn(pthread_t *t, void *(*fn)(void *))
{
    pthread_attr_t attr;
    sigset_t all, old;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* the threads take no signals */
    int err = pthread_create(t, &attr, fn, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    if (err == 0) {
        atomic_fetch_add(&oc_pager_threads, 1);
    }
    return err;
}

static void stop_threads(void)
{
    if (!running) {
        return;
    }
    pthread_mutex_lock(&pg_lock);
    stopping = 1;
    pthread_mutex_unlock(&pg_lock);
    pthread_cond_broadcast(&work_cond);
    uint64_t one = 1;
    ssize_t w = write(wake_fd, &one, sizeof one);
    (void)w;
    pthread_join(reader_thread, NULL);
    for (int i = 0; i < nworkers; i++) {
        pthread_join(worker_threads[i], NULL);
    }
    free(worker_threads);
    worker_threads = NULL;
    nworkers = 0;
    close(uffd);
    close(wake_fd);
    uffd = wake_fd = -1;
    pthread_mutex_lock(&pg_lock);
    stopping = 0;
    q_len = q_head = 0;
    pthread_mutex_unlock(&pg_lock);
    running = 0;
}

static int start_threads(void)
{
    if (running) {
        return 0;
    }
    int fd = uffd_open(&features);
    if (fd < 0) {
        return -fd;
    }
    int efd = eventfd(0, EFD_CLOEXEC);
    if (efd < 0) {
        int err = errno;
        close(fd);
        return err;
    }
    uffd = fd;
    wake_fd = efd;
    pg_errors_arm((features & PG_FEATURE_POISON) != 0);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int want = cpus < 2 ? 2 : cpus > 8 ? 8 : (int)cpus;
    worker_threads = calloc((size_t)want, sizeof(pthread_t));
    int err = worker_threads == NULL ? ENOMEM : spawn(&reader_thread, reader_main);
    if (err) {
        free(worker_threads);
        worker_threads = NULL;
        close(fd);
        close(efd);
        uffd = wake_fd = -1;
        return err;
    }
    running = 1;
    for (int i = 0; i < want; i++) {
        if (spawn(&worker_threads[i], worker_main) != 0) {
            break;
        }
        nworkers++;
    }
    if (nworkers == 0) {
        stop_threads();
        return EAGAIN;
    }
    return 0;
}

static int register_range(pg_array *a)
{
    struct uffdio_register r = {.range = {.start = (uintptr_t)a->base, .len = a->map_bytes},
                                .mode = UFFDIO_REGISTER_MODE_MISSING |
                                        (a->writable ? UFFDIO_REGISTER_MODE_WP : 0)};
    return ioctl(uffd, UFFDIO_REGISTER, &r) == 0 ? 0 : errno;
}

/* ---- arrays ---- */

static void array_free(pg_array *a)
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
        array_free(a);
        return ENOMEM;
    }
    a->base = mmap(NULL, a->map_bytes, writable ? PROT_READ | PROT_WRITE : PROT_READ,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (a->base == MAP_FAILED) {
        int err = errno;
        array_free(a);
        return err;
    }
    madvise(a->base, a->map_bytes, MADV_NOHUGEPAGE); /* fills install small pages */
    pthread_mutex_lock(&life_lock);
    int err = start_threads();
    if (err == 0 && (err = register_range(a)) == 0) {
        pthread_mutex_lock(&pg_lock);
        a->next = arrays;
        arrays = a;
        narrays++;
        pthread_mutex_unlock(&pg_lock);
    }
    else if (narrays == 0) {
        stop_threads();
    }
    pthread_mutex_unlock(&life_lock);
    if (err) {
        munmap(a->base, a->map_bytes);
        array_free(a);
        return err;
    }
    *out = a;
    return 0;
}

/* Takes `a` out of the pager (life_lock held): no new fault reaches it, the fills queued for it
 * are waited for, and its range is unregistered.  Whether it was the last array. */
static int withdraw(pg_array *a)
{
    pthread_mutex_lock(&pg_lock);
    a->dead = 1;
    for (pg_array **p = &arrays; *p != NULL; p = &(*p)->next) {
        if (*p == a) {
            *p = a->next;
            break;
        }
    }
    while (a->inflight > 0) {
        pthread_cond_wait(&pg_idle_cond, &pg_lock);
    }
    narrays--;
    int last = narrays == 0;
    pthread_mutex_unlock(&pg_lock);
    if (uffd >= 0) {
        struct uffdio_range r = {.start = (uintptr_t)a->base, .len = a->map_bytes};
        ioctl(uffd, UFFDIO_UNREGISTER, &r);
    }
    return last;
}

/* The last view is gone: wait for the fills queued for it, then unregister and unmap. */
void oc_pager_destroy(pg_array *a)
{
    pthread_mutex_lock(&life_lock);
    int last = withdraw(a);
    munmap(a->base, a->map_bytes);
    if (a->node != NULL) {
        oc_release(a->node, (int64_t)atomic_load(&a->charged_bytes));
    }
    if (last) {
        stop_threads();
    }
    pthread_mutex_unlock(&life_lock);
    array_free(a);
}

char *oc_pager_base(pg_array *a) { return a->base; }
size_t oc_pager_data_bytes(pg_array *a) { return a->data_bytes; }
int oc_pager_writable(pg_array *a) { return a->writable; }

void oc_pager_stats(pg_array *a, long long out[12])
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
        return evict_lru(a->node, (size_t)-1, a);
    }
    return 0;
}

/* Queues fills of units [first, last) that are not resident yet (read-ahead on request). */
void oc_pager_prefetch(pg_array *a, size_t first, size_t last)
{
    int queued = 0;
    pthread_mutex_lock(&pg_lock);
    for (size_t u = first; u < last && u < a->nunits; u++) {
        if (a->state[u] == U_EMPTY && enqueue(a, u, 1) == 0) {
            a->state[u] = U_FILLING;
            queued = 1;
        }
    }
    pthread_mutex_unlock(&pg_lock);
    if (queued) {
        pthread_cond_broadcast(&work_cond);
    }
}

/* ---- fork ---- */

void oc_pager_atfork(int phase)
{
    if (phase == OC_FORK_PREPARE) {
        pthread_mutex_lock(&life_lock);
        pthread_mutex_lock(&pg_lock);
        return;
    }
    if (phase == OC_FORK_CHILD) {
        /* The parent's threads did not come along, and its descriptor serves its own address
         * space: the child makes its own and registers every range again. */
        pthread_cond_init(&work_cond, NULL);
        pthread_cond_init(&pg_idle_cond, NULL);
        if (running) {
            close(uffd);
            close(wake_fd);
            uffd = wake_fd = -1;
            free(worker_threads);
            worker_threads = NULL;
            nworkers = 0;
            running = 0;
            stopping = 0;
            q_len = q_head = 0;
            atomic_store(&oc_pager_threads, 0);
        }
        for (pg_array *a = arrays; a != NULL; a = a->next) {
            a->inflight = 0;
            a->pinned = 0;
            for (size_t u = 0; u < a->nunits; u++) {
                if (a->state[u] == U_FILLING || a->state[u] == U_EVICTING) {
                    a->state[u] = U_EMPTY; /* refilled on touch; pages present are kept */
                }
                else if (a->spill && a->state[u] == U_CLEAN) {
                    /* fork cleared the write-protect bits of the child's pages: a write would
                     * go unseen, so a resident unit counts as written */
                    a->state[u] = U_DIRTY;
                }
                a->flags[u] = 0;
            }
        }
        pthread_mutex_unlock(&pg_lock);
        if (narrays > 0) {
            int err = start_threads();
            for (pg_array *a = arrays; a != NULL && err == 0; a = a->next) {
                err = register_range(a);
            }
            if (err) {
                fprintf(stderr,
                        "oocarray: a forked child cannot serve its chunk-backed arrays (%s); "
                        "their pages not yet filled are made inaccessible\n",
                        strerror(err));
                for (pg_array *a = arrays; a != NULL; a = a->next) {
                    for (size_t u = 0; u < a->nunits; u++) {
                        if (a->state[u] == U_EMPTY) {
                            mprotect(a->base + u * a->unit_bytes, unit_len(a, u), PROT_NONE);
                        }
                    }
                }
            }
        }
        pthread_mutex_unlock(&life_lock);
        return;
    }
    pthread_mutex_unlock(&pg_lock);
    pthread_mutex_unlock(&life_lock);
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
        array_free(a);
        return ENOMEM;
    }
    char *fresh = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (fresh == MAP_FAILED) {
        int err = errno;
        array_free(a);
        return err;
    }
    madvise(fresh, bytes, MADV_NOHUGEPAGE); /* fills install small pages */
    /* set before the range is published: a fault from another thread may fill at once */
    a->fd = fd;
    a->table = table;
    atomic_store(&a->file_end, file_end);
    atomic_store(&a->stored_bytes, stored);
    pthread_mutex_lock(&life_lock);
    int err = start_threads();
    if (err == 0 && !(features & UFFD_FEATURE_EVENT_REMAP)) {
        err = ENOTSUP;
    }
    if (err == 0) {
        a->base = fresh;
        err = register_range(a);
    }
    if (err == 0) {
        /* listed first: a fault at `data` reaches the reader as soon as the range is there */
        pthread_mutex_lock(&pg_lock);
        a->base = data;
        a->next = arrays;
        arrays = a;
        narrays++;
        pthread_mutex_unlock(&pg_lock);
        if (mremap(fresh, bytes, bytes, MREMAP_MAYMOVE | MREMAP_FIXED, data) == MAP_FAILED) {
            err = errno;
            pthread_mutex_lock(&pg_lock);
            for (pg_array **p = &arrays; *p != NULL; p = &(*p)->next) {
                if (*p == a) {
                    *p = a->next;
                    break;
                }
            }
            narrays--;
            pthread_mutex_unlock(&pg_lock);
            struct uffdio_range r = {.start = (uintptr_t)fresh, .len = bytes};
            ioctl(uffd, UFFDIO_UNREGISTER, &r);
        }
    }
    if (err && narrays == 0) {
        stop_threads();
    }
    pthread_mutex_unlock(&life_lock);
    if (err) {
        munmap(fresh, bytes);
        a->fd = -1; /* table and fd stay the caller's */
        a->table = NULL;
        array_free(a);
        return err;
    }
    *out = a;
    return 0;
}

/* The region is brought back (keep_pages: every unit is resident; the range becomes ordinary
 * anonymous memory) or freed (its mapping goes with the region).  Closes the file. */
void oc_pager_disown(pg_array *a, int keep_pages)
{
    if (keep_pages && uffd >= 0) {
        pg_uffd_protect(a->base, a->map_bytes, 0); /* no write-protect bit is left behind */
    }
    pthread_mutex_lock(&life_lock);
    int last = withdraw(a);
    oc_release(a->node, (int64_t)atomic_load(&a->charged_bytes));
    oc_disk_unreserve((size_t)atomic_load(&a->file_end));
    if (last) {
        stop_threads();
    }
    pthread_mutex_unlock(&life_lock);
    array_free(a);
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
            if (st == U_EMPTY && enqueue(a, u, 1) == 0) {
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
            pthread_cond_broadcast(&work_cond);
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

/* Budget pressure with nothing clean to drop (pager workers, from charge()): the least
 * recently filled dirty units of spill arrays and r+ store arrays counted on `node` are
 * written back, so that they can be dropped.  The bytes made clean; 0 when there are none, or
 * the disk refused (the unit stays dirty and in RAM, counted over the budget; a store array
 * is not tried again for a moment, and the failure is kept for `writeback_error`). */
static size_t write_back_lru(oc_node *node, size_t want)
{
    size_t done = 0;
    pid_t me = getpid();
    long long now = pg_now_ns();
    while (done < want) {
        pthread_mutex_lock(&pg_lock);
        pg_array *best = NULL;
        size_t bu = 0;
        for (pg_array *a = arrays; a != NULL; a = a->next) {
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
    return (long long)evict_lru(a->node, (size_t)-1, a);
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
    force_count(node, (int64_t)charged);
    oc_node_decref(old);
}
