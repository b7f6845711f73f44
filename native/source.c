/* Reading a chunk's stored bytes from its source: from a file (files.c's read loop), or a copy
 * out of memory (see oc_source.h). */
#include "oc_source.h"
#include "oc_files.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

int oc_source_read(const oc_source *src, char *dst, size_t n, int64_t offset, size_t *got)
{
    *got = 0;
    if (src->fd < 0) {
        if (offset < 0 || offset > src->mem_len) {
            errno = EIO;
            return -1;
        }
        size_t have = (size_t)(src->mem_len - offset);
        *got = have < n ? have : n;
        memcpy(dst, src->mem + offset, *got);
        if (*got < n) {
            errno = EIO;
            return -1;
        }
        return 0;
    }
    return oc_pread_all(src->fd, dst, n, offset, got) == 0 ? 0 : -1;
}

int64_t oc_source_rest(const oc_source *src, int64_t offset)
{
    if (src->fd < 0) {
        return src->mem_len - offset;
    }
    struct stat st;
    if (fstat(src->fd, &st) != 0) {
        return -1;
    }
    return (int64_t)st.st_size - offset;
}

const char *oc_source_at(const oc_source *src, int64_t offset, size_t n)
{
    if (src->fd >= 0 || offset < 0 || offset > src->mem_len ||
        n > (size_t)(src->mem_len - offset)) {
        return NULL;
    }
    return src->mem + offset;
}
