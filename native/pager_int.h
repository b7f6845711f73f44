/*
 * The pager's insides, shared by the files of the pager: pager.c (the descriptor, the queue,
 * the threads, fork), pager_reader.c (the fault reader), pager_fill.c (the fill workers),
 * pager_evict.c (budget and eviction), pager_arrays.c (arrays made and withdrawn),
 * pager_errors.c (units that cannot be filled), pager_wb.c (write-back: the native writer's
 * glue, the store's begin/end/abort protocol, and chunk moves), pager_spill.c (compressed
 * spill's arrays), and pager_remote.c and pager_feeder.c (arrays in object stores, which also
 * share pager_remote.h).  Not for any other file: they go through the oc_pager_* functions.
 */
#ifndef OC_PAGER_INT_H
#define OC_PAGER_INT_H

#include "oc_core.h"
#include "oc_chunks.h"
#include "oc_pager.h"

#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/types.h>

/* Newer than the build machine's kernel headers (Linux 6.6), checked at run time. */
#define PG_FEATURE_POISON ((uint64_t)1 << 14)
struct pg_uffdio_poison {
    struct uffdio_range range;
    uint64_t mode;
    int64_t updated;
};
#define PG_UFFDIO_POISON _IOWR(UFFDIO, 0x08, struct pg_uffdio_poison)

enum { U_EMPTY, U_FILLING, U_CLEAN, U_DIRTY, U_EVICTING, U_FAILED };
#define F_WRITE 1 /* a write-protect fault came while the unit was being filled */
#define F_WB 2    /* being written back: clean, but not to be dropped until its chunks are stored */
#define F_PARTIAL 4 /* U_FAILED, read-only: its readable pages are installed and counted */

/* A chunk its store is rewriting (HDF5 may move it in the file): fills copy its new bytes. */
typedef struct pg_move pg_move;
struct pg_move {
    pg_move *next;
    uint64_t id;
    size_t chunk;
    size_t n;
    int refs; /* the store's, and each fill copying from it; under `pg_lock` */
    char data[];
};

struct pg_array { /* typedef'd in oc_core.h */
    char *base;
    size_t map_bytes;  /* page multiple */
    size_t data_bytes; /* the array's bytes */
    size_t unit_bytes;
    size_t nunits;
    size_t chunk_bytes;
    size_t nchunks;
    int codec;
    int writable;
    int spill;     /* compressed spill of a manager's region (zspill.c): the range is borrowed */
    int fd;        /* the file holding every chunk (spill, HDF5), else -1: paths opened per fill */
    int pinned;    /* spill: no unit is evicted (a write-back or a bring-back is running) */
    int readahead; /* units read ahead after a sequential fault */
    char **paths;
    int npaths;
    int64_t *table; /* per chunk: path index (-1 absent), offset, stored bytes (-1: the file);
                       under `pg_lock` (moves and spill write-backs change it) */
    pg_move *moves;    /* chunks being rewritten by their store, newest first */
    uint64_t move_gen; /* changes when a move begins or ends: a fill that overlapped one retries */
    char *fill;     /* one element's fill bytes */
    size_t fill_n;
    int fill_zero;
    uint8_t *state; /* per unit, under `pg_lock` */
    uint8_t *flags;
    size_t *ring; /* resident units in fill order (one entry each), for eviction */
    size_t ring_head, ring_len;
    uint64_t *stamp;
    oc_node *node; /* holds a reference; resident units are counted on it */
    pid_t pid;     /* the process that may write dirty units back */
    long long last_fault;
    size_t hinted; /* chunks below this were named to the kernel ahead of their fills; pg_lock */
    int inflight; /* queued or running jobs, evictions */
    int dead;
    pg_array *next;
    atomic_llong file_end, stored_bytes; /* spill: bytes written to fd, and those in use */
    atomic_llong fills, zero_fills, readaheads, evictions, failures, faults, decoded_bytes,
        resident_bytes, charged_bytes;
    char error[320];
    char **unit_errors; /* per failed unit, why (allocated at the first failure) */
    /* r+ over zarr chunk files (writeback.c): dirty units are written back natively.  0 for
     * an r+ array over HDF5 (fd >= 0): its store writes it (begin/end/abort_writeback) */
    int wb_native;
    oc_wb_store wb;
    long long wb_retry_ns; /* after a failed write-back under pressure, none before this */
    atomic_llong writebacks, wb_failures;
    atomic_llong given_reads, given_bytes; /* remote: chunks read from bytes handed over; held */
    char wb_error[400]; /* the last failed write-back under pressure, under `pg_lock` */
    pg_remote *remote;  /* chunks fetched on demand by a feeder process (pager_remote.c) */
};

/* pager.c: the descriptor, the arrays, the queue and the threads */
typedef struct {
    pg_array *a;
    size_t unit;
    int ahead;
} pg_job;
extern pthread_mutex_t pg_lock;      /* arrays, unit states and flags, tables, moves, the queue */
extern pthread_mutex_t pg_life_lock; /* starting and stopping the threads */
extern pthread_cond_t pg_work_cond;  /* a job was queued, or the threads are stopping */
extern pthread_cond_t pg_idle_cond;  /* broadcast when a job, an eviction or a write-back ends */
extern int pg_uffd;                  /* the userfaultfd, -1 while no array is registered */
extern int pg_wake_fd;               /* an eventfd that wakes the reader to stop */
extern uint64_t pg_features;         /* the features the descriptor was granted */
extern pg_array *pg_arrays;          /* every array, newest first; pg_lock */
extern int pg_narrays;
extern pg_job *pg_queue; /* a ring of fills waiting for a worker; pg_lock */
extern size_t pg_q_head, pg_q_len, pg_q_cap;
extern int pg_stopping;
extern uint64_t pg_fill_seq; /* stamps of fills, for the least recently filled */
int pg_uffd_protect(char *p, size_t n, int on); /* write-protect (on) or not; 0 or errno; not
                                                  * for the reader thread */
int pg_protect_once(char *p, size_t n, int on); /* one try: EAGAIN is the caller's (the reader) */
void pg_eagain_pause(void); /* before an ioctl refused with EAGAIN is tried again */
void pg_wake_range(char *p, size_t n);      /* faults waiting in the range come again */
void pg_uffd_wake(char *p, size_t n); /* the same, and nothing while no descriptor is open */
int pg_enqueue(pg_array *a, size_t unit, int ahead); /* pg_lock held; 0 or -1 */
pg_array *pg_find(uintptr_t addr); /* the array holding addr, or NULL; pg_lock held */
int pg_can_poison(void);
int pg_start_threads(void); /* pg_life_lock held; 0 or errno */
void pg_stop_threads(void); /* pg_life_lock held */
int pg_register_range(pg_array *a);

/* The bytes of unit u (the last unit may be short). */
static inline size_t unit_len(pg_array *a, size_t u)
{
    size_t start = u * a->unit_bytes;
    return a->map_bytes - start < a->unit_bytes ? a->map_bytes - start : a->unit_bytes;
}

/* pager_reader.c */
void *pg_reader_main(void *arg);
/* pager_fill.c */
void *pg_worker_main(void *arg);
/* pager_evict.c: the budget */
void pg_force_count(oc_node *n, int64_t bytes); /* counted even over the budget */
void pg_charge(pg_array *a, size_t bytes);     /* counted, room made by dropping units */
size_t pg_evict_lru(oc_node *node, size_t want, pg_array *only);
size_t pg_write_back_lru(oc_node *node, size_t want);
void pg_ring_push(pg_array *a, size_t u);
/* pager_arrays.c */
void pg_array_free(pg_array *a);
/* pager_remote.c: chunk c of an array paged from an object store, fetched into `path` by the
 * feeder: 0 when the file is there, 1 when the chunk was never written, 2 with *given (held:
 * pg_remote_done after decoding) when its bytes were handed over in memory, -1 with a
 * message */
typedef struct pg_given pg_given;
int pg_remote_wait(pg_array *a, size_t c, const char *path, pg_given **given, char *err,
                   size_t err_n);
void pg_remote_done(pg_array *a, pg_given *g);
const char *pg_given_bytes(const pg_given *g, size_t *n);
void pg_remote_note(pg_array *a, size_t c); /* a fill reads chunk c now */
void pg_remote_free(pg_array *a);
void pg_remote_atfork(int phase); /* pager_feeder.c: pg_lock held */
int pg_withdraw(pg_array *a);
/* pager_errors.c */
extern atomic_int pg_failures_seen;
void pg_errors_arm(int can_poison);
int oc_pager_errors_armed(void);
void oc_pager_drop_failed(void);

/* pager_wb.c */
void pg_move_release(pg_move *m);
int pg_write_back_unit(pg_array *a, size_t u, int *chunks, char *msg, size_t msg_n);
void pg_note_write_back(pg_array *a, int err, const char *msg);
long long pg_now_ns(void);

#endif
