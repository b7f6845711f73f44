/*
 * Writing chunks of a chunk-backed zarr array back to their files, without the GIL (pager.c
 * calls this from its worker threads under budget pressure, and from flush()).
 *
 * Each chunk is written whole or not at all, as the Python writer does
 * (oocarray/_storage/_zarr/_store.py): its stored bytes (raw, or one zstd frame at the store's
 * level, with a checksum when the store's codec says so; then a CRC-32C when the chain ends with
 * zarr's crc32c codec) go to a new file beside the chunk's (created with O_EXCL, then given the
 * mode the store's own files get), which is renamed over the chunk's file.  A reader, or a process
 * killed meanwhile, sees the old chunk or the new one, never a mix; a failed write (ENOSPC)
 * leaves the old chunk and removes the new file.  Like the Python writer, no fsync.  The last
 * chunk is stored whole, the rows past the array's end holding the fill value; a chunk's
 * directory (zarr v3's c/0/...) is made when it is missing.
 */
#include "oc_core.h"
#include "oc_files.h"
#include "oc_chunks.h"
#include "oc_codecs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* mkdir -p of dir (modified meanwhile, restored); 0 or errno. */
static int make_dirs(char *dir)
{
    if (mkdir(dir, 0777) == 0 || errno == EEXIST) {
        return 0;
    }
    if (errno != ENOENT) {
        return errno;
    }
    char *slash = strrchr(dir, '/');
    if (slash == NULL || slash == dir) {
        return ENOENT;
    }
    *slash = '\0';
    int err = make_dirs(dir);
    *slash = '/';
    if (err) {
        return err;
    }
    return mkdir(dir, 0777) == 0 || errno == EEXIST ? 0 : errno;
}

/* Replace the file at path by n bytes of data, whole or not at all; 0 or errno, with what
 * failed in `what`. */
static int replace_file(const char *path, const char *data, size_t n, int mode, const char **what)
{
    const char *slash = strrchr(path, '/');
    if (slash == NULL) {
        *what = "finding the chunk's directory (the path is not absolute)";
        return EINVAL;
    }
    size_t dir_n = (size_t)(slash - path);
    char *tmp = malloc(dir_n + 32);
    if (tmp == NULL) {
        *what = "allocating a path";
        return ENOMEM;
    }
    int fd = -1;
    for (int attempt = 0; attempt < 2 && fd < 0; attempt++) {
        snprintf(tmp, dir_n + 32, "%.*s/.tmp-wb-XXXXXX", (int)dir_n, path);
        fd = mkostemp(tmp, O_CLOEXEC); /* O_CREAT | O_EXCL, mode 0600 until fchmod */
        if (fd < 0 && errno == ENOENT && attempt == 0) {
            tmp[dir_n] = '\0';
            int err = make_dirs(tmp);
            if (err) {
                free(tmp);
                *what = "making the chunk's directory";
                return err;
            }
            continue;
        }
    }
    if (fd < 0) {
        int err = errno;
        free(tmp);
        *what = "creating a file beside the chunk";
        return err;
    }
    int err = 0;
    if (fchmod(fd, (mode_t)mode) != 0) {
        err = errno;
        *what = "setting the new file's mode";
    }
    else if ((err = oc_write_all(fd, data, n)) != 0) {
        *what = "writing the new chunk";
    }
    if (close(fd) != 0 && err == 0) {
        err = errno;
        *what = "closing the new chunk";
    }
    if (err == 0 && rename(tmp, path) != 0) {
        err = errno;
        *what = "renaming the new chunk over the old";
    }
    if (err) {
        unlink(tmp);
    }
    free(tmp);
    return err;
}

/* Whether chunks of this codec are written back here: raw or one zstd frame, either followed
 * by a CRC-32C (zarr's crc32c codec) when the codec says so. */
int oc_wb_codec_ok(int codec)
{
    int kind = OC_CODEC_KIND(codec);
    return (kind == OC_CODEC_RAW || kind == OC_CODEC_ZSTD) &&
           (codec & ~(0xff | OC_CODEC_CRC32C | OC_CODEC_VERIFY)) == 0 &&
           (!(codec & OC_CODEC_CRC32C) || oc_codec_lib_ready(OC_LIB_CRC32C));
}

int oc_wb_write_range(const oc_wb_store *s, const char *base, size_t start, size_t len, int *chunks,
                      char *msg, size_t msg_n)
{
    size_t C = s->chunk_bytes;
    *chunks = 0;
    for (size_t c = start / C; c < s->nchunks && c * C < start + len && c * C < s->data_bytes; c++) {
        size_t cs = c * C;
        size_t have = s->data_bytes - cs < C ? s->data_bytes - cs : C;
        int64_t pi = s->table[3 * c];
        const char *path = pi >= 0 && pi < s->npaths ? s->paths[pi] : NULL;
        if (path == NULL) {
            snprintf(msg, msg_n, "chunk %zu has no file of its own", c);
            return EINVAL;
        }
        const char *src = base + cs;
        char *padded = NULL;
        if (have < C) { /* the last chunk: stored whole, the fill value past the end */
            padded = oc_scratch_map(C); /* given back at once, unlike malloc's */
            if (padded == NULL) {
                snprintf(msg, msg_n, "chunk %zu (%s): out of memory", c, path);
                return ENOMEM;
            }
            memcpy(padded, src, have);
            for (size_t i = have; i < C; i++) {
                padded[i] = s->fill[(cs + i) % s->fill_n];
            }
            src = padded;
        }
        const char *out = src;
        size_t out_n = C;
        const char *what = "encoding it";
        int err = 0, packed_now = 0;
        char *sealed = NULL;
        if (OC_CODEC_KIND(s->codec) == OC_CODEC_ZSTD) {
            char *packed;
            err = oc_zstd_pack(src, C, s->level, s->checksum, &packed, &out_n);
            out = packed;
            packed_now = err == 0;
        }
        else if (!oc_wb_codec_ok(s->codec)) {
            err = ENOTSUP;
        }
        if (err == 0 && (s->codec & OC_CODEC_CRC32C)) { /* zarr's crc32c codec: 4 bytes after */
            sealed = oc_scratch_map(out_n + 4);
            if (sealed == NULL) {
                err = ENOMEM;
            }
            else {
                uint32_t sum = oc_crc32c(out, out_n);
                memcpy(sealed, out, out_n);
                for (int i = 0; i < 4; i++) {
                    sealed[out_n + (size_t)i] = (char)(sum >> (8 * i));
                }
                out = sealed;
                out_n += 4;
            }
        }
        if (err == 0) {
            err = replace_file(path, out, out_n, s->file_mode, &what);
        }
        oc_scratch_unmap(sealed, out_n); /* out_n: the sealed size */
        if (packed_now) {
            oc_zstd_pack_done();
        }
        oc_scratch_unmap(padded, C);
        if (err) {
            snprintf(msg, msg_n, "chunk %zu (%s): %s", c, path, what);
            return err;
        }
        (*chunks)++;
    }
    return 0;
}
