/*
 * The heap file: regions of up to 256 KiB placed on disk share one unnamed file per process,
 * each in a slot of whole pages.  Freed slots give their blocks back to the file system
 * (FALLOC_FL_PUNCH_HOLE) and are reused for regions of the same size.  A file of their own for
 * each small array was slow (open, reserve and close cost about 70 us) and bounded by the
 * descriptor limit: NumPy's own tests under location="mmap" keep 33,000 small arrays on disk.
 *
 * After fork both processes map their slots copy-on-write from this file, so a slot that was
 * in use at a fork is never reused or punched (the other process may still read it); its
 * space comes back when the process ends.  A child starts a heap file of its own.
 */
#include "oc_core.h"
#include "oc_regions.h"
#include "oc_files.h"
#include "oc_spill.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
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
            free(free_slots[c].offsets);
            free_slots[c].offsets = NULL;
            free_slots[c].count = free_slots[c].capacity = 0;
        }
    }
    pthread_mutex_unlock(&heap_mutex);
}
