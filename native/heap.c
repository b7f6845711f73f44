/*
 * The heap file: regions of up to 256 KiB placed on disk share one unnamed file per process,
 * each in a slot of whole pages.  Freed slots give their blocks back to the file system
 * (FALLOC_FL_PUNCH_HOLE) and are reused for regions of the same size.  A file of their own for
 * each small array was slow (open, reserve and close cost about 70 us) and bounded by the
 * descriptor limit: NumPy's own tests under location="mmap" keep 33,000 small arrays on disk.
 *
 * Freed slots that were placed whole (header page and data in one mapping of the slot) stay
 * mapped, their blocks kept, up to KEPT_MAX_BYTES: the next region of that size takes one
 * without a system call, as malloc reuses freed memory (four system calls per array
 * otherwise: reserve, map, unmap, punch, about 20 us).
 *
 * After fork both processes map their slots copy-on-write from this file, so a slot that was
 * in use at a fork is never reused or punched (the other process may still read it); its
 * space comes back when the process ends.  A child starts a heap file of its own and unmaps
 * the parent's kept slots, which the parent may hand out again.
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

#define HEAP_CLASSES 64 /* slot sizes in pages: 1 .. 64 (256 KiB with 4 KiB pages) */

static pthread_mutex_t heap_mutex = PTHREAD_MUTEX_INITIALIZER;
static int heap_fd = -1;
static uint64_t heap_end;
static struct {
    uint64_t *offsets;
    size_t count;
    size_t capacity;
} free_slots[HEAP_CLASSES + 1];

/* Freed slots still mapped, per size class (most recently freed last), and their bytes. */
#define KEPT_MAX_BYTES ((size_t)16 << 20)
typedef struct {
    char *base;
    uint64_t offset;
} kept_slot;
static struct {
    kept_slot *slots;
    size_t count;
    size_t capacity;
} kept[HEAP_CLASSES + 1];
static size_t kept_bytes;
static uint64_t kept_reused; /* slots handed out again still mapped, since the start */

size_t oc_heap_slot_max_bytes(void) { return HEAP_CLASSES * oc_page_bytes(); }

static void push_free(size_t class, uint64_t offset)
{
    if (free_slots[class].count == free_slots[class].capacity) {
        size_t capacity = free_slots[class].capacity ? 2 * free_slots[class].capacity : 64;
        uint64_t *grown = realloc(free_slots[class].offsets, capacity * sizeof(uint64_t));
        if (grown == NULL) {
            return; /* the slot is not reused: only its file space stays taken */
        }
        free_slots[class].offsets = grown;
        free_slots[class].capacity = capacity;
    }
    free_slots[class].offsets[free_slots[class].count++] = offset;
}

int oc_heap_take(size_t bytes, int *fd, uint64_t *offset)
{
    size_t class = bytes / oc_page_bytes();
    if (bytes % oc_page_bytes() != 0 || class < 1 || class > HEAP_CLASSES) {
        return EINVAL;
    }
    pthread_mutex_lock(&heap_mutex);
    if (heap_fd < 0) {
        /* Opened without the heap's lock held: opening takes the spill directory's lock, which
         * fork takes before this one. */
        pthread_mutex_unlock(&heap_mutex);
        int made = oc_open_unnamed_file();
        if (made < 0) {
            return -made;
        }
        pthread_mutex_lock(&heap_mutex);
        if (heap_fd < 0) {
            heap_fd = made;
        }
        else {
            close(made); /* another thread opened one meanwhile */
        }
    }
    uint64_t at;
    if (free_slots[class].count > 0) {
        at = free_slots[class].offsets[--free_slots[class].count];
    }
    else {
        at = heap_end;
        heap_end += bytes;
    }
    int file = heap_fd;
    pthread_mutex_unlock(&heap_mutex);
    int err = oc_reserve_zeros(file, at, bytes);
    if (err) {
        pthread_mutex_lock(&heap_mutex);
        push_free(class, at);
        pthread_mutex_unlock(&heap_mutex);
        return err;
    }
    *fd = file;
    *offset = at;
    return 0;
}

/* heap_mutex held: unmaps a kept slot and gives its blocks back for reuse by a later take. */
static void give_back(kept_slot slot, size_t class)
{
    size_t bytes = class * oc_page_bytes();
    munmap(slot.base, bytes);
    fallocate(heap_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)slot.offset, (off_t)bytes);
    push_free(class, slot.offset);
    kept_bytes -= bytes;
}

/* heap_mutex held: drops the least recently kept slot of `class`. */
static void drop_one(size_t class)
{
    kept_slot slot = kept[class].slots[0];
    memmove(kept[class].slots, kept[class].slots + 1, (kept[class].count - 1) * sizeof(kept_slot));
    kept[class].count--;
    give_back(slot, class);
}

int oc_heap_reuse(size_t bytes, char **base, int *fd, uint64_t *offset)
{
    size_t class = bytes / oc_page_bytes();
    if (bytes % oc_page_bytes() != 0 || class < 1 || class > HEAP_CLASSES) {
        return 0;
    }
    int found = 0;
    pthread_mutex_lock(&heap_mutex);
    if (kept[class].count > 0 && heap_fd >= 0) {
        kept_slot slot = kept[class].slots[--kept[class].count];
        kept_bytes -= bytes;
        *base = slot.base;
        *offset = slot.offset;
        *fd = heap_fd;
        kept_reused++;
        found = 1;
    }
    pthread_mutex_unlock(&heap_mutex);
    return found;
}

int oc_heap_keep(char *base, uint64_t offset, size_t bytes)
{
    size_t class = bytes / oc_page_bytes();
    if (bytes % oc_page_bytes() != 0 || class < 1 || class > HEAP_CLASSES) {
        return 0;
    }
    int keeping = 0;
    pthread_mutex_lock(&heap_mutex);
    /* Full: the size class holding the most goes first (the sizes a program uses now win). */
    while (heap_fd >= 0 && kept_bytes + bytes > KEPT_MAX_BYTES) {
        size_t largest = 0;
        for (size_t c = 1; c <= HEAP_CLASSES; c++) {
            if (kept[c].count > 0 && (largest == 0 || kept[c].count * c > kept[largest].count * largest)) {
                largest = c;
            }
        }
        if (largest == 0 || largest == class) {
            break; /* nothing else to drop: this one goes back instead */
        }
        drop_one(largest);
    }
    if (heap_fd >= 0 && kept_bytes + bytes <= KEPT_MAX_BYTES) {
        if (kept[class].count == kept[class].capacity) {
            size_t capacity = kept[class].capacity ? 2 * kept[class].capacity : 16;
            kept_slot *grown = realloc(kept[class].slots, capacity * sizeof(kept_slot));
            if (grown != NULL) {
                kept[class].slots = grown;
                kept[class].capacity = capacity;
            }
        }
        if (kept[class].count < kept[class].capacity) {
            kept[class].slots[kept[class].count++] = (kept_slot){base, offset};
            kept_bytes += bytes;
            keeping = 1;
        }
    }
    pthread_mutex_unlock(&heap_mutex);
    return keeping;
}

void oc_heap_kept_stats(size_t *slots, size_t *bytes, uint64_t *reused)
{
    pthread_mutex_lock(&heap_mutex);
    *slots = 0;
    for (size_t c = 1; c <= HEAP_CLASSES; c++) {
        *slots += kept[c].count;
    }
    *bytes = kept_bytes;
    *reused = kept_reused;
    pthread_mutex_unlock(&heap_mutex);
}

size_t oc_heap_drop_kept(void)
{
    pthread_mutex_lock(&heap_mutex);
    size_t dropped = kept_bytes;
    for (size_t c = 1; c <= HEAP_CLASSES; c++) {
        for (size_t i = 0; i < kept[c].count; i++) {
            give_back(kept[c].slots[i], c);
        }
        kept[c].count = 0;
    }
    pthread_mutex_unlock(&heap_mutex);
    return dropped;
}

void oc_heap_give(uint64_t offset, size_t bytes, int reuse)
{
    if (!reuse) {
        return; /* mapped copy-on-write by another process too: left as it is */
    }
    pthread_mutex_lock(&heap_mutex);
    if (heap_fd >= 0) {
        fallocate(heap_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)offset, (off_t)bytes);
        push_free(bytes / oc_page_bytes(), offset);
    }
    pthread_mutex_unlock(&heap_mutex);
}

void oc_heap_atfork(int phase)
{
    if (phase == OC_FORK_PREPARE) {
        pthread_mutex_lock(&heap_mutex);
        return;
    }
    if (phase == OC_FORK_CHILD) {
        /* The parent's heap stays the parent's: its slots are mapped copy-on-write here and
         * never given back by this process.  New regions go to a heap file of the child's. */
        if (heap_fd >= 0) {
            close(heap_fd);
        }
        heap_fd = -1;
        heap_end = 0;
        for (size_t c = 0; c <= HEAP_CLASSES; c++) {
            for (size_t i = 0; i < kept[c].count; i++) {
                munmap(kept[c].slots[i].base, c * oc_page_bytes());
            }
            free(kept[c].slots);
            kept[c].slots = NULL;
            kept[c].count = kept[c].capacity = 0;
        }
        kept_bytes = 0;
        for (size_t c = 0; c <= HEAP_CLASSES; c++) {
            free(free_slots[c].offsets);
            free_slots[c].offsets = NULL;
            free_slots[c].count = free_slots[c].capacity = 0;
        }
    }
    pthread_mutex_unlock(&heap_mutex);
}
