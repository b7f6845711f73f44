/*
 * max_physical_bytes at allocation time.  The watcher thread (Python) looks at resident memory
 * a hundred times a second near the limit, which is too slow for threads allocating gigabytes a
 * second: each new RAM region adds its size to an estimate of resident memory, and when the
 * estimate passes the limit the allocating thread measures, spills the oldest regions, and if
 * that is not enough places the new block on disk.
 */
#include "oc_core.h"
#include "oc_regions.h"
#include "oc_spill.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

atomic_int_fast64_t oc_physical_limit = -1;
static atomic_int_fast64_t estimate; /* resident anonymous + shared-memory bytes, believed */

void oc_physical_sample(int64_t resident_bytes) { atomic_store(&estimate, resident_bytes); }

/* RssAnon + RssShmem from /proc/self/status, or -1. */
int64_t oc_resident_unreclaimable(void)
{
    char buf[4096];
    int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return -1;
    }
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0) {
        return -1;
    }
    buf[n] = '\0';
    int64_t total = 0;
    const char *keys[2] = {"\nRssAnon:", "\nRssShmem:"};
    for (int i = 0; i < 2; i++) {
        const char *at = strstr(buf, keys[i]);
        if (at == NULL) {
            return -1;
        }
        total += strtoll(at + strlen(keys[i]), NULL, 10) * 1024;
    }
    return total;
}

int oc_physical_admit(int64_t size)
{
    int64_t limit = atomic_load_explicit(&oc_physical_limit, memory_order_relaxed);
    if (limit < 0 || atomic_fetch_add(&estimate, size) + size <= limit) {
        return 1;
    }
    int64_t resident = oc_resident_unreclaimable();
    if (resident < 0) {
        return 1;
    }
    atomic_store(&estimate, resident + size);
    if (resident + size <= limit) {
        return 1;
    }
    oc_region_cache_trim(0); /* cached free regions hold no data: they go first */
    int64_t low_watermark = limit / 10 * 9;
    int err;
    oc_registry_lock();
    int64_t released = oc_evict(NULL, resident + size - low_watermark, &err);
    oc_registry_unlock();
    atomic_fetch_sub(&estimate, released);
    return resident + size - released <= limit;
}
