/*
 * oocarray native core: the manager-node tree and the allocation headers.
 *
 * Every block the handler hands to NumPy is preceded by an oc_header (64 bytes, directly
 * before the data).  Small blocks come from malloc; large ones from anonymous page-aligned
 * mappings ("regions") whose first page holds the header, so the data pages can later be
 * remapped to a file at the same address.
 *
 * Counting is lock-free: each node keeps atomic counters; an allocation reserves its size on
 * every ancestor (reserve-and-rollback against max_bytes).  A node outlives every block it
 * owns, even after its Python manager closed: it is freed only when nothing refers to it and
 * its count of live blocks (kept in per-thread slots, so the hot path takes no lock) is zero.
 */
#ifndef OC_CORE_H
#define OC_CORE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>

#define NPY_NO_DEPRECATED_API NPY_2_0_API_VERSION
#define NPY_TARGET_VERSION NPY_2_0_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL oc_ARRAY_API
#ifndef OC_MODULE_MAIN
#define NO_IMPORT_ARRAY
#endif
#include <Python.h>
#include <numpy/arrayobject.h>

#define OC_HEADER_BYTES 64
#define OC_MAGIC 0x0CA11C0Du

/* header flags */
#define OC_FLAG_REGION 1u  /* block is a page-aligned mapping, not a malloc block */
#define OC_FLAG_KEPT 2u    /* intended escape: handed to the parent when the owner closes */
#define OC_FLAG_TRACED 4u  /* an allocation traceback was recorded for it */
#define OC_FLAG_SPILLED 8u /* region data moved to a temporary file, same address */
#define OC_FLAG_MAPPED 16u /* region data placed in a temporary file from the start */
#define OC_FLAG_ON_DISK (OC_FLAG_SPILLED | OC_FLAG_MAPPED)
#define OC_FLAG_ARENA 32u          /* bump-allocated in a workspace arena chunk */
#define OC_FLAG_CYCLE_EXTERNAL 64u /* made outside the arena during a workspace cycle */
/* The region's pages are a private (copy-on-write) mapping of its file: fork made it so, to
 * keep parent and child apart.  Alone: in RAM, every page copied out of the file. */
#define OC_FLAG_COW 128u
/* The region's data is a slot of the process's shared heap file, not a file of its own. */
#define OC_FLAG_HEAP 256u
/* Placed on disk small: its header page is in the heap slot too, one mapping in all (the
 * kernel's limit on mappings, vm.max_map_count, allows twice as many such arrays). */
#define OC_FLAG_HEADER_IN_FILE 512u
/* The region's data is compressed chunks in a file of its own, paged back on touch at the same
 * address (zspill.c, pager.c); the pager's array for it is kept in the header page. */
#define OC_FLAG_ZSPILLED 1024u

/* spill policies and locations of a node (see Manager) */
#define OC_SPILL_FAIL 0
#define OC_SPILL_MMAP 1
#define OC_SPILL_EVICT 2
#define OC_SPILL_ZARR 3 /* "evict", with the arrays moved out as compressed chunks */
#define OC_LOCATION_RAM 0
#define OC_LOCATION_MMAP 1
#define OC_LOCATION_ZARR 2 /* large arrays start as compressed chunks (none written yet) */

/* failure kinds recorded for the thread that got NULL */
#define OC_FAIL_NONE 0
#define OC_FAIL_BUDGET 1
#define OC_FAIL_CLOSED 2
#define OC_FAIL_OS 3
#define OC_FAIL_SPILL 4 /* over budget, and placing the block on disk failed too */
#define OC_FAIL_WORKSPACE_FULL 5 /* arena full and the workspace's spill policy is "fail" */

/* how moves keep concurrent writers waiting (moves.c) */
#define OC_GUARD_AUTO -1
#define OC_GUARD_SIGNAL 0    /* mprotect and a SIGSEGV handler: user-mode writers only */
#define OC_GUARD_UFFD_USER 1 /* userfaultfd, user-mode faults only */
#define OC_GUARD_UFFD 2      /* userfaultfd, kernel-mode faults too: system calls wait */

/* pthread_atfork phases, passed to each file's handler (fork.c) */
#define OC_FORK_PREPARE 0
#define OC_FORK_PARENT 1
#define OC_FORK_CHILD 2

/* workspace arena-full policies and debug modes */
#define OC_WS_EXTERNAL 0
#define OC_WS_REALLOCATE 1
#define OC_WS_FAIL 2
#define OC_WS_MODE_NORMAL 0
#define OC_WS_MODE_BYPASS 1
#define OC_WS_MODE_SPILL_EVERYTHING 2

/* Thread-locals read on the hot path: initial-exec avoids a __tls_get_addr call per access. */
#define OC_TLS _Thread_local __attribute__((tls_model("initial-exec")))

typedef struct oc_node oc_node;
typedef struct oc_workspace oc_workspace;
typedef struct pg_array pg_array;

/* Cumulative counters are split into per-thread slots: a slot has a single writer (the thread
 * holding that index), so the hot path updates it without a locked instruction.  Readers sum
 * the slots; threads beyond OC_THREAD_SLOTS share the last slot with atomic adds. */
#define OC_THREAD_SLOTS 64

typedef struct {
    _Alignas(64) atomic_int_fast64_t total_bytes;
    atomic_int_fast64_t total_count;
    atomic_int_fast64_t live_count; /* blocks allocated or moved in, less those freed or moved out */
} oc_slot;

struct oc_node {
    PyDataMem_Handler handler; /* ctx points back at this node */
    oc_node *parent;           /* holds one reference on the parent */
    uint64_t id;
    atomic_int_fast64_t refcnt; /* the Python object, the handler capsule, children, chunks */
    oc_node *next_zombie;       /* on the list of unreferenced nodes that still own blocks */
    atomic_int_fast64_t max_bytes;  /* < 0: unlimited */
    atomic_int closed;
    oc_workspace *workspace; /* NULL unless this node is a workspace */
    atomic_int spill_policy; /* OC_SPILL_* */
    atomic_int location;     /* OC_LOCATION_* */
    /* subtree counters: every block owned here or below */
    atomic_int_fast64_t current_bytes;
    atomic_int_fast64_t peak_bytes;
    /* own counters: blocks whose owner is this node */
    oc_slot *slots; /* OC_THREAD_SLOTS + 1 */
    atomic_int_fast64_t kept_count;
    atomic_int_fast64_t kept_bytes;
    atomic_int_fast64_t region_bytes;
    atomic_int_fast64_t region_count;
    /* own on-disk bytes (not counted in current_bytes, which is RAM) and moves */
    atomic_int_fast64_t spilled_bytes;
    atomic_int_fast64_t mapped_bytes;
    atomic_int_fast64_t spill_count;
    atomic_int_fast64_t spill_moved_bytes;
    atomic_int_fast64_t unspill_count;
    atomic_int_fast64_t unspill_moved_bytes;
    /* own compressed spill: logical bytes held as compressed chunks, and their bytes on disk */
    atomic_int_fast64_t compressed_bytes;
    atomic_int_fast64_t compressed_disk_bytes;
};

typedef struct oc_header {
    _Atomic(oc_node *) owner;
    size_t size;       /* bytes counted: exactly what NumPy asked for */
    uint64_t id;       /* allocation id, process-wide, increasing */
    atomic_uint flags;
    uint32_t magic;
    size_t map_bytes;  /* regions: length of the whole mapping, header page included */
    struct oc_header *prev, *next; /* regions: the registry list; arena blocks: prev = chunk */
    uint64_t cycle; /* workspace cycle the block was made in (0: none) */
} oc_header;

_Static_assert(sizeof(oc_header) == OC_HEADER_BYTES, "header must be 64 bytes");

typedef struct {
    int kind;
    int err;
    uint64_t node_id;      /* node whose handler was asked */
    uint64_t refused_id;   /* node whose budget refused */
    int64_t requested;
    int64_t limit;
    int64_t used;
} oc_failure;

/* node.c */
int oc_thread_slot(void);
void oc_count_allocation(oc_node *n, int64_t bytes, int64_t count);
int64_t oc_total_bytes(oc_node *n);
int64_t oc_total_count(oc_node *n);
oc_node *oc_node_new(oc_node *parent, int64_t max_bytes);
void oc_node_incref(oc_node *n);
void oc_node_decref(oc_node *n);
void oc_live_add(oc_node *n, int64_t count); /* a block's last access to its owner */
int64_t oc_live_count(oc_node *n);
void oc_sweep_zombies(void);
oc_node *oc_reserve(oc_node *n, int64_t bytes);
void oc_release(oc_node *n, int64_t bytes);
void oc_raise_peaks(oc_node *n);
oc_node *oc_common_ancestor(oc_node *a, oc_node *b);
oc_node *oc_reserve_until(oc_node *n, oc_node *stop, int64_t bytes);
void oc_release_until(oc_node *n, oc_node *stop, int64_t bytes);

/* scratch.c: decode, encode and staging buffers, each a mapping of its own, counted */
void *oc_scratch_map(size_t n);
void oc_scratch_unmap(void *p, size_t n);
char *oc_scratch_grow(char **buf, size_t *size, size_t n); /* at least n bytes, page aligned */
void oc_scratch_drop(char **buf, size_t *size);
long long oc_scratch_bytes(void);      /* every scratch byte mapped, zstd contexts included */
extern atomic_llong oc_scratch_total;
/* chunks.c: each thread's reader state (zstd contexts and buffers) */
void oc_scratch_release(void); /* idle threads' scratch and cached free regions */
void oc_chunk_states_release(void); /* idle ones now, busy ones when their call ends */
void oc_chunk_state_release_mine(void);
void oc_h5_state_release_mine(void); /* h5filters.c: this thread's HDF5 decode buffers */
size_t oc_chunk_state_bytes_mine(void);
void oc_zstd_pack_done(void); /* after oc_zstd_pack*: its output may be released again */
void oc_chunks_atfork(int phase);

/* regions.c: page-aligned mappings with the header in the page before the data */
size_t oc_page_bytes(void);
void *oc_region_map(size_t size, int zero, size_t *map_bytes);
void *oc_map_fresh(size_t data_bytes, size_t *map_bytes); /* data after one spare page */
void oc_region_unmap(oc_header *h, size_t cache_cap); /* cached if the cache stays <= cap */
void oc_registry_lock(void);
void oc_registry_unlock(void);
void oc_registry_link(oc_header *h);
void oc_registry_unlink(oc_header *h);
oc_header *oc_registry_first(void);
oc_header *oc_registry_next(oc_header *h);
extern atomic_size_t oc_region_cache_limit;
extern atomic_int oc_huge_pages; /* advise MADV_HUGEPAGE for large regions and arenas */
size_t oc_region_cache_bytes(void);
void oc_region_cache_trim(size_t keep_bytes);
void *oc_map_reserved(size_t data_bytes, size_t *map_bytes); /* data pages inaccessible, uncommitted */
void oc_regions_atfork(int phase);
static inline size_t oc_region_data_bytes(const oc_header *h) { return h->map_bytes - oc_page_bytes(); }
/* A region's header page has room before the header: the descriptor of its file lives there
 * (-1 while the region is in RAM), kept open for fork and for bringing the data back. */
static inline int *oc_region_fd(oc_header *h) { return (int *)((char *)h - sizeof(int)); }
/* Where the region's data starts in that file (0 for a file of its own). */
static inline uint64_t *oc_region_offset(oc_header *h) { return (uint64_t *)((char *)h - 16); }
static inline char *oc_block_data(oc_header *h) { return (char *)h + OC_HEADER_BYTES; }
static inline oc_header *oc_header_of(void *data) { return (oc_header *)((char *)data - OC_HEADER_BYTES); }
/* A compressed-spilled region's pager array, in the header page too. */
static inline pg_array **oc_region_pager(oc_header *h) { return (pg_array **)((char *)h - 24); }

/* files.c: temporary files and the disk space counted against max_spill_bytes */
int oc_set_spill_dir(const char *path);
extern atomic_int_fast64_t oc_spill_limit; /* < 0: unlimited */
extern atomic_int_fast64_t oc_spill_used;
int oc_open_reserved_file(size_t bytes); /* fd counted against max_spill_bytes, or -errno */
int oc_disk_reserve(size_t bytes);       /* against max_spill_bytes: 0 or ENOSPC */
void oc_disk_unreserve(size_t bytes);
int oc_open_unnamed_file(void);                              /* fd or -errno, no space reserved */
int oc_open_file(size_t bytes);                              /* fd or -errno, space reserved */
int oc_reserve_zeros(int fd, uint64_t offset, size_t bytes); /* 0 or errno (ENOSPC) */
int oc_pwrite_all(int fd, const char *data, size_t bytes, uint64_t offset); /* 0 or errno */
int oc_make_private(char *data, size_t bytes, int fd, uint64_t offset); /* copy-on-write file map */
void oc_files_atfork(int phase);

/* spill.c: same-address remapping, eviction */
int oc_map_region_to_file(oc_header *h);   /* registry lock held; errno value or 0 */
void *oc_map_small_on_disk(size_t data_bytes, size_t *map_bytes, int *err); /* data, or NULL */
int oc_spill_block(oc_header *h);          /* registry lock held; errno value or 0 */
int oc_unspill_block(oc_header *h);        /* registry lock held; errno value or 0 */
/* A freed on-disk block's file space, given back once its mapping is gone (a header kept in
 * the file must stay readable until then). */
typedef struct {
    int fd;
    uint64_t offset;
    size_t bytes;
    int heap;
    int shared_by_fork;
} oc_disk_space;
oc_disk_space oc_disk_release(oc_header *h); /* accounts the block; give the space after unmap */
void oc_disk_space_give(oc_disk_space space);
int oc_node_in_subtree(oc_node *n, oc_node *root);
int64_t oc_evict(oc_node *scope, int64_t need_bytes, int *err);
int oc_drop_disk_pages(void);
void oc_spill_atfork(int phase);

/* zspill.c: compressed spill */
extern atomic_int oc_zspill_enabled; /* set from Python when the pager may be used */
int oc_zspill_block(oc_header *h);                  /* registry lock held; errno or 0 */
int oc_zunspill_block(oc_header *h);                /* registry lock held; budget reserved */
int64_t oc_zspill_again(oc_header *h, int *err);    /* RAM released by dropping paged-in units */
void oc_zspill_forget(oc_header *h);                /* the region is being freed */
void oc_zspill_move(oc_header *h, oc_node *from, oc_node *to);
void *oc_zspill_new_region(oc_node *owner, size_t size, int *err); /* location="zarr" */
pg_array *oc_zspill_arena_new(char *base, size_t capacity, oc_node *node, int *err);
void oc_zspill_arena_reset(pg_array *a); /* between cycles: every unit dropped unencoded */
void oc_zspill_arena_free(pg_array *a, size_t capacity, oc_node *node);

/* heap.c: one shared file for small on-disk regions */
size_t oc_heap_slot_max_bytes(void);
int oc_heap_take(size_t bytes, int *fd, uint64_t *offset); /* 0 or errno */
void oc_heap_give(uint64_t offset, size_t bytes, int reuse);
void oc_heap_atfork(int phase);

/* moves.c: keeping writers waiting while a region's pages move */
typedef struct {
    char *data;
    size_t bytes;
    int mode;
    int slot;
} oc_guard;
int oc_guard_mode(void);
int oc_guard_request(int wanted);
void oc_guard_out_begin(oc_guard *g, char *data, size_t bytes);
void oc_guard_out_end(oc_guard *g, int failed);
int oc_guard_move_in(char *data, size_t bytes, int fd, uint64_t offset);
int oc_guard_populate_private(char *data, size_t bytes);
void oc_guard_atfork(int phase);

/* physical.c: max_physical_bytes at allocation time */
extern atomic_int_fast64_t oc_physical_limit; /* < 0: none */
void oc_physical_sample(int64_t resident_bytes);
int64_t oc_resident_unreclaimable(void);
int oc_physical_admit(int64_t size); /* 0: place the new block on disk to hold the limit */

/* fork.c */
void oc_fork_install(void);
extern atomic_int_fast64_t oc_forks_prepared;

/* workspace.c: arena chunks and cycles */
typedef struct oc_chunk {
    char *base;
    size_t capacity;
    size_t offset;
    atomic_int_fast64_t live; /* arena blocks not yet freed */
    atomic_int retired;       /* no longer the workspace's arena: unmapped when live is 0 */
    int on_disk;
    int fd;  /* the file behind an on-disk arena, else -1 */
    int cow; /* fork left it a copy-on-write mapping of its file */
    pg_array *pager; /* location="zarr": the pager's array over it (zspill.c), else NULL */
    struct oc_chunk *prev_on_disk, *next_on_disk;
    oc_node *node; /* holds a reference; the capacity is reserved on its budget chain */
} oc_chunk;

struct oc_workspace {
    oc_chunk *chunk;
    atomic_int in_cycle;
    atomic_uint_fast64_t cycle;
    int mode;
    int full_policy; /* OC_WS_* */
    int location;    /* OC_LOCATION_* */
    int arena_error; /* errno of the last arena that could not be made (0: none) */
    size_t cycle_requested;
    int cycle_overflowed;
    atomic_int_fast64_t external_live;
    atomic_int_fast64_t pinned_bytes;
    atomic_int_fast64_t pinned_chunks;
    int64_t reallocations;
    int64_t arena_allocations;
    int64_t external_allocations;
    int64_t spilled_allocations;
};

#define OC_WS_ORDINARY 0 /* oc_workspace_alloc's *handled: not the workspace's */
#define OC_WS_DONE 1     /* made in the arena, or refused (NULL) */
#define OC_WS_OUTSIDE 2  /* the cycle's, made the ordinary way then given to oc_workspace_outside */
void *oc_workspace_alloc(oc_node *node, size_t size, int zero, int *handled);
void oc_workspace_outside(oc_node *node, oc_header *h);
void oc_arena_block_free(oc_header *h);
void oc_workspace_block_freed(oc_header *h, oc_node *owner);
void oc_workspace_destroy(oc_node *node);
int oc_workspace_begin(oc_node *node, size_t arena_bytes);
void oc_workspace_end(oc_node *node, int64_t *arena_escapes, int64_t *external_escapes,
                      int64_t *requested, int *overflowed);
size_t oc_workspace_arena_bytes(oc_node *node);
void oc_workspace_atfork(int phase);

/* block.c */
oc_failure oc_take_failure(void);
void oc_record_failure(int kind, int err, oc_node *asked, oc_node *refused, int64_t requested);
uint64_t oc_next_alloc_id(void);

/* alloc.c */
oc_node *oc_handler_node_new(oc_node *parent, int64_t max_bytes); /* oc_node_new, with its handler */
extern atomic_size_t oc_large_threshold;
extern atomic_int oc_trace_enabled;
extern PyObject *oc_trace_alloc_cb;
extern PyObject *oc_trace_free_cb;
extern PyObject *oc_pressure_cb;
extern PyObject *oc_disk_refusal_cb; /* cb(node_id, refused_id, size, errno): at the failure */
int oc_is_our_handler(PyObject *capsule);
void oc_nodes_atfork(int phase);

/* chunks.c: reading and decoding chunks without the GIL */
void oc_shuffle8(const char *src, size_t n, char *dst);
void oc_unshuffle8(const char *src, size_t total, size_t skip, char *dst, size_t n);
int oc_zstd_pack_shuffled(const char *src, size_t n, int level, char **out, size_t *out_n);
int oc_zstd_pack(const char *src, size_t n, int level, int checksum, char **out, size_t *out_n);
PyObject *oc_py_read_chunks(PyObject *m, PyObject *args);
PyObject *oc_py_zstd_available(PyObject *m, PyObject *a);
PyObject *oc_py_zstd_write(PyObject *m, PyObject *args);
int oc_decode_range(int codec, int fd, int64_t offset, int64_t nbytes, size_t chunk_n, size_t skip,
                    char *dst, size_t n, char *err, size_t err_n);

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
void oc_pager_stats(pg_array *a, long long out[12]);
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
int oc_pager_native_writeback(pg_array *a);
int oc_pager_write_back(pg_array *a, size_t u, int *chunks, char *msg, size_t msg_n);
void oc_pager_writeback_error(pg_array *a, char *out, size_t n);

/* writeback.c: the chunks of a range of a chunk-backed array, encoded and written back */
typedef struct {
    char **paths;         /* the pager's chunk files */
    int npaths;
    const int64_t *table; /* the pager's table: per chunk, its path's index first */
    size_t nchunks, chunk_bytes, data_bytes;
    const char *fill; /* one element's fill bytes, for the last chunk's rows past the end */
    size_t fill_n;
    int codec, level, checksum; /* raw or zstd (oc_wb_codec_ok); zstd's level and checksum */
    int file_mode;              /* given to each new chunk file, as the store's writer does */
} oc_wb_store;
/* Writes every chunk starting in [start, start + len) of the array at base; 0 with *chunks
 * written, or errno with what failed in msg (chunks written before it stay written). */
int oc_wb_write_range(const oc_wb_store *s, const char *base, size_t start, size_t len, int *chunks,
                      char *msg, size_t msg_n);

#endif
