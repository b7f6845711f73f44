/*
 * A unit the pager cannot fill (a damaged chunk, an I/O error) raises CorruptChunkError in
 * the Python thread that touched it, instead of killing the process.
 *
 * The fill thread cannot raise in the faulting thread (it may hold the GIL, and an exception
 * belongs to one thread), and the faulting instruction must complete before that thread can
 * run Python again.  So the failed unit is poisoned (UFFDIO_POISON, pager_fill.c) and each access
 * gets SIGBUS in the thread that made it; this file's handler then
 *  - installs a placeholder page (every byte 0xFF: NaN for every float type, -1 for signed
 *    integers) at the faulting page only, so that the instruction completes; a thread keeps
 *    its last few (2 to KEPT_PAGES) and older ones are poisoned again, so that other threads
 *    reading the same damaged chunk meanwhile fault (and raise) too, but on those few pages;
 *  - records the failure for that thread (a table keyed by thread id: no thread-local storage,
 *    whose first touch in a module loaded by dlopen may call malloc), and
 *  - sets the thread's asynchronous exception (PyThreadState.async_exc, the mechanism of
 *    PyThreadState_SetAsyncExc) to the registered CorruptChunkError subclass and trips the
 *    interpreter's eval breaker.  Only the thread itself reads that field, with the GIL: the
 *    store from its own signal handler races with nothing but another thread's
 *    PyThreadState_SetAsyncExc for it (then one of the two is raised).
 * The thread raises at its next eval-breaker check (after the call that touched the memory
 * returns, before its result is stored; see the README for exactly what holds).  Creating
 * that exception (its constructor, with the GIL) takes the thread's record for the message
 * and drops every failed unit (oc_pager_drop_failed): the placeholders go, the next touch
 * reads the chunk again, and fails again (or succeeds, if it was a passing I/O error).
 *
 * A thread with no Python thread state (a native worker: BLAS, OpenMP) has nothing to raise
 * in: the handler passes the signal on (to faulthandler or the default action, which ends the
 * process), after writing the reason to stderr.  Faults inside the kernel (read() into the
 * array, write() from it) are not signals: the system call fails with EFAULT.
 *
 * The handler is installed once, when the pager's threads first start, on top of what is
 * there then (faulthandler when it was enabled before, as pytest and -X faulthandler do), and
 * passes every other SIGBUS on to it.  A handler installed later over this one sees the
 * pager's SIGBUS first: faulthandler then prints its dump, puts this handler back and raises
 * SIGBUS again; that sent signal is ignored here (when a pager failure was seen and only the
 * default action was there before this handler), and the faulting access, retried, reaches
 * this handler and raises as above.
 */
#include "pager_int.h"
#include "oc_regions.h"

/* CPython 3.11's internal pycore_ceval.h declares it; libpython exports it (what
 * PyThreadState_SetAsyncExc calls after setting async_exc) */
PyAPI_FUNC(void) _PyEval_SignalAsyncExc(PyInterpreterState *interp);

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

enum { PG_NOT_OURS, PG_RETRY, PG_FAILED };

#define FAULT_SLOTS 128
#define MSG_BYTES 448
/* Placeholder pages a thread keeps at most: more than one instruction can touch (an AVX-512
 * gather of 16 elements, each across a page boundary: 32), so that the faulting one always
 * completes.  It starts at 2 (an access across a page boundary) and doubles each time the
 * thread faults again on a page it had and gave back (an instruction touching more pages, or
 * a loop going back over them). */
#define KEPT_PAGES 64

static struct {
    atomic_int tid; /* 0: free */
    atomic_int ready;
    char msg[MSG_BYTES];
    uintptr_t kept[KEPT_PAGES];  /* placeholder pages installed for this thread, a ring */
    uintptr_t given[KEPT_PAGES]; /* the pages it gave back (poisoned again), a ring */
    int nkept, next_kept, next_given, cap;
} slots[FAULT_SLOTS];
static atomic_int pending; /* slots in use */

static PyObject *fault_type; /* the CorruptChunkError subclass raised; see oc_pager_errors_init */
static char *placeholder;    /* one page of 0xFF bytes */
static struct sigaction previous_bus;
static int installed;
static pthread_mutex_t install_lock = PTHREAD_MUTEX_INITIALIZER;
atomic_int pg_failures_seen; /* a unit failed since the process started: see on_bus */

static int current_tid(void) { return (int)syscall(SYS_gettid); }

static void say(const char *s)
{
    ssize_t w = write(2, s, strlen(s));
    (void)w;
}

/* This thread's slot, claimed if it has none; -1 when all are taken. */
static int claim_slot(int tid)
{
    for (int i = 0; i < FAULT_SLOTS; i++) {
        if (atomic_load(&slots[i].tid) == tid) {
            return i;
        }
    }
    for (int i = 0; i < FAULT_SLOTS; i++) {
        int free_tid = 0;
        if (atomic_compare_exchange_strong(&slots[i].tid, &free_tid, tid)) {
            atomic_store(&slots[i].ready, 0);
            slots[i].nkept = slots[i].next_kept = slots[i].next_given = 0;
            slots[i].cap = 2;
            memset(slots[i].given, 0, sizeof slots[i].given);
            atomic_fetch_add(&pending, 1);
            return i;
        }
    }
    return -1;
}

/* ---- the pager's side (pg_lock) ---- */

/* From the SIGBUS handler of the thread that touched addr: whether addr lies
 * in a unit that failed (PG_FAILED, its reason into msg, and with `page`, that page installed
 * at addr's page so that the access completes), in one that is not failed any more
 * (PG_RETRY: the access is tried again), or in no array (PG_NOT_OURS).  Under pg_lock, so
 * that oc_pager_drop_failed, which drops the unit's pages, comes before or after, never
 * between the check and the install: no placeholder outlives the failed state.  No thread
 * touches an array's memory while holding pg_lock, so taking it here cannot deadlock. */
static int fault_touch(uintptr_t addr, char *msg, size_t n, const char *page, int *install_err)
{
    *install_err = 0;
    pthread_mutex_lock(&pg_lock);
    pg_array *a = pg_find(addr);
    if (a == NULL) {
        pthread_mutex_unlock(&pg_lock);
        return PG_NOT_OURS;
    }
    size_t u = (addr - (uintptr_t)a->base) / a->unit_bytes;
    if (a->state[u] != U_FAILED) {
        pthread_mutex_unlock(&pg_lock);
        return PG_RETRY;
    }
    const char *why = a->unit_errors != NULL && a->unit_errors[u] != NULL ? a->unit_errors[u] : a->error;
    size_t k = 0; /* copied by hand: snprintf is not async-signal-safe */
    for (; k + 1 < n && why[k] != 0; k++) {
        msg[k] = why[k];
    }
    msg[k] = 0;
    if (page != NULL) {
        size_t pb = oc_page_bytes();
        struct uffdio_copy c = {.dst = addr & ~(uintptr_t)(pb - 1), .src = (uintptr_t)page, .len = pb};
        int rc;
        while ((rc = ioctl(pg_uffd, UFFDIO_COPY, &c)) != 0 && errno == EAGAIN) {
            c.copy = 0;
            pg_eagain_pause();
        }
        *install_err = rc == 0 || errno == EEXIST ? 0 : errno; /* EEXIST: another thread's */
    }
    pthread_mutex_unlock(&pg_lock);
    return PG_FAILED;
}

/* A placeholder page its thread has moved past (keep_placeholder keeps a few per thread): its
 * unit still failed, it is poisoned again, so that other threads touching it fault (and
 * raise) instead of reading the placeholder.  A page of a unit dropped or refilled since is
 * left alone. */
static void repoison(uintptr_t page_addr)
{
    size_t pb = oc_page_bytes();
    pthread_mutex_lock(&pg_lock);
    pg_array *a = pg_find(page_addr);
    if (a != NULL && a->state[(page_addr - (uintptr_t)a->base) / a->unit_bytes] == U_FAILED &&
        pg_can_poison()) {
        madvise((char *)page_addr, pb, MADV_DONTNEED);
        struct pg_uffdio_poison p = {.range = {.start = page_addr, .len = pb}};
        while (ioctl(pg_uffd, PG_UFFDIO_POISON, &p) != 0 && errno == EAGAIN) {
            pg_eagain_pause();
        }
    }
    pthread_mutex_unlock(&pg_lock);
}

/* Drops every failed unit of every array: its poison and the placeholder pages installed over
 * it go, and the next touch reads its chunks again.  What a failed unit holds is no data, so
 * no one can still reach any.  Without poison (kernels before 6.6) a failed unit stays
 * PROT_NONE, as it was. */
void oc_pager_drop_failed(void)
{
    if (!pg_can_poison()) {
        return;
    }
    size_t n = 0, cap = 0;
    struct {
        pg_array *a;
        size_t u;
    } *dropping = NULL;
    pthread_mutex_lock(&pg_lock);
    for (pg_array *a = pg_arrays; a != NULL; a = a->next) {
        for (size_t u = 0; u < a->nunits && !a->dead; u++) {
            if (a->state[u] != U_FAILED) {
                continue;
            }
            if (n == cap) {
                size_t more = cap ? 2 * cap : 16;
                void *p = realloc(dropping, more * sizeof *dropping);
                if (p == NULL) {
                    break; /* out of memory: the rest stay failed until the next raise */
                }
                dropping = p;
                cap = more;
            }
            a->state[u] = U_EVICTING; /* a touch meanwhile waits, or is retried */
            a->inflight++;
            dropping[n].a = a;
            dropping[n++].u = u;
        }
    }
    pthread_mutex_unlock(&pg_lock);
    for (size_t i = 0; i < n; i++) {
        pg_array *a = dropping[i].a;
        madvise(a->base + dropping[i].u * a->unit_bytes, unit_len(a, dropping[i].u), MADV_DONTNEED);
    }
    pthread_mutex_lock(&pg_lock);
    for (size_t i = 0; i < n; i++) {
        pg_array *a = dropping[i].a;
        size_t u = dropping[i].u;
        if (a->flags[u] & F_PARTIAL) { /* its readable pages were counted */
            atomic_fetch_sub(&a->resident_bytes, (long long)unit_len(a, u));
            if (a->node != NULL) {
                atomic_fetch_sub(&a->charged_bytes, (long long)unit_len(a, u));
                oc_release(a->node, (int64_t)unit_len(a, u));
            }
        }
        a->flags[u] = 0;
        a->state[u] = U_EMPTY;
        a->inflight--;
    }
    pthread_cond_broadcast(&pg_idle_cond);
    pthread_mutex_unlock(&pg_lock);
    for (size_t i = 0; i < n; i++) {
        /* threads that faulted on the dropped unit fault again, and are filled (the array
         * stays until inflight is back to 0, and pg_lock is not held here) */
        pg_uffd_wake(dropping[i].a->base + dropping[i].u * dropping[i].a->unit_bytes,
                     unit_len(dropping[i].a, dropping[i].u));
    }
    free(dropping);
}

/* ---- the handler ---- */

/* Slot s's thread has a placeholder at `page` now: its oldest ones beyond its cap are
 * poisoned again (see KEPT_PAGES). */
static void keep_placeholder(int s, uintptr_t page)
{
    for (int i = 0; i < KEPT_PAGES; i++) {
        if (slots[s].given[i] == page && slots[s].cap < KEPT_PAGES) {
            slots[s].cap *= 2; /* back on a page it gave back: it needs more at once */
            break;
        }
    }
    while (slots[s].nkept >= slots[s].cap) {
        uintptr_t old = slots[s].kept[slots[s].next_kept];
        slots[s].next_kept = (slots[s].next_kept + 1) % KEPT_PAGES;
        slots[s].nkept--;
        if (old != page) {
            repoison(old);
            slots[s].given[slots[s].next_given] = old;
            slots[s].next_given = (slots[s].next_given + 1) % KEPT_PAGES;
        }
    }
    slots[s].kept[(slots[s].next_kept + slots[s].nkept) % KEPT_PAGES] = page;
    slots[s].nkept++;
}

static void pass_on(int sig, siginfo_t *info, void *context)
{
    if (previous_bus.sa_flags & SA_SIGINFO) {
        previous_bus.sa_sigaction(sig, info, context);
    }
    else if (previous_bus.sa_handler != SIG_DFL && previous_bus.sa_handler != SIG_IGN) {
        previous_bus.sa_handler(sig);
    }
    else if (previous_bus.sa_handler == SIG_DFL) {
        signal(SIGBUS, SIG_DFL); /* a fault repeats and takes the default action */
        if (info->si_code <= 0) {
            raise(SIGBUS); /* a sent one is sent again (delivered when this handler returns) */
        }
    }
}

static void on_bus(int sig, siginfo_t *info, void *context)
{
    int saved_errno = errno;
    if (info->si_code <= 0) {
        /* Sent, not a fault.  After a pager failure, with nothing but the default action
         * before this handler, it is faulthandler (installed after this handler) raising
         * again what it saw: the retried access comes here directly. */
        if (info->si_pid == getpid() && atomic_load(&pg_failures_seen) > 0 &&
            !(previous_bus.sa_flags & SA_SIGINFO) &&
            (previous_bus.sa_handler == SIG_DFL || previous_bus.sa_handler == SIG_IGN)) {
            errno = saved_errno;
            return;
        }
        pass_on(sig, info, context);
        errno = saved_errno;
        return;
    }
    /* Python or not, decided before a placeholder goes in: without a thread state nothing
     * can raise, and the access must not complete */
    PyThreadState *ts = fault_type != NULL ? PyGILState_GetThisThreadState() : NULL;
    char msg[MSG_BYTES];
    int install_err;
    int found = fault_touch((uintptr_t)info->si_addr, msg, sizeof msg, ts != NULL ? placeholder : NULL,
                               &install_err);
    if (found == PG_NOT_OURS) {
        pass_on(sig, info, context);
        errno = saved_errno;
        return;
    }
    if (found == PG_RETRY) {
        errno = saved_errno; /* the unit is no longer poisoned: the access faults anew */
        return;
    }
    if (ts == NULL || install_err != 0) {
        /* the reason again, here: the fill thread's own report may come after this thread
         * has ended the process */
        say(ts == NULL ? "oocarray: a thread with no Python state touched a chunk-backed "
                         "array's unit that cannot be filled ("
                       : "oocarray: no placeholder page could be installed over a chunk-backed "
                         "array's unit that cannot be filled (");
        say(msg);
        say(ts == NULL ? "); nothing can raise there: SIGBUS\n" : "): SIGBUS\n");
        pass_on(sig, info, context);
        errno = saved_errno;
        return;
    }
    int tid = current_tid();
    int s = claim_slot(tid);
    if (s >= 0) {
        if (!atomic_load(&slots[s].ready)) {
            memcpy(slots[s].msg, msg, sizeof msg); /* the first failure this thread met */
            atomic_store(&slots[s].ready, 1);
        }
        /* The thread's oldest placeholder page goes back to poison: others touching it raise
         * too, rather than read it, while this thread goes on with its call.  Without a slot
         * (all taken) the placeholders stay until the next raise drops the failed units. */
        keep_placeholder(s, (uintptr_t)info->si_addr & ~(uintptr_t)(oc_page_bytes() - 1));
    }
    if (ts->async_exc == NULL) {
        ts->async_exc = fault_type; /* a reference of the reserve: see oc_pager_errors_init */
    }
    _PyEval_SignalAsyncExc(ts->interp);
    errno = saved_errno;
}

/* When the pager's threads start (pg_life_lock held): the handler, once per process, where the
 * kernel can poison (without it, a failed unit is PROT_NONE and its accesses get SIGSEGV). */
void pg_errors_arm(int can_poison)
{
    pthread_mutex_lock(&install_lock);
    if (!installed && can_poison) {
        size_t page = oc_page_bytes();
        char *p = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p != MAP_FAILED) {
            memset(p, 0xFF, page);
            mprotect(p, page, PROT_READ);
            placeholder = p;
            struct sigaction ours;
            memset(&ours, 0, sizeof ours);
            ours.sa_sigaction = on_bus;
            ours.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
            sigemptyset(&ours.sa_mask);
            installed = sigaction(SIGBUS, &ours, &previous_bus) == 0;
        }
    }
    pthread_mutex_unlock(&install_lock);
}

int oc_pager_errors_armed(void) { return installed; }

/* The class raised (GIL held): a CorruptChunkError subclass whose constructor, called with no
 * arguments, takes this thread's record (oc_pager_take_fault).  The handler stores it in a
 * thread state without touching its reference count (it may run without the GIL, while
 * another thread changes that count); the interpreter drops one reference per raise, so the
 * class holds a reserve of them, topped up as each raise is taken. */
#define RESERVE ((Py_ssize_t)1 << 24)
int oc_pager_errors_init(void)
{
    if (fault_type != NULL) {
        return 0;
    }
    /* looked up at the first use, not when the module is imported: oocarray imports this
     * module while it is being imported itself */
    PyObject *errors = PyImport_ImportModule("oocarray.errors");
    PyObject *type = errors == NULL ? NULL : PyObject_GetAttrString(errors, "PagedChunkError");
    Py_XDECREF(errors);
    if (type == NULL) {
        return -1;
    }
    Py_SET_REFCNT(type, Py_REFCNT(type) + RESERVE); /* the reference taken is kept too */
    fault_type = type;
    return 0;
}

/* This thread's failure (GIL held): its message into out (empty when there is none), and
 * every failed unit is dropped, so that the next touch reads its chunk again.  Where other
 * threads' failures are still waiting to be raised, the eval breaker is tripped again (the
 * interpreter clears it for all threads when the first one raises). */
void oc_pager_take_fault(char *out, size_t n)
{
    out[0] = 0;
    int tid = current_tid();
    for (int i = 0; i < FAULT_SLOTS; i++) {
        if (atomic_load(&slots[i].tid) == tid) {
            if (atomic_load(&slots[i].ready)) {
                snprintf(out, n, "%s", slots[i].msg);
            }
            atomic_store(&slots[i].ready, 0);
            atomic_store(&slots[i].tid, 0);
            atomic_fetch_sub(&pending, 1);
            Py_INCREF(fault_type); /* the reserve's reference this raise used */
            break;
        }
    }
    oc_pager_drop_failed();
    if (atomic_load(&pending) > 0) {
        _PyEval_SignalAsyncExc(PyInterpreterState_Get());
    }
}
