/* Where a chunk's stored bytes come from (source.c): a local file (open, or opened by the job
 * that reads it), or bytes in memory that were fetched from elsewhere (an object store, a zarr
 * store object).  The decoders read through it, so that every source decodes the same way. */
#ifndef OC_SOURCE_H
#define OC_SOURCE_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int fd;           /* an open file, or -1 */
    const char *path; /* else a file the job opens (reader.c), or NULL */
    const char *mem;  /* else these bytes */
    int64_t mem_len;
    /* checked: a job's stored bytes must have the CRC-32C crc, computed on from crc_seed (an
     * entry of the chunk cache: the seed is its version string's); they are read whole and
     * checked before any of them is decoded */
    int checked;
    uint32_t crc_seed, crc;
} oc_source;

static inline oc_source oc_file_source(int fd)
{
    return (oc_source){.fd = fd, .path = NULL, .mem = NULL, .mem_len = 0, .checked = 0};
}

/* Read exactly n bytes at offset; 0, or -1 with errno (EIO standing for "ended early"). */
int oc_source_read(const oc_source *src, char *dst, size_t n, int64_t offset, size_t *got);

/* The bytes from offset to the end of the source; -1 with errno when it cannot be told. */
int64_t oc_source_rest(const oc_source *src, int64_t offset);

/* n bytes at offset where they can be used in place (memory), else NULL: read them. */
const char *oc_source_at(const oc_source *src, int64_t offset, size_t n);

#endif
