/*
 * Same-address spill: a region's data pages are written to a private temporary file and the
 * file is mapped over the same address range (MAP_FIXED), so every ndarray keeps its pointer
 * and RAM is released; unspill copies the data into fresh anonymous pages and moves them into
 * place with mremap.  Space is reserved with posix_fallocate before any page of a file mapping
 * is written, so a full disk is an error code here, never SIGBUS later.  Files are created
 * with O_TMPFILE (never named) or, where the file system lacks it, created 0600 and unlinked
 * at once, so nothing is left behind after a crash.
 *
 * Concurrent writes.  While the data is copied, the range is write-protected.  A thread that
 * writes to it meanwhile takes SIGSEGV; the handler below sees that the address is in a range
 * being moved, waits until the move has finished and returns, and the write is retried on the
 * new mapping.  So no write is lost.  (A write made by the kernel on the process's behalf, such
 * as readinto() into the array, fails with EFAULT instead of waiting.)
 */
#include "oc_core.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

atomic_int_fast64_t oc_spill_limit = -1;
atomic_int_fast64_t oc_spill_used = 0;

static pthread_mutex_t dir_mutex = PTHREAD_MUTEX_INITIALIZER;
static char spill_dir[PATH_MAX] = "/tmp";

int oc_set_spill_dir(const char *path)
{
    if (strlen(path) >= sizeof(spill_dir)) {
        return ENAMETOOLONG;
    }
    pthread_mutex_lock(&dir_mutex);
    strcpy(spill_dir, path);
    pthread_mutex_unlock(&dir_mutex);
    return 0;
}

/* ---- disk space accounting against max_spill_bytes ---- */

int oc_disk_reserve(size_t bytes)
{
    int64_t limit = atomic_load(&oc_spill_limit);
    int64_t now = atomic_fetch_add(&oc_spill_used, (int64_t)bytes) + (int64_t)bytes;
    if (limit >= 0 && now > limit) {
        atomic_fetch_sub(&oc_spill_used, (int64_t)bytes);
        return ENOSPC;
    }
    return 0;
}

void oc_disk_unreserve(size_t bytes) { atomic_fetch_sub(&oc_spill_used, (int64_t)bytes); }

static int open_file(size_t bytes);

/* An unnamed temporary file with `bytes` of space reserved, counted against max_spill_bytes;
 * -errno on failure (nothing counted then).  A caller that fails later unreserves. */
int oc_open_reserved_file(size_t bytes)
{
    int reserved = oc_disk_reserve(bytes);
    if (reserved) {
        return -reserved;
    }
    int fd = open_file(bytes);
    if (fd < 0) {
        oc_disk_unreserve(bytes);
    }
    return fd;
}

static int open_file(size_t bytes)
{
    char path[PATH_MAX + 32];
    pthread_mutex_lock(&dir_mutex);
    snprintf(path, sizeof(path), "%s", spill_dir);
    pthread_mutex_unlock(&dir_mutex);
    int fd = open(path, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
        size_t n = strlen(path);
        snprintf(path + n, sizeof(path) - n, "/spill-XXXXXX");
        fd = mkostemp(path, O_CLOEXEC); /* mode 0600 */
        if (fd >= 0) {
            unlink(path);
        }
    }
    if (fd < 0) {
        return -errno;
    }
    int err = posix_fallocate(fd, 0, (off_t)bytes);
    if (err != 0) {
        close(fd);
        return -err;
    }
    return fd;
}

static int write_all(int fd, const char *data, size_t bytes)
{
    size_t done = 0;
    while (done < bytes) {
        ssize_t n = pwrite(fd, data + done, bytes - done, (off_t)done);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            return errno;
        }
        done += (size_t)n;
    }
    return 0;
}

/* ---- write protection during a move, and the SIGSEGV handler that waits it out ---- */

#define MOVE_SLOTS 64
#define SLOT_FREE 0
#define SLOT_MOVING 1
#define SLOT_DONE 2
#define SLOT_CLAIMED 3
/* A fault in a range whose move finished this recently is retried rather than passed on:
 * the faulting thread may have been descheduled between the fault and the check. */
#define DONE_GRACE_NS 1000000000LL

static struct {
    atomic_uintptr_t start;
    atomic_uintptr_t end;
    atomic_int state;
    atomic_llong done_ns;
} moves[MOVE_SLOTS];

static long long monotonic_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}
static atomic_uint next_move_slot;
static struct sigaction previous_segv;
static pthread_mutex_t signal_mutex = PTHREAD_MUTEX_INITIALIZER;

static void on_segv(int sig, siginfo_t *info, void *context)
{
    uintptr_t addr = (uintptr_t)info->si_addr;
    for (int i = 0; i < MOVE_SLOTS; i++) {
        int state = atomic_load_explicit(&moves[i].state, memory_order_acquire);
        if ((state != SLOT_MOVING && state != SLOT_DONE) || addr < atomic_load(&moves[i].start) ||
            addr >= atomic_load(&moves[i].end)) {
            continue;
        }
        if (state == SLOT_DONE && monotonic_ns() - atomic_load(&moves[i].done_ns) > DONE_GRACE_NS) {
            continue;
        }
        struct timespec pause = {0, 20000};
        while (atomic_load_explicit(&moves[i].state, memory_order_acquire) == SLOT_MOVING) {
            nanosleep(&pause, NULL);
        }
        return; /* the faulting write is retried on the new mapping */
    }
    /* Not ours: behave as if this handler were not installed. */
    if (previous_segv.sa_flags & SA_SIGINFO) {
        previous_segv.sa_sigaction(sig, info, context);
    }
    else if (previous_segv.sa_handler != SIG_DFL && previous_segv.sa_handler != SIG_IGN) {
        previous_segv.sa_handler(sig);
    }
    else {
        signal(SIGSEGV, SIG_DFL); /* the fault repeats and takes the default action */
    }
}

/* Installs the handler, again if someone (faulthandler, say) replaced it since. */
static void ensure_segv_handler(void)
{
    struct sigaction current;
    pthread_mutex_lock(&signal_mutex);
    sigaction(SIGSEGV, NULL, &current);
    if (!(current.sa_flags & SA_SIGINFO) || current.sa_sigaction != on_segv) {
        struct sigaction ours;
        memset(&ours, 0, sizeof(ours));
        ours.sa_sigaction = on_segv;
        ours.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
        sigemptyset(&ours.sa_mask);
        sigaction(SIGSEGV, &ours, &previous_segv);
    }
    pthread_mutex_unlock(&signal_mutex);
}

static int move_begin(char *data, size_t bytes)
{
    ensure_segv_handler();
    for (;;) {
        int slot = (int)(atomic_fetch_add(&next_move_slot, 1) % MOVE_SLOTS);
        int expected = atomic_load(&moves[slot].state);
        if (expected == SLOT_MOVING || expected == SLOT_CLAIMED) {
            continue;
        }
        if (atomic_compare_exchange_strong(&moves[slot].state, &expected, SLOT_CLAIMED)) {
            atomic_store(&moves[slot].start, (uintptr_t)data);
            atomic_store(&moves[slot].end, (uintptr_t)data + bytes);
            atomic_store_explicit(&moves[slot].state, SLOT_MOVING, memory_order_release);
            mprotect(data, bytes, PROT_READ);
            return slot;
        }
    }
}

static void move_end(int slot, char *data, size_t bytes, int failed)
{
    if (failed) {
        mprotect(data, bytes, PROT_READ | PROT_WRITE);
    }
    atomic_store(&moves[slot].done_ns, monotonic_ns());
    atomic_store_explicit(&moves[slot].state, SLOT_DONE, memory_order_release);
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

/* Maps a fresh temporary file over the data pages of a region that holds no data yet. */
int oc_map_region_to_file(oc_header *h)
{
    size_t bytes = oc_region_data_bytes(h);
    int fd = oc_open_reserved_file(bytes);
    if (fd < 0) {
        return -fd;
    }
    void *p = mmap(oc_block_data(h), bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
    int err = p == MAP_FAILED ? errno : 0;
    close(fd);
    if (err) {
        oc_disk_unreserve(bytes);
        return err;
    }
    atomic_fetch_or(&h->flags, OC_FLAG_MAPPED);
    return 0;
}

int oc_spill_block(oc_header *h)
{
    unsigned flags = atomic_load(&h->flags);
    if (!(flags & OC_FLAG_REGION) || (flags & OC_FLAG_ON_DISK)) {
        return 0;
    }
    char *data = oc_block_data(h);
    size_t bytes = oc_region_data_bytes(h);
    int fd = oc_open_reserved_file(bytes);
    if (fd < 0) {
        return -fd;
    }
    int slot = move_begin(data, bytes);
    int err = write_all(fd, data, bytes);
    if (!err && fdatasync(fd) != 0) {
        err = errno;
    }
    if (!err && mmap(data, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
        err = errno;
    }
    move_end(slot, data, bytes, err != 0);
    if (!err) {
        /* The data is on disk: let the kernel drop its page-cache copy too. */
        posix_fadvise(fd, 0, (off_t)bytes, POSIX_FADV_DONTNEED);
    }
    close(fd);
    if (err) {
        oc_disk_unreserve(bytes);
        return err;
    }
    oc_node *owner = atomic_load(&h->owner);
    int64_t size = (int64_t)h->size;
    atomic_fetch_or(&h->flags, OC_FLAG_SPILLED);
    oc_release(owner, size);
    atomic_fetch_add(&owner->spilled_bytes, size);
    atomic_fetch_add(&owner->spill_count, 1);
    atomic_fetch_add(&owner->spill_moved_bytes, size);
    return 0;
}

int oc_unspill_block(oc_header *h)
{
    unsigned flags = atomic_load(&h->flags);
    if (!(flags & OC_FLAG_ON_DISK)) {
        return 0;
    }
    char *data = oc_block_data(h);
    size_t bytes = oc_region_data_bytes(h);
    char *fresh = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (fresh == MAP_FAILED) {
        return errno;
    }
    int slot = move_begin(data, bytes);
    memcpy(fresh, data, bytes);
    int err = 0;
    if (mremap(fresh, bytes, bytes, MREMAP_MAYMOVE | MREMAP_FIXED, data) == MAP_FAILED) {
        err = errno;
        munmap(fresh, bytes);
    }
    move_end(slot, data, bytes, err != 0);
    if (err) {
        return err;
    }
    oc_node *owner = atomic_load(&h->owner);
    int64_t size = (int64_t)h->size;
    atomic_fetch_and(&h->flags, ~OC_FLAG_ON_DISK);
    oc_disk_unreserve(bytes);
    atomic_fetch_sub((flags & OC_FLAG_SPILLED) ? &owner->spilled_bytes : &owner->mapped_bytes, size);
    atomic_fetch_add(&owner->unspill_count, 1);
    atomic_fetch_add(&owner->unspill_moved_bytes, size);
    /* Newest again: a block just brought back is the last one to evict. */
    oc_registry_unlink(h);
    oc_registry_link(h);
    return 0;
}

void oc_disk_release(oc_header *h)
{
    unsigned flags = atomic_load(&h->flags);
    oc_node *owner = atomic_load(&h->owner);
    oc_disk_unreserve(oc_region_data_bytes(h));
    atomic_fetch_sub((flags & OC_FLAG_SPILLED) ? &owner->spilled_bytes : &owner->mapped_bytes,
                     (int64_t)h->size);
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
        if (!(flags & OC_FLAG_ON_DISK) && h->size >= page &&
            (scope == NULL || oc_node_in_subtree(atomic_load(&h->owner), scope))) {
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
        if (atomic_load(&h->flags) & OC_FLAG_ON_DISK) {
            madvise(oc_block_data(h), oc_region_data_bytes(h), MADV_DONTNEED);
            count++;
        }
    }
    return count;
}
