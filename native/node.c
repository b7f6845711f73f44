/* Manager nodes: reference counts and reserve-and-rollback budget accounting. */
#include "oc_core.h"

#include <stdlib.h>
#include <string.h>

/* ---- per-thread slot indices, recycled when a thread exits ---- */

static pthread_mutex_t slot_lock = PTHREAD_MUTEX_INITIALIZER;
static int free_slots[OC_THREAD_SLOTS];
static int free_slot_count = -1; /* -1: not yet filled */
static OC_TLS int thread_slot = -1;
static pthread_key_t slot_key;

static void slot_release(void *p)
{
    int slot = (int)(intptr_t)p - 1;
    pthread_mutex_lock(&slot_lock);
    free_slots[free_slot_count++] = slot;
    pthread_mutex_unlock(&slot_lock);
}

int oc_thread_slot(void)
{
    if (thread_slot >= 0) {
        return thread_slot;
    }
    pthread_mutex_lock(&slot_lock);
    if (free_slot_count < 0) {
        pthread_key_create(&slot_key, slot_release);
        for (int i = 0; i < OC_THREAD_SLOTS; i++) {
            free_slots[i] = OC_THREAD_SLOTS - 1 - i;
        }
        free_slot_count = OC_THREAD_SLOTS;
    }
    if (free_slot_count > 0) {
        thread_slot = free_slots[--free_slot_count];
        pthread_setspecific(slot_key, (void *)(intptr_t)(thread_slot + 1));
    }
    else {
        thread_slot = OC_THREAD_SLOTS; /* shared, atomic */
    }
    pthread_mutex_unlock(&slot_lock);
    return thread_slot;
}

void oc_count_allocation(oc_node *n, int64_t bytes, int64_t count)
{
    int s = oc_thread_slot();
    oc_slot *slot = &n->slots[s];
    if (s < OC_THREAD_SLOTS) {
        atomic_store_explicit(&slot->total_bytes,
                              atomic_load_explicit(&slot->total_bytes, memory_order_relaxed) + bytes,
                              memory_order_relaxed);
        atomic_store_explicit(&slot->total_count,
                              atomic_load_explicit(&slot->total_count, memory_order_relaxed) + count,
                              memory_order_relaxed);
        atomic_store_explicit(&slot->live_count,
                              atomic_load_explicit(&slot->live_count, memory_order_relaxed) + count,
                              memory_order_relaxed);
    }
    else {
        atomic_fetch_add_explicit(&slot->total_bytes, bytes, memory_order_relaxed);
        atomic_fetch_add_explicit(&slot->total_count, count, memory_order_relaxed);
        atomic_fetch_add_explicit(&slot->live_count, count, memory_order_relaxed);
    }
}

void oc_live_add(oc_node *n, int64_t count)
{
    int s = oc_thread_slot();
    oc_slot *slot = &n->slots[s];
    if (s < OC_THREAD_SLOTS) {
        /* Release: every earlier access to the node happens before a sweep can see zero. */
        atomic_store_explicit(&slot->live_count,
                              atomic_load_explicit(&slot->live_count, memory_order_relaxed) + count,
                              memory_order_release);
    }
    else {
        atomic_fetch_add_explicit(&slot->live_count, count, memory_order_release);
    }
}

int64_t oc_live_count(oc_node *n)
{
    int64_t sum = 0;
    for (int i = 0; i <= OC_THREAD_SLOTS; i++) {
        sum += atomic_load_explicit(&n->slots[i].live_count, memory_order_acquire);
    }
    return sum;
}

int64_t oc_total_bytes(oc_node *n)
{
    int64_t sum = 0;
    for (int i = 0; i <= OC_THREAD_SLOTS; i++) {
        sum += atomic_load_explicit(&n->slots[i].total_bytes, memory_order_relaxed);
    }
    return sum;
}

int64_t oc_total_count(oc_node *n)
{
    int64_t sum = 0;
    for (int i = 0; i <= OC_THREAD_SLOTS; i++) {
        sum += atomic_load_explicit(&n->slots[i].total_count, memory_order_relaxed);
    }
    return sum;
}

static atomic_uint_fast64_t next_node_id = 1;

oc_node *oc_node_new(oc_node *parent, int64_t max_bytes)
{
    oc_node *n = calloc(1, sizeof(oc_node));
    if (n == NULL) {
        return NULL;
    }
    n->slots = aligned_alloc(64, sizeof(oc_slot) * (OC_THREAD_SLOTS + 1));
    if (n->slots == NULL) {
        free(n);
        return NULL;
    }
    memset(n->slots, 0, sizeof(oc_slot) * (OC_THREAD_SLOTS + 1));
    n->parent = parent;
    if (parent != NULL) {
        oc_node_incref(parent);
    }
    n->id = atomic_fetch_add(&next_node_id, 1);
    atomic_init(&n->refcnt, 1);
    atomic_init(&n->max_bytes, max_bytes);
    return n;
}

void oc_node_incref(oc_node *n) { atomic_fetch_add_explicit(&n->refcnt, 1, memory_order_relaxed); }

/* Unreferenced nodes that still own blocks: freed by oc_sweep_zombies once their blocks are
 * gone (their live count only falls: nothing can allocate through them or move blocks in). */
static pthread_mutex_t zombie_lock = PTHREAD_MUTEX_INITIALIZER;
static oc_node *zombies;

void oc_node_decref(oc_node *n)
{
    /* Iterative so that a long chain of dead ancestors does not recurse. */
    while (n != NULL && atomic_fetch_sub_explicit(&n->refcnt, 1, memory_order_acq_rel) == 1) {
        if (oc_live_count(n) != 0) {
            pthread_mutex_lock(&zombie_lock);
            n->next_zombie = zombies;
            zombies = n;
            pthread_mutex_unlock(&zombie_lock);
            return;
        }
        oc_node *parent = n->parent;
        free(n->slots);
        free(n->workspace);
        free(n);
        n = parent;
    }
}

void oc_sweep_zombies(void)
{
    oc_node *dead = NULL;
    pthread_mutex_lock(&zombie_lock);
    for (oc_node **link = &zombies; *link != NULL;) {
        oc_node *z = *link;
        if (oc_live_count(z) == 0) {
            *link = z->next_zombie;
            z->next_zombie = dead;
            dead = z;
        }
        else {
            link = &z->next_zombie;
        }
    }
    pthread_mutex_unlock(&zombie_lock);
    while (dead != NULL) {
        oc_node *z = dead;
        dead = z->next_zombie;
        oc_node *parent = z->parent;
        free(z->slots);
        free(z->workspace);
        free(z);
        if (parent != NULL) {
            oc_node_decref(parent);
        }
    }
}

static inline void raise_peak(oc_node *p, int64_t now)
{
    int64_t peak = atomic_load_explicit(&p->peak_bytes, memory_order_relaxed);
    while (now > peak &&
           !atomic_compare_exchange_weak_explicit(&p->peak_bytes, &peak, now, memory_order_relaxed,
                                                  memory_order_relaxed)) {
    }
}

/* Adds `bytes` to n and each ancestor below `stop`.  On a budget refusal everything added is
 * rolled back and the refusing node is returned; NULL means success. */
oc_node *oc_reserve_until(oc_node *n, oc_node *stop, int64_t bytes)
{
    for (oc_node *p = n; p != stop; p = p->parent) {
        int64_t now = atomic_fetch_add_explicit(&p->current_bytes, bytes, memory_order_relaxed) + bytes;
        int64_t limit = atomic_load_explicit(&p->max_bytes, memory_order_relaxed);
        if (limit >= 0 && now > limit && bytes > 0) {
            atomic_fetch_sub_explicit(&p->current_bytes, bytes, memory_order_relaxed);
            for (oc_node *q = n; q != p; q = q->parent) {
                atomic_fetch_sub_explicit(&q->current_bytes, bytes, memory_order_relaxed);
            }
            return p;
        }
    }
    return NULL;
}

/* Called once memory is really in use: peaks never count a request that was refused or that
 * the system could not serve. */
void oc_raise_peaks(oc_node *n)
{
    for (oc_node *p = n; p != NULL; p = p->parent) {
        raise_peak(p, atomic_load_explicit(&p->current_bytes, memory_order_relaxed));
    }
}

void oc_release_until(oc_node *n, oc_node *stop, int64_t bytes)
{
    for (oc_node *p = n; p != stop; p = p->parent) {
        atomic_fetch_sub_explicit(&p->current_bytes, bytes, memory_order_relaxed);
    }
}

oc_node *oc_reserve(oc_node *n, int64_t bytes) { return oc_reserve_until(n, NULL, bytes); }

void oc_release(oc_node *n, int64_t bytes) { oc_release_until(n, NULL, bytes); }

void oc_force_reserve(oc_node *n, int64_t bytes)
{
    for (oc_node *p = n; p != NULL; p = p->parent) {
        atomic_fetch_add_explicit(&p->current_bytes, bytes, memory_order_relaxed);
    }
}

oc_node *oc_common_ancestor(oc_node *a, oc_node *b)
{
    for (oc_node *p = a; p != NULL; p = p->parent) {
        for (oc_node *q = b; q != NULL; q = q->parent) {
            if (p == q) {
                return p;
            }
        }
    }
    return NULL;
}

void oc_nodes_atfork(int phase)
{
    if (phase == OC_FORK_PREPARE) {
        pthread_mutex_lock(&slot_lock);
        pthread_mutex_lock(&zombie_lock);
        return;
    }
    pthread_mutex_unlock(&zombie_lock);
    pthread_mutex_unlock(&slot_lock);
}
