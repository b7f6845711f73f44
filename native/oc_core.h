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
 *
 * This header holds what every component shares: the flags and constants, the node and the
 * header, and node.c's and block.c's functions.  Each component has a header of its own, which
 * a file includes where it uses that component: oc_regions.h, oc_files.h, oc_spill.h,
 * oc_workspace.h, oc_alloc.h, oc_chunks.h, oc_codecs.h and oc_pager.h (pager_int.h is the
 * pager's own, py_module.h the Python bindings').
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
typedef struct pg_remote pg_remote;

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
void oc_force_reserve(oc_node *n, int64_t bytes); /* counted even over a budget: bytes in use */
void oc_raise_peaks(oc_node *n);
oc_node *oc_common_ancestor(oc_node *a, oc_node *b);
oc_node *oc_reserve_until(oc_node *n, oc_node *stop, int64_t bytes);
void oc_release_until(oc_node *n, oc_node *stop, int64_t bytes);
void oc_nodes_atfork(int phase);

/* A block's data, and the header before it. */
static inline char *oc_block_data(oc_header *h) { return (char *)h + OC_HEADER_BYTES; }
static inline oc_header *oc_header_of(void *data) { return (oc_header *)((char *)data - OC_HEADER_BYTES); }

/* block.c */
oc_failure oc_take_failure(void);
void oc_record_failure(int kind, int err, oc_node *asked, oc_node *refused, int64_t requested);
uint64_t oc_next_alloc_id(void);

#endif
