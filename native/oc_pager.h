/*
 * The pager's public API (pager*.c): chunk-backed ndarrays, whose pages are filled on touch
 * through userfaultfd, and compressed spill's borrowed ranges.  Its insides are pager_int.h.
 */
#ifndef OC_PAGER_H
#define OC_PAGER_H

#include "oc_core.h"

/* pager.c: chunk-backed ndarrays (pages filled on touch through userfaultfd) */
int oc_pager_check(int *write_protect, int *spill_ok); /* 0, or the errno of opening a kernel-mode uffd */
/* compressed spill (zspill.c) borrows the pager for a manager's region */
int oc_pager_adopt(pg_array **out, char *data, size_t bytes, int fd, int64_t *table, long long file_end,
                   long long stored, size_t unit_bytes, oc_node *node);
void oc_pager_disown(pg_array *a, int keep_pages);
int oc_pager_fill_all(pg_array *a);
long long oc_pager_spill_again(pg_array *a, int *err);
long long oc_pager_stored_bytes(pg_array *a);
size_t oc_pager_discard(pg_array *a, int fresh_file); /* dead contents dropped (pager_spill.c) */
/* pager_spill.c: one unit encoded and appended to fd, entry = (0, offset, stored bytes) */
int oc_zs_encode_append(int fd, atomic_llong *file_end, const char *src, size_t n, int64_t entry[3]);
int oc_pager_is_own(pg_array *a);
void oc_pager_set_node(pg_array *a, oc_node *node);
int oc_pager_create(pg_array **out, char **paths, int npaths, int64_t *table, size_t nchunks,
                    int codec, size_t chunk_bytes, size_t data_bytes, size_t unit_bytes,
                    char *fill, size_t fill_n, int writable, oc_node *node, int readahead, int fd);
void oc_pager_destroy(pg_array *a);
char *oc_pager_base(pg_array *a);
size_t oc_pager_data_bytes(pg_array *a);
int oc_pager_writable(pg_array *a);
void oc_pager_stats(pg_array *a, long long out[16]);
const char *oc_pager_error(pg_array *a);
size_t oc_pager_dirty(pg_array *a, size_t *out, size_t n);
int oc_pager_begin_writeback(pg_array *a, size_t u);
void oc_pager_end_writeback(pg_array *a, size_t u);
void oc_pager_abort_writeback(pg_array *a, size_t u);
/* A chunk being rewritten by its store (which may move it in its file): fills of it copy
 * these bytes until the move ends with its new table entry. */
uint64_t oc_pager_move_begin(pg_array *a, size_t chunk, const char *data, size_t n);
int oc_pager_move_end(pg_array *a, uint64_t id, const int64_t entry[3]);
size_t oc_pager_trim(pg_array *a);
void oc_pager_prefetch(pg_array *a, size_t first, size_t last);
void oc_pager_atfork(int phase);
/* pager_errors.c: a unit that cannot be filled raises in the Python thread that touched it */
int oc_pager_errors_init(void); /* GIL held, before the pager is used: 0, or -1 with an exception */
void oc_pager_take_fault(char *out, size_t n);
extern atomic_int oc_pager_threads;
/* r+ arrays over zarr chunk files: dirty units are written back natively (writeback.c), under
 * budget pressure and by flush(), each chunk whole (pager_wb.c).  r+ arrays over HDF5 are
 * written by their store, from Python: begin, the store's write, end or abort. */
int oc_pager_set_writeback(pg_array *a, int level, int checksum, int file_mode);
/* Chunks not on disk yet are asked of a feeder process (pager_feeder.c), started from this
 * (copied) the first time a fill needs one in this process: `argv[0]` (a path) run with
 * `argv` and `envp`, `config` written on its stdin, its stderr appended to `log`.  Before the
 * array is first touched; 0 or errno. */
typedef struct {
    char **argv, **envp;
    char *config;
    size_t config_n;
    char *log;
} oc_feeder_spec;
int oc_pager_set_remote(pg_array *a, const oc_feeder_spec *spec);
/* What names the array to oc_pager_stop_feeder: which kills and waits for its feeder (in this
 * process) and starts no other, before the array is destroyed (0, or ESRCH when no array has
 * that token any more); the requests made of feeders, and the feeders this process started. */
unsigned long long oc_pager_remote_token(pg_array *a);
int oc_pager_stop_feeder(unsigned long long token);
void oc_pager_remote_counts(pg_array *a, long long *asked, long long *started);
/* A remote array's chunks handed over in memory by the process that made it (see
 * pager_remote.c): chunk c's stored bytes [src, src + n), lent by `owner` (not copied, not
 * counted here: the lender counts them) until they are handed back, clean units dropped while
 * the node is over its budget (0; ENOSPC where none is left to drop; or errno); chunk c never
 * written (0 or errno); every chunk outside [lo, hi) let go; the chunk of the latest fill (-1:
 * none yet); and an eventfd (duplicated) written when the fills move to another chunk, the
 * sign that a lender follows them (-1: none does any more; 0 or errno). */
int oc_pager_remote_lend(pg_array *a, size_t c, const char *src, size_t n, void *owner);
int oc_pager_remote_absent(pg_array *a, size_t c);
void oc_pager_remote_keep(pg_array *a, size_t lo, size_t hi);
long long oc_pager_remote_pos(pg_array *a);
int oc_pager_remote_progress(pg_array *a, int fd);
/* The owners of bytes lent that no fill reads any more, of every array (those gone too), each
 * passed to give_back once, in the calling thread; the bytes handed back. */
size_t oc_pager_remote_spent(void (*give_back)(void *owner));
/* `bytes` counted on `node`: room made by dropping clean units of its paged arrays, least
 * recently filled first; counted over the budget where none is left (the bytes exist). */
void oc_pager_count_room(oc_node *node, int64_t bytes);
int oc_pager_native_writeback(pg_array *a);
int oc_pager_write_back(pg_array *a, size_t u, int *chunks, char *msg, size_t msg_n);
void oc_pager_writeback_error(pg_array *a, char *out, size_t n);

#endif
