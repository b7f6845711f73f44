/*
 * fork keeps NumPy's meaning for every array oocarray places.  Anonymous memory is copied on
 * write by the kernel; on-disk regions and arenas are turned into copy-on-write mappings of
 * their files just before the fork (spill.c, workspace.c).  Every mutex of the extension is
 * held across the fork, so the child never inherits one locked by a thread it does not have,
 * and no move is half done when the address space is copied.
 */
#include "oc_core.h"
#include "oc_regions.h"
#include "oc_files.h"
#include "oc_spill.h"
#include "oc_workspace.h"
#include "oc_alloc.h"
#include "oc_chunks.h"
#include "oc_pager.h"

atomic_int_fast64_t oc_forks_prepared;

/* Locking order: the registry first (a move holds it while it takes the others). */
static void prepare(void)
{
    oc_regions_atfork(OC_FORK_PREPARE);
    /* after the registry: a compressed spill takes the pager's locks while it holds that */
    oc_pager_atfork(OC_FORK_PREPARE);
    oc_files_atfork(OC_FORK_PREPARE);
    oc_spill_atfork(OC_FORK_PREPARE);
    oc_heap_atfork(OC_FORK_PREPARE);
    oc_chunks_atfork(OC_FORK_PREPARE);
    oc_workspace_atfork(OC_FORK_PREPARE);
    oc_guard_atfork(OC_FORK_PREPARE);
    oc_nodes_atfork(OC_FORK_PREPARE);
    atomic_fetch_add(&oc_forks_prepared, 1);
}

static void release(int phase)
{
    oc_nodes_atfork(phase);
    oc_guard_atfork(phase);
    oc_workspace_atfork(phase);
    oc_chunks_atfork(phase);
    oc_heap_atfork(phase);
    oc_spill_atfork(phase);
    oc_files_atfork(phase);
    oc_pager_atfork(phase);
    oc_regions_atfork(phase);
}

static void in_parent(void) { release(OC_FORK_PARENT); }

static void in_child(void) { release(OC_FORK_CHILD); }

/* Called once, when the extension is loaded. */
void oc_fork_install(void) { pthread_atfork(prepare, in_parent, in_child); }
