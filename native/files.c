/*
 * Temporary files and the disk space they hold, under every file the extension writes (spill,
 * the heap file, arenas, compressed spill, the pager's spill files): the private spill
 * directory, unnamed files in it (O_TMPFILE, or created 0600 and unlinked at once, so nothing
 * is left behind after a crash), space reserved before any page of a file mapping is written
 * (a full disk is an error code, never SIGBUS later), and the bytes counted against
 * max_spill_bytes.
 */
#include "oc_core.h"
#include "oc_files.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
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


/* Small files get their space by writing zeros: the file system reserves the blocks at
 * write() (a full disk is ENOSPC there, as with posix_fallocate), at a sixth of the cost of
 * posix_fallocate on ext4 (35 us against 230 us for 8 KiB, BENCHMARKS.md), which matters
 * when every array of a page or more is placed on disk (location="mmap"). */
#define ZEROED_FILE_MAX_BYTES ((size_t)256 << 10)
static const char zeros[ZEROED_FILE_MAX_BYTES];

int oc_reserve_zeros(int fd, uint64_t offset, size_t bytes)
{
    for (size_t done = 0; done < bytes;) {
        size_t step = bytes - done < sizeof(zeros) ? bytes - done : sizeof(zeros);
        int err = oc_pwrite_all(fd, zeros, step, offset + done);
        if (err) {
            return err;
        }
        done += step;
    }
    return 0;
}

/* An unnamed temporary file with `bytes` of space reserved, counted against max_spill_bytes;
 * -errno on failure (nothing counted then).  A caller that fails later unreserves. */
int oc_open_reserved_file(size_t bytes)
{
    int reserved = oc_disk_reserve(bytes);
    if (reserved) {
        return -reserved;
    }
    int fd = oc_open_file(bytes);
    if (fd < 0) {
        oc_disk_unreserve(bytes);
    }
    return fd;
}

/* Every large on-disk region and arena holds a descriptor (fork and unspill need its file):
 * past the soft limit, go up to the hard one, and where the process may, raise the hard one to
 * the kernel's ceiling (fs.nr_open). */
static int raise_file_limit(void)
{
    struct rlimit r;
    if (getrlimit(RLIMIT_NOFILE, &r) != 0) {
        return 0;
    }
    rlim_t ceiling = r.rlim_max;
    FILE *f = fopen("/proc/sys/fs/nr_open", "r");
    if (f != NULL) {
        unsigned long long n;
        if (fscanf(f, "%llu", &n) == 1 && n > ceiling) {
            ceiling = (rlim_t)n;
        }
        fclose(f);
    }
    if (r.rlim_cur >= ceiling) {
        return 0;
    }
    struct rlimit wanted = {.rlim_cur = ceiling, .rlim_max = ceiling};
    if (setrlimit(RLIMIT_NOFILE, &wanted) == 0) {
        return 1;
    }
    if (r.rlim_cur >= r.rlim_max) {
        return 0;
    }
    r.rlim_cur = r.rlim_max;
    return setrlimit(RLIMIT_NOFILE, &r) == 0;
}

int oc_open_unnamed_file(void)
{
    char path[PATH_MAX + 32];
    pthread_mutex_lock(&dir_mutex);
    snprintf(path, sizeof(path), "%s", spill_dir);
    pthread_mutex_unlock(&dir_mutex);
    int fd = open(path, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0 && errno == EMFILE && raise_file_limit()) {
        fd = open(path, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    }
    if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
        size_t n = strlen(path);
        snprintf(path + n, sizeof(path) - n, "/spill-XXXXXX");
        fd = mkostemp(path, O_CLOEXEC); /* mode 0600 */
        if (fd >= 0) {
            unlink(path);
        }
    }
    return fd < 0 ? -errno : fd;
}

/* An unnamed temporary file with `bytes` of space reserved (not counted); fd or -errno. */
int oc_open_file(size_t bytes)
{
    int fd = oc_open_unnamed_file();
    if (fd < 0) {
        return fd;
    }
    int err = bytes <= ZEROED_FILE_MAX_BYTES ? oc_reserve_zeros(fd, 0, bytes) : posix_fallocate(fd, 0, (off_t)bytes);
    if (err != 0) {
        close(fd);
        return -err;
    }
    return fd;
}

/* Writes all of data at offset; 0 or an errno value (a write of nothing: ENOSPC). */
int oc_pwrite_all(int fd, const char *data, size_t bytes, uint64_t offset)
{
    for (size_t done = 0; done < bytes;) {
        ssize_t n = pwrite(fd, data + done, bytes - done, (off_t)(offset + done));
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            return errno;
        }
        if (n == 0) {
            return ENOSPC;
        }
        done += (size_t)n;
    }
    return 0;
}

/* Reads exactly n bytes at offset, *got the bytes read: 0; -1 with errno; 1 when the file ends
 * first (errno EIO). */
int oc_pread_all(int fd, char *dst, size_t n, int64_t offset, size_t *got)
{
    *got = 0;
    while (*got < n) {
        ssize_t r = pread(fd, dst + *got, n - *got, (off_t)(offset + (int64_t)*got));
        if (r < 0) {
            if (errno == EINTR) {
                continue;
            }
            return -1;
        }
        if (r == 0) {
            errno = EIO;
            return 1;
        }
        *got += (size_t)r;
    }
    return 0;
}

/* Writes n bytes from p (aligned to OC_DIRECT_ALIGN) at the file's position (aligned too), the
 * whole blocks with O_DIRECT where the file system takes it, past the page cache, the rest as
 * oc_write_all does; 0 or an errno value.
 *
 * Why: a file written through the page cache takes a fresh page per 4 KiB, and on a virtual
 * machine whose free memory is handed back to the host each fresh page is a fault of the host
 * as well (1 GiB in files of 4 MiB here: 1.6-2.0 s of CPU through the page cache, 0.09 s
 * direct).  The pages of a large output would also push everything else out of the cache.  A
 * file system without direct I/O (EINVAL) gets the buffered write. */
int oc_write_direct(int fd, const char *p, size_t n)
{
    size_t whole = n / OC_DIRECT_ALIGN * OC_DIRECT_ALIGN;
    off_t at = whole ? lseek(fd, 0, SEEK_CUR) : -1;
    int flags = at >= 0 && at % OC_DIRECT_ALIGN == 0 && (uintptr_t)p % OC_DIRECT_ALIGN == 0
                    ? fcntl(fd, F_GETFL)
                    : -1;
    if (flags >= 0 && fcntl(fd, F_SETFL, flags | O_DIRECT) == 0) {
        int result = 0;
        while (whole > 0) {
            ssize_t w = write(fd, p, whole);
            if (w < 0 && errno == EINTR) {
                continue;
            }
            if (w <= 0 || (size_t)w % OC_DIRECT_ALIGN) {
                /* refused (EINVAL: no direct I/O here) or cut short: the rest buffered */
                result = w < 0 && errno != EINVAL ? errno : 0;
                if (w > 0) {
                    p += w;
                    n -= (size_t)w;
                }
                break;
            }
            p += w;
            n -= (size_t)w;
            whole -= (size_t)w;
        }
        if (fcntl(fd, F_SETFL, flags) != 0 && result == 0) {
            result = errno;
        }
        if (result != 0) {
            return result;
        }
    }
    return oc_write_all(fd, p, n);
}

/* Writes n bytes at the file's position; 0 or an errno value (a write of nothing: EIO). */
int oc_write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) {
            continue;
        }
        if (w <= 0) {
            return w < 0 ? errno : EIO;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* A copy-on-write mapping of the file over data (fork's private mappings); 0 or errno. */
int oc_make_private(char *data, size_t bytes, int fd, uint64_t offset)
{
    void *p = mmap(data, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED | MAP_NORESERVE, fd,
                   (off_t)offset);
    return p == MAP_FAILED ? errno : 0;
}

/* The directory stays put across a fork (held by the preparing thread). */
void oc_files_atfork(int phase)
{
    if (phase == OC_FORK_PREPARE) {
        pthread_mutex_lock(&dir_mutex);
    }
    else {
        pthread_mutex_unlock(&dir_mutex);
    }
}
