/*
 * Same-address spill: a region's data pages are written to a private temporary file and the
 * file is mapped over the same address range (MAP_FIXED), so every ndarray keeps its pointer
 * and RAM is released; unspill copies the data into fresh anonymous pages and moves them into
 * place with mremap.  The files and their space come from files.c: reserved before any page
 * of a file mapping is written, so a full disk is an error code here, never SIGBUS later.
 *
 * Concurrent writes: while pages move, writers wait (moves.c), so no write is lost.
 *
 * Each on-disk region keeps its file open: a file of its own, or for small regions a slot of
 * the shared heap file (heap.c).  fork needs it: before a fork every on-disk region becomes a
 * private (copy-on-write) mapping of its file, so that neither process sees the other's later
 * writes (a shared mapping would hand them over); bringing data back into RAM reads the file.
 */
#include "oc_core.h"
#include "oc_regions.h"
#include "oc_files.h"
#include "oc_spill.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ---- where a region's data goes on disk: a slot of the heap file, or a file of its own ---- */

/* Space for `bytes` of a region's data, counted against max_spill_bytes: (fd, offset), and
 * whether it is a heap slot.  0 or an errno value. */
static int take_space_once(size_t bytes, int *fd, uint64_t *offset, int *heap)
{
    int err = oc_disk_reserve(bytes);
    if (err) {
        return err;
    }
    *heap = bytes <= oc_heap_slot_max_bytes();
    if (*heap) {
        err = oc_heap_take(bytes, fd, offset);
    }
    else {
        *offset = 0;
        *fd = oc_open_file(bytes);
        err = *fd < 0 ? -*fd : 0;
    }
    if (err) {
        oc_disk_unreserve(bytes);
    }
    return err;
}

/* As take_space_once; a full disk first takes back the heap's kept slots (heap.c). */
static int take_space(size_t bytes, int *fd, uint64_t *offset, int *heap)
{
    int err = take_space_once(bytes, fd, offset, heap);
    if (err == ENOSPC && oc_heap_drop_kept() > 0) {
        err = take_space_once(bytes, fd, offset, heap);
    }
    return err;
}

static void give_space(int fd, uint64_t offset, size_t bytes, int heap, int shared_by_fork)
{
    if (heap) {
        oc_heap_give(offset, bytes, !shared_by_fork);
    }
    else {
        close(fd);
    }
    oc_disk_unreserve(bytes);
}

/* Records where the region's data is on disk. */
static void place(oc_header *h, int fd, uint64_t offset, int heap, unsigned flag)
{
    *oc_region_fd(h) = fd;
    *oc_region_offset(h) = offset;
    atomic_fetch_and(&h->flags, ~(OC_FLAG_COW | OC_FLAG_HEAP)); /* a mapping of its own now */
    atomic_fetch_or(&h->flags, flag | (heap ? OC_FLAG_HEAP : 0u));
}

/* ---- moving blocks ---- */

int oc_node_in_subtree(oc_node *n, oc_node *root)
{
    for (; n != NULL; n = n->parent) {
        if (n == root) {
            return 1;
        }
    }
    return 0;
}

/* Maps fresh file space over the data pages of a region that holds no data yet. */
int oc_map_region_to_file(oc_header *h)
{
    size_t bytes = oc_region_data_bytes(h);
    int fd, heap;
    uint64_t offset;
    int err = take_space(bytes, &fd, &offset, &heap);
    if (err) {
        return err;
    }
    void *p = mmap(oc_block_data(h), bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, (off_t)offset);
    if (p == MAP_FAILED) {
        err = errno;
        give_space(fd, offset, bytes, heap, 0);
        return err;
    }
    place(h, fd, offset, heap, OC_FLAG_MAPPED);
    return 0;
}

/* A region of data_bytes whose header page and data are one mapping of a heap slot; the
 * header records where.  A freed slot still mapped is taken first, without a system call (its
 * data cleared when `zero`; a fresh slot is zeros already).  NULL with *err set when that is
 * not possible (too large, no space). */
void *oc_map_small_on_disk(size_t data_bytes, int zero, size_t *map_bytes, int *err)
{
    size_t page = oc_page_bytes();
    size_t bytes = page + data_bytes;
    if (bytes > oc_heap_slot_max_bytes()) {
        *err = EFBIG;
        return NULL;
    }
    int fd, heap = 1;
    uint64_t offset;
    char *base = NULL;
    if (oc_disk_reserve(bytes) == 0) {
        if (!oc_heap_reuse(bytes, &base, &fd, &offset)) {
            oc_disk_unreserve(bytes);
        }
        else if (zero) {
            memset(base + page, 0, data_bytes);
        }
    }
    if (base == NULL) {
        *err = take_space(bytes, &fd, &offset, &heap);
        if (*err) {
            return NULL;
        }
        base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)offset);
        if (base == MAP_FAILED) {
            *err = errno;
            give_space(fd, offset, bytes, heap, 0);
            return NULL;
        }
    }
    oc_header *h = (oc_header *)(base + page - OC_HEADER_BYTES);
    atomic_init(&h->flags, 0);
    place(h, fd, offset, heap, OC_FLAG_MAPPED | OC_FLAG_HEADER_IN_FILE);
    *map_bytes = bytes;
    return base + page;
}

int oc_keep_small_on_disk(oc_header *h, oc_disk_space space)
{
    unsigned flags = atomic_load(&h->flags);
    size_t page = oc_page_bytes();
    /* Only a slot mapped whole, shared with no other process: its mapping is the slot. */
    if (!space.heap || space.shared_by_fork || (flags & OC_FLAG_COW) ||
        (flags & (OC_FLAG_MAPPED | OC_FLAG_HEADER_IN_FILE)) != (OC_FLAG_MAPPED | OC_FLAG_HEADER_IN_FILE) ||
        h->map_bytes != space.bytes) {
        return 0;
    }
    if (!oc_heap_keep(oc_block_data(h) - page, space.offset, space.bytes)) {
        return 0;
    }
    oc_disk_unreserve(space.bytes);
    return 1;
}

/* The part of an on-disk region that its file backs: the data, or with the header page. */
static char *disk_start(oc_header *h)
{
    int in_file = (atomic_load(&h->flags) & OC_FLAG_HEADER_IN_FILE) != 0;
    return oc_block_data(h) - (in_file ? oc_page_bytes() : 0);
}

static size_t disk_bytes(oc_header *h)
{
    int in_file = (atomic_load(&h->flags) & OC_FLAG_HEADER_IN_FILE) != 0;
    return oc_region_data_bytes(h) + (in_file ? oc_page_bytes() : 0);
}

int oc_spill_block(oc_header *h)
{
    unsigned flags = atomic_load(&h->flags);
    if (!(flags & OC_FLAG_REGION) || (flags & (OC_FLAG_ON_DISK | OC_FLAG_ZSPILLED))) {
        return 0;
    }
    if (atomic_load(&atomic_load(&h->owner)->spill_policy) == OC_SPILL_ZARR &&
        atomic_load(&oc_zspill_enabled) && !(flags & OC_FLAG_COW)) {
        return oc_zspill_block(h);
    }
    char *data = oc_block_data(h);
    size_t bytes = oc_region_data_bytes(h);
    int fd, heap;
    uint64_t offset;
    int err = take_space(bytes, &fd, &offset, &heap);
    if (err) {
        return err;
    }
    oc_guard guard;
    oc_guard_out_begin(&guard, data, bytes);
    err = oc_pwrite_all(fd, data, bytes, offset);
    /* A file of its own is synced: the data is on disk when spill returns.  Heap slots are
     * small and share a file whose sync would wait for every other slot too. */
    if (!err && !heap && fdatasync(fd) != 0) {
        err = errno;
    }
    if (!err && mmap(data, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, (off_t)offset) == MAP_FAILED) {
        err = errno;
    }
    oc_guard_out_end(&guard, err != 0);
    if (err) {
        give_space(fd, offset, bytes, heap, 0);
        return err;
    }
    if (!heap) {
        /* The data is on disk: let the kernel drop its page-cache copy too. */
        posix_fadvise(fd, 0, (off_t)bytes, POSIX_FADV_DONTNEED);
    }
    place(h, fd, offset, heap, OC_FLAG_SPILLED);
    oc_node *owner = atomic_load(&h->owner);
    int64_t size = (int64_t)h->size;
    oc_release(owner, size);
    atomic_fetch_add(&owner->spilled_bytes, size);
    atomic_fetch_add(&owner->spill_count, 1);
    atomic_fetch_add(&owner->spill_moved_bytes, size);
    return 0;
}

int oc_unspill_block(oc_header *h)
{
    unsigned flags = atomic_load(&h->flags);
    if (flags & OC_FLAG_ZSPILLED) {
        return oc_zunspill_block(h);
    }
    if (!(flags & OC_FLAG_ON_DISK)) {
        return 0;
    }
    /* With its header in the file, the header page moves too: after this, fork must copy it
     * like any anonymous memory rather than share a file page. */
    char *start = disk_start(h);
    size_t span = disk_bytes(h);
    int fd = *oc_region_fd(h);
    uint64_t offset = *oc_region_offset(h);
    int err = (flags & OC_FLAG_COW) ? oc_guard_populate_private(start, span)
                                    : oc_guard_move_in(start, span, fd, offset);
    if (err) {
        return err;
    }
    give_space(fd, offset, span, (flags & OC_FLAG_HEAP) != 0, (flags & OC_FLAG_COW) != 0);
    *oc_region_fd(h) = -1;
    oc_node *owner = atomic_load(&h->owner);
    int64_t size = (int64_t)h->size;
    /* COW stays: a private map (so it is never cached for reuse). */
    atomic_fetch_and(&h->flags, ~(OC_FLAG_ON_DISK | OC_FLAG_HEAP | OC_FLAG_HEADER_IN_FILE));
    atomic_fetch_sub((flags & OC_FLAG_SPILLED) ? &owner->spilled_bytes : &owner->mapped_bytes, size);
    atomic_fetch_add(&owner->unspill_count, 1);
    atomic_fetch_add(&owner->unspill_moved_bytes, size);
    /* Newest again: a block just brought back is the last one to evict. */
    oc_registry_unlink(h);
    oc_registry_link(h);
    return 0;
}

oc_disk_space oc_disk_release(oc_header *h)
{
    unsigned flags = atomic_load(&h->flags);
    oc_node *owner = atomic_load(&h->owner);
    oc_disk_space space = {*oc_region_fd(h), *oc_region_offset(h), disk_bytes(h),
                           (flags & OC_FLAG_HEAP) != 0, (flags & OC_FLAG_COW) != 0};
    *oc_region_fd(h) = -1;
    atomic_fetch_sub((flags & OC_FLAG_SPILLED) ? &owner->spilled_bytes : &owner->mapped_bytes,
                     (int64_t)h->size);
    return space;
}

void oc_disk_space_give(oc_disk_space space)
{
    give_space(space.fd, space.offset, space.bytes, space.heap, space.shared_by_fork);
}

/* Spills the oldest RAM regions under `scope` (all of them if scope is NULL) until
 * `need_bytes` are released.  Returns the bytes released; the registry lock must be held. */
int64_t oc_evict(oc_node *scope, int64_t need_bytes, int *err)
{
    int64_t released = 0;
    size_t page = oc_page_bytes();
    *err = 0;
    for (oc_header *h = oc_registry_first(); h != NULL && released < need_bytes;) {
        oc_header *next = oc_registry_next(h);
        unsigned flags = atomic_load(&h->flags);
        /* Copy-on-write mappings left by fork are not anonymous memory: no guard can hold a
         * system call writing into them, so they are never moved unasked. */
        int inside = scope == NULL || oc_node_in_subtree(atomic_load(&h->owner), scope);
        if ((flags & OC_FLAG_ZSPILLED) && inside) {
            /* pages brought back by touches: written ones are encoded again, all dropped */
            int e;
            released += oc_zspill_again(h, &e);
            if (e) {
                *err = e;
                break;
            }
        }
        else if (!(flags & (OC_FLAG_ON_DISK | OC_FLAG_COW)) && h->size >= page && inside) {
            int e = oc_spill_block(h);
            if (e) {
                *err = e;
                break;
            }
            released += (int64_t)h->size;
        }
        h = next;
    }
    return released;
}

/* Drops the resident pages of on-disk regions from this process (their data stays in the
 * file and the page cache), so they no longer count as the process's resident memory. */
int oc_drop_disk_pages(void)
{
    int count = 0;
    for (oc_header *h = oc_registry_first(); h != NULL; h = oc_registry_next(h)) {
        unsigned flags = atomic_load(&h->flags);
        /* Dropping pages of a copy-on-write mapping would drop the writes made since fork. */
        if ((flags & OC_FLAG_ON_DISK) && !(flags & OC_FLAG_COW)) {
            madvise(oc_block_data(h), oc_region_data_bytes(h), MADV_DONTNEED);
            count++;
        }
    }
    return count;
}

/* ---- fork ---- */

/* Before fork (registry locked by regions.c): on-disk regions become copy-on-write mappings of
 * their files in this process, and so in the child.  Writes before this point are in the file,
 * later ones in private pages of whichever process made them. */
void oc_spill_atfork(int phase)
{
    if (phase != OC_FORK_PREPARE) {
        return;
    }
    for (oc_header *h = oc_registry_first(); h != NULL; h = oc_registry_next(h)) {
        unsigned flags = atomic_load(&h->flags);
        if ((flags & OC_FLAG_ON_DISK) && !(flags & OC_FLAG_COW) &&
            oc_make_private(disk_start(h), disk_bytes(h), *oc_region_fd(h), *oc_region_offset(h)) == 0) {
            atomic_fetch_or(&h->flags, OC_FLAG_COW);
        }
    }
}
