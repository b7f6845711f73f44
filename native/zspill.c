/*
 * Compressed spill (spill="zarr", location="zarr"): a region's data is written as compressed
 * chunks (byte shuffle by 8, then zstd level 1, one frame per 1 MiB unit, on every core) to an
 * unnamed file in the private spill directory, and paged back on touch at the same address by
 * the pager (pager.c), which keeps the range registered for missing-page faults.
 *
 * Moving out follows the raw spill's rules (spill.c, moves.c): writers wait (the guard
 * write-protects the range) while the chunks are encoded and written; the fresh registered
 * range then replaces the pages in one mremap, so memory under a live array is never unmapped
 * or reused; a full disk (or max_spill_bytes) is an errno before anything changed.  Writes
 * after a page-in are tracked by the pager (write-protect faults): a spilled-then-written unit
 * is dirty, stays in RAM, and is encoded again on the region's next spill.  Bringing the
 * region back fills every unit and unregisters the range: ordinary anonymous memory again.
 *
 * fork: the pager's child registers the range again and fills what was not resident from the
 * inherited file, which neither process writes over (chunks written later are appended, and
 * a child never writes into it).
 *
 * The file has no name (O_TMPFILE, or unlinked at once): it goes when the region is freed or
 * brought back, or with the process.
 */
#include "oc_core.h"
#include "oc_regions.h"
#include "oc_files.h"
#include "oc_spill.h"
#include "oc_pager.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define ZS_UNIT_BYTES ((size_t)1 << 20)
#define ZS_MAX_THREADS 8

atomic_int oc_zspill_enabled;

typedef struct {
    const char *data;
    size_t bytes, nunits;
    int fd;
    int64_t *table;
    atomic_size_t next;
    atomic_llong file_end, stored;
    atomic_int err;
} zs_job;

static void *encode_units(void *arg)
{
    zs_job *j = arg;
    for (;;) {
        size_t u = atomic_fetch_add(&j->next, 1);
        if (u >= j->nunits || atomic_load(&j->err)) {
            break;
        }
        size_t off = u * ZS_UNIT_BYTES;
        size_t n = j->bytes - off < ZS_UNIT_BYTES ? j->bytes - off : ZS_UNIT_BYTES;
        int err = oc_zs_encode_append(j->fd, &j->file_end, j->data + off, n, &j->table[3 * u]);
        if (err) {
            int zero = 0;
            atomic_compare_exchange_strong(&j->err, &zero, err);
            break;
        }
        atomic_fetch_add(&j->stored, j->table[3 * u + 2]);
    }
    return NULL;
}

/* Encodes every unit on up to ZS_MAX_THREADS threads (this one included). */
static int encode_all(zs_job *j)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    size_t want = cpus < 1 ? 1 : cpus > ZS_MAX_THREADS ? ZS_MAX_THREADS : (size_t)cpus;
    if (want > j->nunits) {
        want = j->nunits ? j->nunits : 1;
    }
    pthread_t threads[ZS_MAX_THREADS];
    size_t started = 0;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    for (size_t i = 1; i < want; i++) {
        if (pthread_create(&threads[started], NULL, encode_units, j) != 0) {
            break;
        }
        started++;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    encode_units(j);
    for (size_t i = 0; i < started; i++) {
        pthread_join(threads[i], NULL);
    }
    return atomic_load(&j->err);
}

static void count_in(oc_node *owner, int64_t size, long long stored)
{
    atomic_fetch_add(&owner->spilled_bytes, size);
    atomic_fetch_add(&owner->compressed_bytes, size);
    atomic_fetch_add(&owner->compressed_disk_bytes, stored);
}

static void count_out(oc_node *owner, int64_t size, long long stored)
{
    atomic_fetch_sub(&owner->spilled_bytes, size);
    atomic_fetch_sub(&owner->compressed_bytes, size);
    atomic_fetch_sub(&owner->compressed_disk_bytes, stored);
}

int oc_zspill_block(oc_header *h)
{
    unsigned flags = atomic_load(&h->flags);
    if (!(flags & OC_FLAG_REGION) || (flags & (OC_FLAG_ON_DISK | OC_FLAG_ZSPILLED | OC_FLAG_COW))) {
        return 0;
    }
    if (!atomic_load(&oc_zspill_enabled)) {
        return ENOTSUP;
    }
    char *data = oc_block_data(h);
    size_t bytes = oc_region_data_bytes(h);
    zs_job j = {.data = data, .bytes = bytes, .nunits = (bytes + ZS_UNIT_BYTES - 1) / ZS_UNIT_BYTES};
    j.table = malloc(3 * j.nunits * sizeof(int64_t));
    if (j.table == NULL) {
        return ENOMEM;
    }
    j.fd = oc_open_unnamed_file();
    if (j.fd < 0) {
        free(j.table);
        return -j.fd;
    }
    oc_node *owner = atomic_load(&h->owner);
    oc_guard guard;
    oc_guard_out_begin(&guard, data, bytes);
    int err = encode_all(&j);
    /* on disk when spill returns, as with the raw spill (the file is much smaller) */
    if (!err && fdatasync(j.fd) != 0) {
        err = errno;
    }
    pg_array *a = NULL;
    if (!err) {
        err = oc_pager_adopt(&a, data, bytes, j.fd, j.table, atomic_load(&j.file_end),
                             atomic_load(&j.stored), ZS_UNIT_BYTES, owner);
    }
    oc_guard_out_end(&guard, err != 0);
    if (err) {
        close(j.fd);
        free(j.table);
        oc_disk_unreserve((size_t)atomic_load(&j.file_end));
        return err;
    }
    posix_fadvise(j.fd, 0, 0, POSIX_FADV_DONTNEED);
    *oc_region_pager(h) = a;
    atomic_fetch_or(&h->flags, OC_FLAG_ZSPILLED);
    int64_t size = (int64_t)h->size;
    oc_release(owner, size);
    count_in(owner, size, atomic_load(&j.stored));
    atomic_fetch_add(&owner->spill_count, 1);
    atomic_fetch_add(&owner->spill_moved_bytes, size);
    return 0;
}

int oc_zunspill_block(oc_header *h)
{
    if (!(atomic_load(&h->flags) & OC_FLAG_ZSPILLED)) {
        return 0;
    }
    pg_array *a = *oc_region_pager(h);
    int err = oc_pager_fill_all(a);
    if (err) {
        return err;
    }
    long long stored = oc_pager_stored_bytes(a);
    char *data = oc_block_data(h);
    size_t bytes = oc_region_data_bytes(h);
    oc_pager_disown(a, 1);
    *oc_region_pager(h) = NULL;
    atomic_fetch_and(&h->flags, ~OC_FLAG_ZSPILLED);
    oc_node *owner = atomic_load(&h->owner);
    int64_t size = (int64_t)h->size;
    count_out(owner, size, stored);
    atomic_fetch_add(&owner->unspill_count, 1);
    atomic_fetch_add(&owner->unspill_moved_bytes, size);
    if (bytes >= ((size_t)4 << 20) && atomic_load_explicit(&oc_huge_pages, memory_order_relaxed)) {
        madvise(data, bytes, MADV_HUGEPAGE);
    }
    oc_registry_unlink(h); /* newest again */
    oc_registry_link(h);
    return 0;
}

int64_t oc_zspill_again(oc_header *h, int *err)
{
    *err = 0;
    if (!(atomic_load(&h->flags) & OC_FLAG_ZSPILLED)) {
        return 0;
    }
    return (int64_t)oc_pager_spill_again(*oc_region_pager(h), err);
}

void oc_zspill_forget(oc_header *h)
{
    pg_array *a = *oc_region_pager(h);
    /* Discarded first: that waits for a write-back in flight (a fill elsewhere under budget
     * pressure may be encoding one of its units) and uncounts its chunks, that one's too. */
    oc_pager_discard(a, 0);
    oc_pager_disown(a, 0);
    *oc_region_pager(h) = NULL;
    count_out(atomic_load(&h->owner), (int64_t)h->size, 0);
    /* OC_FLAG_ZSPILLED stays: the mapping is not cached for reuse (regions.c) */
}

void oc_zspill_move(oc_header *h, oc_node *from, oc_node *to)
{
    pg_array *a = *oc_region_pager(h);
    long long stored = oc_pager_stored_bytes(a);
    count_out(from, (int64_t)h->size, stored);
    count_in(to, (int64_t)h->size, stored);
    oc_pager_set_node(a, to);
}

/* A range over `data` adopted by the pager with every chunk absent (it reads as zeros), in a
 * fresh unnamed file; NULL with *err. */
static pg_array *adopt_fresh(char *data, size_t bytes, oc_node *owner, int *err)
{
    size_t nunits = (bytes + ZS_UNIT_BYTES - 1) / ZS_UNIT_BYTES;
    int64_t *table = malloc(3 * nunits * sizeof(int64_t));
    int fd = table == NULL ? -ENOMEM : oc_open_unnamed_file();
    pg_array *a = NULL;
    *err = fd < 0 ? -fd : 0;
    if (!*err) {
        for (size_t u = 0; u < nunits; u++) {
            table[3 * u] = -1;
            table[3 * u + 1] = table[3 * u + 2] = 0;
        }
        *err = oc_pager_adopt(&a, data, bytes, fd, table, 0, 0, ZS_UNIT_BYTES, owner);
    }
    if (*err) {
        if (fd >= 0) {
            close(fd);
        }
        free(table);
        return NULL;
    }
    return a;
}

/* location="zarr": a region whose chunks are all absent (zeros); touched units come into RAM
 * and count on the budget, and are encoded when the region is spilled again. */
void *oc_zspill_new_region(oc_node *owner, size_t size, int *err)
{
    size_t page = oc_page_bytes();
    size_t data_bytes = (size + page - 1) / page * page;
    size_t map_bytes;
    char *data = oc_map_fresh(data_bytes, &map_bytes);
    if (data == NULL) {
        *err = errno ? errno : ENOMEM;
        return NULL;
    }
    pg_array *a = adopt_fresh(data, data_bytes, owner, err);
    if (a == NULL) {
        munmap(data - page, map_bytes);
        return NULL;
    }
    oc_header *h = oc_header_of(data);
    h->map_bytes = map_bytes;
    *oc_region_pager(h) = a;
    return data;
}

/* ---- a workspace arena with location="zarr" (workspace.c) ----
 *
 * The arena's range is adopted like a location="zarr" region: nothing of it is reserved on
 * the budget; its size counts as compressed (logical) bytes of the workspace, the units its
 * cycles touch come into RAM and are charged by the pager, and over the budget dirty units are
 * encoded to the arena's file and dropped.  Between cycles its contents are dead: every unit
 * is dropped unencoded and reads as zeros again (oc_zspill_arena_reset). */

pg_array *oc_zspill_arena_new(char *base, size_t capacity, oc_node *node, int *err)
{
    pg_array *a = adopt_fresh(base, capacity, node, err);
    if (a != NULL) {
        count_in(node, (int64_t)capacity, 0);
    }
    return a;
}

void oc_zspill_arena_reset(pg_array *a) { oc_pager_discard(a, 1); }

/* The arena's chunk is unmapped (its last block is gone): the range is unregistered first.
 * Discarding it first waits for write-backs in flight (a fill elsewhere under budget pressure
 * may be encoding one of its units), so that their chunks are uncounted too. */
void oc_zspill_arena_free(pg_array *a, size_t capacity, oc_node *node)
{
    oc_pager_discard(a, 0);
    count_out(node, (int64_t)capacity, 0);
    oc_pager_disown(a, 0);
}
