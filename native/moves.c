/*
 * Guards for moving a live region's pages (spill and unspill) while other threads may write
 * to it, from user code or from inside the kernel (read(), recv_into(), readinto()).
 *
 * With userfaultfd (the default wherever the process may use it):
 *  - out (RAM -> file): the anonymous range is registered for write-protect faults and
 *    protected.  A writer waits in the kernel until the file is mapped over the range and the
 *    range is woken; its write then lands in the file mapping.  Nothing is lost and no signal
 *    handler is involved.
 *  - in (file -> RAM): a fresh anonymous range, registered for missing-page faults, replaces
 *    the file mapping in one mremap; it is then filled from the file with UFFDIO_COPY.  An
 *    access waits until its page is filled.  mremap of a registered range raises a REMAP event
 *    that must be read before mremap returns: a reader thread drains the descriptor (it never
 *    blocks on anything but the descriptor, see ../shared/notes/userfaultfd.md).
 * A descriptor made with UFFD_USER_MODE_ONLY (all an unprivileged process may get by default)
 * makes user-mode writers wait, but a system call writing into the range fails with EFAULT.
 * Without userfaultfd at all: mprotect, and a SIGSEGV handler that makes user-mode writers wait.
 */
#include "oc_core.h"
#include "oc_regions.h"
#include "oc_spill.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Newer than the build machine's kernel headers, checked at run time. */
#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif
#ifndef UFFD_FEATURE_WP_UNPOPULATED
#define UFFD_FEATURE_WP_UNPOPULATED (1 << 13)
#endif
#ifndef USERFAULTFD_IOC_NEW
#define USERFAULTFD_IOC_NEW _IO(0xAA, 0x00)
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/* Write-protect faults (also on pages never touched) and the REMAP event. */
#define WANTED_FEATURES                                                                            \
    ((uint64_t)(UFFD_FEATURE_PAGEFAULT_FLAG_WP | UFFD_FEATURE_WP_UNPOPULATED | UFFD_FEATURE_EVENT_REMAP))
#define FILL_STEP_BYTES ((size_t)4 << 20)

static pthread_mutex_t guard_mutex = PTHREAD_MUTEX_INITIALIZER;
static int requested = OC_GUARD_AUTO;
static atomic_int mode = -1; /* decided on first use */
static int uffd = -1;

/* ---- the userfaultfd descriptor ---- */

static int uffd_new(int user_only)
{
    int flags = O_CLOEXEC | O_NONBLOCK | (user_only ? UFFD_USER_MODE_ONLY : 0);
    int fd = (int)syscall(SYS_userfaultfd, flags);
    if (fd < 0 && !user_only && errno == EPERM) {
        /* Linux 6.1+: access to /dev/userfaultfd grants kernel-mode fault handling. */
        int dev = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
        if (dev >= 0) {
            fd = ioctl(dev, USERFAULTFD_IOC_NEW, O_CLOEXEC | O_NONBLOCK);
            close(dev);
        }
    }
    return fd;
}

/* A descriptor with every feature the moves need, or -1.  UFFDIO_API is called once with no
 * features to learn what the running kernel has (the build's headers say nothing of it), and
 * can be called only once per descriptor. */
static int uffd_open(int user_only)
{
    int fd = uffd_new(user_only);
    if (fd < 0) {
        return -1;
    }
    struct uffdio_api api = {.api = UFFD_API, .features = 0};
    int ok = ioctl(fd, UFFDIO_API, &api) == 0 && (api.features & WANTED_FEATURES) == WANTED_FEATURES;
    close(fd);
    if (!ok || (fd = uffd_new(user_only)) < 0) {
        return -1;
    }
    api = (struct uffdio_api){.api = UFFD_API, .features = WANTED_FEATURES};
    if (ioctl(fd, UFFDIO_API, &api) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Reads and drops every message: fault messages need no answer (the mover wakes the range),
 * REMAP events must only be read for mremap to return. */
static void *drain_events(void *arg)
{
    int fd = (int)(intptr_t)arg;
    struct uffd_msg msgs[64];
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, -1) < 0) {
            if (errno == EINTR) {
                continue;
            }
            return NULL;
        }
        if (p.revents & (POLLERR | POLLNVAL)) {
            return NULL; /* the descriptor was closed (after fork, in a child) */
        }
        while (read(fd, msgs, sizeof(msgs)) > 0) {
        }
    }
}

static int start_drain_thread(int fd)
{
    pthread_attr_t attr;
    pthread_t thread;
    sigset_t all, old;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* the thread inherits a mask blocking all signals */
    int err = pthread_create(&thread, &attr, drain_events, (void *)(intptr_t)fd);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    return err;
}

static void ensure_segv_handler(void);

static int decide_mode(void)
{
    int m = atomic_load(&mode);
    if (m >= 0) {
        return m;
    }
    pthread_mutex_lock(&guard_mutex);
    m = atomic_load(&mode);
    if (m < 0) {
        m = OC_GUARD_SIGNAL;
        int tries[2] = {OC_GUARD_UFFD, OC_GUARD_UFFD_USER};
        for (int i = 0; i < 2 && m == OC_GUARD_SIGNAL; i++) {
            if (requested != OC_GUARD_AUTO && requested != tries[i]) {
                continue;
            }
            int fd = uffd_open(tries[i] == OC_GUARD_UFFD_USER);
            if (fd >= 0 && start_drain_thread(fd) == 0) {
                uffd = fd;
                m = tries[i];
            }
            else if (fd >= 0) {
                close(fd);
            }
        }
        if (m == OC_GUARD_SIGNAL) {
            /* Installed now rather than at the first move: a handler installed later (say
             * faulthandler) then keeps ours as the one it passes faults on to and restores. */
            ensure_segv_handler();
        }
        atomic_store(&mode, m);
    }
    pthread_mutex_unlock(&guard_mutex);
    return m;
}

int oc_guard_mode(void) { return decide_mode(); }

/* Chooses the guard for the first move; once one is in force (a descriptor may be in use),
 * only that mode is accepted.  Returns 0, or EBUSY. */
int oc_guard_request(int wanted)
{
    pthread_mutex_lock(&guard_mutex);
    int m = atomic_load(&mode);
    int err = m >= 0 && wanted != OC_GUARD_AUTO && wanted != m ? EBUSY : 0;
    if (m < 0) {
        requested = wanted;
    }
    pthread_mutex_unlock(&guard_mutex);
    return err;
}

static int uffd_register(char *data, size_t bytes, uint64_t how)
{
    struct uffdio_register r = {.range = {.start = (uintptr_t)data, .len = bytes}, .mode = how};
    return ioctl(uffd, UFFDIO_REGISTER, &r) == 0 ? 0 : errno;
}

static void uffd_unregister(char *data, size_t bytes)
{
    struct uffdio_range r = {.start = (uintptr_t)data, .len = bytes};
    ioctl(uffd, UFFDIO_UNREGISTER, &r);
}

static int uffd_protect(char *data, size_t bytes, int on)
{
    struct uffdio_writeprotect w = {.range = {.start = (uintptr_t)data, .len = bytes},
                                    .mode = on ? UFFDIO_WRITEPROTECT_MODE_WP : 0};
    for (;;) {
        if (ioctl(uffd, UFFDIO_WRITEPROTECT, &w) == 0) {
            return 0;
        }
        if (errno != EAGAIN) {
            return errno;
        }
        /* an event (a mremap) waits for the handler thread to read it: let it run */
        struct timespec pause = {0, 100000};
        nanosleep(&pause, NULL);
    }
}

static void uffd_wake(char *data, size_t bytes)
{
    struct uffdio_range r = {.start = (uintptr_t)data, .len = bytes};
    ioctl(uffd, UFFDIO_WAKE, &r);
}

/* ---- the signal fallback: mprotect, and a SIGSEGV handler that waits out the move ---- */

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
static atomic_uint next_move_slot;
static atomic_int moves_running;
static struct sigaction previous_segv;
static pthread_mutex_t signal_mutex = PTHREAD_MUTEX_INITIALIZER;

static long long monotonic_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void on_segv(int sig, siginfo_t *info, void *context)
{
    uintptr_t addr = (uintptr_t)info->si_addr;
    if (info->si_code <= 0 && atomic_load(&moves_running) > 0) {
        /* Sent, not a fault: a handler installed after ours (faulthandler) re-raises the
         * signal after handling the fault.  Returning retries the faulting write, which now
         * reaches this handler directly. */
        return;
    }
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

static int signal_begin(char *data, size_t bytes)
{
    ensure_segv_handler();
    atomic_fetch_add(&moves_running, 1);
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

static void signal_end(int slot, char *data, size_t bytes, int failed)
{
    if (failed) {
        mprotect(data, bytes, PROT_READ | PROT_WRITE);
    }
    atomic_store(&moves[slot].done_ns, monotonic_ns());
    atomic_store_explicit(&moves[slot].state, SLOT_DONE, memory_order_release);
    atomic_fetch_sub(&moves_running, 1);
}

/* ---- moving out: protect an anonymous range while its data is copied to a file ---- */

void oc_guard_out_begin(oc_guard *g, char *data, size_t bytes)
{
    g->data = data;
    g->bytes = bytes;
    g->mode = decide_mode();
    g->slot = -1;
    if (g->mode != OC_GUARD_SIGNAL) {
        /* A range that is not anonymous memory (a copy-on-write mapping left by fork) cannot
         * be registered: it falls back to the signal guard. */
        if (uffd_register(data, bytes, UFFDIO_REGISTER_MODE_WP) == 0) {
            if (uffd_protect(data, bytes, 1) == 0) {
                return;
            }
            uffd_unregister(data, bytes);
        }
        g->mode = OC_GUARD_SIGNAL;
    }
    g->slot = signal_begin(data, bytes);
}

/* Ends the guard: after success the range is already the file mapping (which carries no
 * registration), and waiting writers are woken to retry on it. */
void oc_guard_out_end(oc_guard *g, int failed)
{
    if (g->mode == OC_GUARD_SIGNAL) {
        signal_end(g->slot, g->data, g->bytes, failed);
        return;
    }
    if (failed) {
        uffd_protect(g->data, g->bytes, 0); /* also wakes the writers */
        uffd_unregister(g->data, g->bytes);
        return;
    }
    uffd_wake(g->data, g->bytes);
}

/* ---- moving in: replace a shared file mapping by anonymous memory with its data ---- */

static int fill_range(char *data, const char *src, size_t bytes)
{
    for (size_t done = 0; done < bytes;) {
        size_t step = bytes - done < FILL_STEP_BYTES ? bytes - done : FILL_STEP_BYTES;
        struct uffdio_copy c = {
            .dst = (uintptr_t)(data + done), .src = (uintptr_t)(src + done), .len = step, .mode = 0};
        if (ioctl(uffd, UFFDIO_COPY, &c) == 0) {
            done += step;
            continue;
        }
        if (c.copy > 0) {
            done += (size_t)c.copy; /* a partial copy: go on from there */
            continue;
        }
        if (errno == EAGAIN || errno == ENOMEM) {
            /* A mapping change in progress, or memory short for a moment: the range must be
             * filled whatever happens, or its waiters would wait forever. */
            struct timespec pause = {0, 100000};
            nanosleep(&pause, NULL);
            continue;
        }
        if (errno == EEXIST) {
            done += oc_page_bytes(); /* cannot happen while the range is registered; skip */
            continue;
        }
        return errno;
    }
    return 0;
}

static int move_in_uffd(char *data, size_t bytes, int fd, uint64_t offset)
{
    char *src = mmap(NULL, bytes, PROT_READ, MAP_SHARED, fd, (off_t)offset);
    if (src == MAP_FAILED) {
        return errno;
    }
    char *fresh = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    int err = fresh == MAP_FAILED ? errno : 0;
    if (!err && (err = uffd_register(fresh, bytes, UFFDIO_REGISTER_MODE_MISSING)) == 0 &&
        mremap(fresh, bytes, bytes, MREMAP_MAYMOVE | MREMAP_FIXED, data) == MAP_FAILED) {
        err = errno;
    }
    if (err) {
        if (fresh != MAP_FAILED) {
            munmap(fresh, bytes);
        }
        munmap(src, bytes);
        return err;
    }
    /* From here the range is ours to fill: it must be filled completely. */
    err = fill_range(data, src, bytes);
    uffd_unregister(data, bytes);
    munmap(src, bytes);
    return err;
}

static int move_in_signal(char *data, size_t bytes)
{
    char *fresh = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (fresh == MAP_FAILED) {
        return errno;
    }
    int slot = signal_begin(data, bytes);
    memcpy(fresh, data, bytes);
    int err = 0;
    if (mremap(fresh, bytes, bytes, MREMAP_MAYMOVE | MREMAP_FIXED, data) == MAP_FAILED) {
        err = errno;
        munmap(fresh, bytes);
    }
    signal_end(slot, data, bytes, err != 0);
    return err;
}

int oc_guard_move_in(char *data, size_t bytes, int fd, uint64_t offset)
{
    int err = decide_mode() == OC_GUARD_SIGNAL ? move_in_signal(data, bytes)
                                               : move_in_uffd(data, bytes, fd, offset);
    if (!err && bytes >= ((size_t)4 << 20) && atomic_load_explicit(&oc_huge_pages, memory_order_relaxed)) {
        madvise(data, bytes, MADV_HUGEPAGE);
    }
    return err;
}

/* A copy-on-write mapping (left by fork) is brought into RAM by writing to every page: each
 * write copies its page, and a concurrent writer lands on one copy or the other, never lost. */
int oc_guard_populate_private(char *data, size_t bytes)
{
    if (madvise(data, bytes, MADV_POPULATE_WRITE) == 0) {
        return 0;
    }
    if (errno != EINVAL) {
        return errno;
    }
    size_t page = oc_page_bytes();
    for (size_t off = 0; off < bytes; off += page) {
        __atomic_fetch_add((volatile char *)(data + off), 0, __ATOMIC_RELAXED);
    }
    return 0;
}

/* ---- fork ---- */

void oc_guard_atfork(int phase)
{
    if (phase == OC_FORK_PREPARE) {
        pthread_mutex_lock(&guard_mutex);
        pthread_mutex_lock(&signal_mutex);
        return;
    }
    if (phase == OC_FORK_CHILD && uffd >= 0) {
        /* The descriptor belongs to the parent's address space and its reader thread did not
         * come along: the child makes its own on first use. */
        close(uffd);
        uffd = -1;
        atomic_store(&mode, -1);
    }
    pthread_mutex_unlock(&signal_mutex);
    pthread_mutex_unlock(&guard_mutex);
}
