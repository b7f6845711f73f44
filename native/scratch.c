/*
 * Scratch memory: the buffers oocarray's native code decodes, encodes and stages chunks in
 * (chunks.c's per-thread reader state, the pager's staging buffers, the chunks handed to a
 * remote array's pager).  Each is a mapping of its own, so that freeing it gives the memory
 * back to the system at once: malloc would keep
 * buffers this size in a thread's arena (glibc raises its mmap threshold to the size of the
 * last large block freed, and each thread has an arena), and a process that decoded chunks
 * on 16 threads kept well over 100 MiB that no manager counted.  Every byte is counted here
 * (`scratch_bytes()` in Python), and oc_scratch_release() (chunks.c) hands back what idle
 * threads hold.
 */
#include "oc_core.h"
#include "oc_regions.h"
#include "oc_chunks.h"

#include <sys/mman.h>

atomic_llong oc_scratch_total;

static size_t scratch_round(size_t n)
{
    size_t page = oc_page_bytes();
    return n == 0 ? page : (n + page - 1) / page * page;
}

void *oc_scratch_map(size_t n)
{
    size_t len = scratch_round(n);
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        return NULL;
    }
    atomic_fetch_add(&oc_scratch_total, (long long)len);
    return p;
}

void oc_scratch_unmap(void *p, size_t n)
{
    if (p == NULL) {
        return;
    }
    size_t len = scratch_round(n);
    munmap(p, len);
    atomic_fetch_sub(&oc_scratch_total, (long long)len);
}

/* Grows *buf to at least n bytes (contents not kept); *size is the usable size.  Page aligned:
 * on some x86 cores the kernel's copy into a buffer that starts 16 bytes into a page (where
 * malloc puts large blocks) runs several times slower.  An eighth more than asked: compressed
 * chunks differ in size by a few percent, and growing by exactly what each larger one needs
 * mapped a fresh buffer, every page of it faulted anew, about six times a pass per thread
 * (the pages beyond what is written are never touched, so cost no memory). */
char *oc_scratch_grow(char **buf, size_t *size, size_t n)
{
    if (*size < n) {
        size_t len = scratch_round(n + n / 8);
        char *p = oc_scratch_map(len);
        if (p == NULL) {
            return NULL;
        }
        oc_scratch_unmap(*buf, *size);
        *buf = p;
        *size = len;
    }
    return *buf;
}

void oc_scratch_drop(char **buf, size_t *size)
{
    oc_scratch_unmap(*buf, *size);
    *buf = NULL;
    *size = 0;
}

long long oc_scratch_bytes(void) { return atomic_load(&oc_scratch_total); }
