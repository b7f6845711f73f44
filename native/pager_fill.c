/*
 * The pager's workers: each decodes a unit into its staging buffer and installs it with one
 * ioctl, which wakes the threads waiting on it; a unit that cannot be decoded is poisoned.
 */
#include "pager_int.h"
#include "oc_regions.h"
#include "oc_codecs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>


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
    char why[256];
    /* a spill's last chunk is as long as the data left (a zarr or HDF5 chunk is always whole) */
    size_t cn = a->spill && cs + C > a->data_bytes ? a->data_bytes - cs : C;
    int codec = a->codec;
    if (OC_CODEC_KIND(codec) == OC_CODEC_H5) {
        codec = oc_h5_masked(codec, OC_CHUNK_MASK(t[0])); /* the filters this chunk skipped */
    }
    if (a->remote != NULL) {
        pg_remote_note(a, c);
    }
    int fd = a->fd >= 0 ? a->fd : open(a->paths[path], O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT && a->remote != NULL) { /* not fetched yet: ask the feeder */
        pg_given *given = NULL;
        int got = pg_remote_wait(a, c, a->paths[path], &given, err, err_n);
        if (got == 2) { /* handed over in memory */
            size_t n;
            const char *bytes = pg_given_bytes(given, &n);
            oc_source mem = {.fd = -1, .path = NULL, .mem = bytes, .mem_len = (int64_t)n};
            int rc = oc_decode(codec, &mem, 0, (int64_t)n, cn, lo - cs, d, hi - lo, why, sizeof why);
            pg_remote_done(a, given);
            atomic_fetch_add(&a->given_reads, 1);
            if (rc != 0) {
                snprintf(err, err_n, "chunk %zu (as fetched from the object store) cannot be decoded: %s",
                         c, why);
                return -1;
            }
            return 0;
        }
        if (got != 0) {
            if (got == 1) {
                fill_pattern(a, d, lo, hi);
            }
            return got;
        }
        fd = open(a->paths[path], O_RDONLY | O_CLOEXEC);
    }
    if (fd < 0) {
        if (errno == ENOENT) { /* a chunk never written holds the fill value */
            fill_pattern(a, d, lo, hi);
            return 1;
        }
        snprintf(err, err_n, "chunk %zu: cannot open %s: %s", c, where, strerror(errno));
        return -1;
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
        if (ioctl(pg_uffd, UFFDIO_COPY, &c) == 0) {
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
    if (pg_features & PG_FEATURE_POISON) {
        for (size_t off = 0; off < len; off += page) {
            struct pg_uffdio_poison p = {.range = {.start = (uintptr_t)(dst + off), .len = page}};
            while (ioctl(pg_uffd, PG_UFFDIO_POISON, &p) != 0 && errno != EEXIST) {
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
    pg_wake_range(dst, len);
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
        if (pg_evict_lru(node, bytes, NULL) == 0 && pg_write_back_lru(node, bytes) == 0) {
            pg_force_count(node, (int64_t)bytes);
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
        pg_charge(a, len);
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
                while (ioctl(pg_uffd, UFFDIO_ZEROPAGE, &z) != 0 && errno == EAGAIN) {
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
        a->stamp[u] = ++pg_fill_seq;
        pg_ring_push(a, u);
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

/* The chunks a read-ahead fill hints to the kernel: at most this many at once. */
#define PG_HINT_MAX 16

typedef struct {
    int64_t t[3]; /* the chunk's table entry: path number, offset, stored bytes */
} pg_hint;

/* With a read-ahead fill of unit u queued (pg_lock held): the chunks of the window after the
 * one being read ahead that were not hinted yet, copied from the table, so that the worker can
 * tell the kernel of their bytes (POSIX_FADV_WILLNEED) before decoding.  A cold sequential scan
 * then has the next window's reads in flight while this one decodes, rather than one read per
 * decoding worker.  Read-only chunk files only: a spill or an r+ array moves its chunks. */
static int hints_for(pg_array *a, size_t u, pg_hint *out)
{
    if (a->writable || a->spill || a->remote != NULL || a->readahead <= 0) {
        return 0;
    }
    size_t C = a->chunk_bytes;
    size_t from = (u + 1) * a->unit_bytes / C;
    size_t to = ((u + 1 + (size_t)a->readahead) * a->unit_bytes + C - 1) / C;
    if (a->hinted > to) {
        a->hinted = from; /* a scan begun again behind the last: its chunks may be cold again */
    }
    if (from < a->hinted) {
        from = a->hinted;
    }
    if (to > a->nchunks) {
        to = a->nchunks;
    }
    if (to > from + PG_HINT_MAX) {
        to = from + PG_HINT_MAX;
    }
    int n = 0;
    for (size_t c = from; c < to; c++) {
        memcpy(out[n++].t, &a->table[3 * c], sizeof out[0].t);
    }
    if (to > a->hinted) {
        a->hinted = to;
    }
    return n;
}

/* Tells the kernel that the hinted chunks' bytes are read soon: a hint, whose failures are
 * ignored (a chunk never written has no file). */
static void give_hints(pg_array *a, const pg_hint *hints, int n)
{
    for (int i = 0; i < n; i++) {
        const int64_t *t = hints[i].t;
        if (t[0] < 0 || t[1] < 0) {
            continue;
        }
        off_t length = t[2] < 0 ? 0 : (off_t)t[2];
        if (a->fd >= 0) {
            (void)posix_fadvise(a->fd, (off_t)t[1], length, POSIX_FADV_WILLNEED);
            continue;
        }
        int64_t path = OC_CHUNK_PATH(t[0]);
        if (path >= a->npaths) {
            continue;
        }
        int fd = open(a->paths[path], O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            (void)posix_fadvise(fd, (off_t)t[1], length, POSIX_FADV_WILLNEED);
            close(fd);
        }
    }
}

void *pg_worker_main(void *arg)
{
    (void)arg;
    char *stage = NULL;
    size_t stage_n = 0;
    for (;;) {
        pthread_mutex_lock(&pg_lock);
        if (pg_q_len == 0 && !pg_stopping && stage != NULL) {
            /* Nothing queued: the scratch goes back to the system until the next fill. */
            pthread_mutex_unlock(&pg_lock);
            oc_scratch_drop(&stage, &stage_n);
            oc_chunk_state_release_mine();
            oc_h5_state_release_mine();
            pthread_mutex_lock(&pg_lock);
        }
        while (pg_q_len == 0 && !pg_stopping) {
            pthread_cond_wait(&pg_work_cond, &pg_lock);
        }
        if (pg_stopping) {
            pthread_mutex_unlock(&pg_lock);
            break;
        }
        pg_job job = pg_queue[pg_q_head];
        pg_q_head = (pg_q_head + 1) % pg_q_cap;
        pg_q_len--;
        int dead = job.a->dead;
        if (dead) {
            job.a->state[job.unit] = U_EMPTY;
        }
        pg_hint hints[PG_HINT_MAX];
        int nhints = !dead && job.ahead ? hints_for(job.a, job.unit, hints) : 0;
        pthread_mutex_unlock(&pg_lock);
        if (!dead) {
            if (job.ahead) {
                atomic_fetch_add(&job.a->readaheads, 1);
            }
            give_hints(job.a, hints, nhints);
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
