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
 * starts its own threads; units not yet filled are filled in the child from the store (for
 * an array in an object store, through a feeder process of the child's own: pager_feeder.c).
 *
 * This file holds the descriptor, the queue, starting and stopping the threads, and fork; the
 * rest of the pager is in pager_reader.c (the fault reader), pager_fill.c (the workers),
 * pager_evict.c (budget and eviction), pager_arrays.c, pager_errors.c, pager_wb.c and
 * pager_spill.c, which share pager_int.h.
 */
#include "pager_int.h"

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

pthread_mutex_t pg_life_lock = PTHREAD_MUTEX_INITIALIZER; /* starting and stopping */
pthread_mutex_t pg_lock = PTHREAD_MUTEX_INITIALIZER; /* arrays, states, the queue */
pthread_cond_t pg_work_cond = PTHREAD_COND_INITIALIZER;
pthread_cond_t pg_idle_cond = PTHREAD_COND_INITIALIZER; /* a job or write-back is over */
int pg_uffd = -1;
int pg_wake_fd = -1;
uint64_t pg_features;
pg_array *pg_arrays;
int pg_narrays;
pg_job *pg_queue;
size_t pg_q_head, pg_q_len, pg_q_cap;
static pthread_t reader_thread;
static pthread_t *worker_threads;
static int nworkers;
static int running;
int pg_stopping;
uint64_t pg_fill_seq;
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

void pg_wake_range(char *p, size_t n)
{
    struct uffdio_range r = {.start = (uintptr_t)p, .len = n};
    ioctl(pg_uffd, UFFDIO_WAKE, &r);
}

/* For pager_spill.c: threads waiting on faults in [p, p + n) fault again; nothing while no
 * descriptor is open. */
void pg_uffd_wake(char *p, size_t n)
{
    if (pg_uffd >= 0) {
        pg_wake_range(p, n);
    }
}

/* While a non-cooperative event (the mremap of compressed spill) waits to be read, the
 * kernel refuses UFFDIO_COPY, ZEROPAGE and WRITEPROTECT with EAGAIN; only the reader reading
 * the event ends that.  So the reader never waits for such an ioctl (see pg_reader_main), and
 * the other threads pause before they try again. */
void pg_eagain_pause(void)
{
    struct timespec pause = {0, 100000};
    nanosleep(&pause, NULL);
}

int pg_protect_once(char *p, size_t n, int on)
{
    struct uffdio_writeprotect w = {.range = {.start = (uintptr_t)p, .len = n},
                                    .mode = on ? UFFDIO_WRITEPROTECT_MODE_WP : 0};
    return ioctl(pg_uffd, UFFDIO_WRITEPROTECT, &w) == 0 ? 0 : errno;
}

/* Not for the reader thread (see pg_eagain_pause). */
int pg_uffd_protect(char *p, size_t n, int on)
{
    int err;
    while ((err = pg_protect_once(p, n, on)) == EAGAIN) {
        pg_eagain_pause();
    }
    return err;
}

/* ---- the queue (lock held) ---- */

int pg_enqueue(pg_array *a, size_t unit, int ahead)
{
    if (pg_q_len == pg_q_cap) {
        size_t cap = pg_q_cap ? 2 * pg_q_cap : 256;
        pg_job *q = malloc(cap * sizeof *q);
        if (q == NULL) {
            return -1;
        }
        for (size_t i = 0; i < pg_q_len; i++) {
            q[i] = pg_queue[(pg_q_head + i) % pg_q_cap];
        }
        free(pg_queue);
        pg_queue = q;
        pg_q_cap = cap;
        pg_q_head = 0;
    }
    pg_queue[(pg_q_head + pg_q_len) % pg_q_cap] = (pg_job){a, unit, ahead};
    pg_q_len++;
    a->inflight++;
    return 0;
}

pg_array *pg_find(uintptr_t addr)
{
    for (pg_array *a = pg_arrays; a != NULL; a = a->next) {
        if (addr >= (uintptr_t)a->base && addr < (uintptr_t)a->base + a->map_bytes) {
            return a;
        }
    }
    return NULL;
}

int pg_can_poison(void) { return (pg_features & PG_FEATURE_POISON) != 0; }

/* ---- starting and stopping (pg_life_lock held) ---- */

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

void pg_stop_threads(void)
{
    if (!running) {
        return;
    }
    pthread_mutex_lock(&pg_lock);
    pg_stopping = 1;
    pthread_mutex_unlock(&pg_lock);
    pthread_cond_broadcast(&pg_work_cond);
    uint64_t one = 1;
    ssize_t w = write(pg_wake_fd, &one, sizeof one);
    (void)w;
    pthread_join(reader_thread, NULL);
    for (int i = 0; i < nworkers; i++) {
        pthread_join(worker_threads[i], NULL);
    }
    free(worker_threads);
    worker_threads = NULL;
    nworkers = 0;
    close(pg_uffd);
    close(pg_wake_fd);
    pg_uffd = pg_wake_fd = -1;
    pthread_mutex_lock(&pg_lock);
    pg_stopping = 0;
    pg_q_len = pg_q_head = 0;
    pthread_mutex_unlock(&pg_lock);
    running = 0;
}

int pg_start_threads(void)
{
    if (running) {
        return 0;
    }
    int fd = uffd_open(&pg_features);
    if (fd < 0) {
        return -fd;
    }
    int efd = eventfd(0, EFD_CLOEXEC);
    if (efd < 0) {
        int err = errno;
        close(fd);
        return err;
    }
    pg_uffd = fd;
    pg_wake_fd = efd;
    pg_errors_arm((pg_features & PG_FEATURE_POISON) != 0);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int want = cpus < 2 ? 2 : cpus > 8 ? 8 : (int)cpus;
    worker_threads = calloc((size_t)want, sizeof(pthread_t));
    int err = worker_threads == NULL ? ENOMEM : spawn(&reader_thread, pg_reader_main);
    if (err) {
        free(worker_threads);
        worker_threads = NULL;
        close(fd);
        close(efd);
        pg_uffd = pg_wake_fd = -1;
        return err;
    }
    running = 1;
    for (int i = 0; i < want; i++) {
        if (spawn(&worker_threads[i], pg_worker_main) != 0) {
            break;
        }
        nworkers++;
    }
    if (nworkers == 0) {
        pg_stop_threads();
        return EAGAIN;
    }
    return 0;
}

int pg_register_range(pg_array *a)
{
    struct uffdio_register r = {.range = {.start = (uintptr_t)a->base, .len = a->map_bytes},
                                .mode = UFFDIO_REGISTER_MODE_MISSING |
                                        (a->writable ? UFFDIO_REGISTER_MODE_WP : 0)};
    return ioctl(pg_uffd, UFFDIO_REGISTER, &r) == 0 ? 0 : errno;
}

/* ---- fork ---- */

void oc_pager_atfork(int phase)
{
    if (phase == OC_FORK_PREPARE) {
        pthread_mutex_lock(&pg_life_lock);
        pthread_mutex_lock(&pg_lock);
        pg_remote_atfork(phase);
        return;
    }
    if (phase == OC_FORK_CHILD) {
        /* The parent's threads did not come along, and its descriptor serves its own address
         * space: the child makes its own and registers every range again. */
        pthread_cond_init(&pg_work_cond, NULL);
        pthread_cond_init(&pg_idle_cond, NULL);
        if (running) {
            close(pg_uffd);
            close(pg_wake_fd);
            pg_uffd = pg_wake_fd = -1;
            free(worker_threads);
            worker_threads = NULL;
            nworkers = 0;
            running = 0;
            pg_stopping = 0;
            pg_q_len = pg_q_head = 0;
            atomic_store(&oc_pager_threads, 0);
        }
        for (pg_array *a = pg_arrays; a != NULL; a = a->next) {
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
        pg_remote_atfork(phase); /* its own feeder, started when a fill needs it */
        pthread_mutex_unlock(&pg_lock);
        if (pg_narrays > 0) {
            int err = pg_start_threads();
            for (pg_array *a = pg_arrays; a != NULL && err == 0; a = a->next) {
                err = pg_register_range(a);
            }
            if (err) {
                fprintf(stderr,
                        "oocarray: a forked child cannot serve its chunk-backed arrays (%s); "
                        "their pages not yet filled are made inaccessible\n",
                        strerror(err));
                for (pg_array *a = pg_arrays; a != NULL; a = a->next) {
                    for (size_t u = 0; u < a->nunits; u++) {
                        if (a->state[u] == U_EMPTY) {
                            mprotect(a->base + u * a->unit_bytes, unit_len(a, u), PROT_NONE);
                        }
                    }
                }
            }
        }
        pthread_mutex_unlock(&pg_life_lock);
        return;
    }
    pg_remote_atfork(phase);
    pthread_mutex_unlock(&pg_lock);
    pthread_mutex_unlock(&pg_life_lock);
}
