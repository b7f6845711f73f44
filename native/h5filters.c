/*
 * HDF5 filter pipelines, undone without the GIL for chunk-backed arrays (pager.c): the stored
 * bytes of one chunk of an HDF5 dataset, read straight from the file at the offset HDF5
 * reported, are run back through the dataset's filters into the caller's buffer.
 *
 * The filters undone here are HDF5's own: deflate (zlib streams, id 1), shuffle (id 2, bytes
 * regrouped by their position in an element of `elsize` bytes) and fletcher32 (id 3, a 4-byte
 * checksum after the data, checked here: a mismatch is a damaged chunk).  Python refuses every
 * other filter before a chunk is ever read.  A pipeline is an OC_CODEC_H5 codec (oc_codecs.h):
 * up to four steps in the order HDF5 applies them on write, and the shuffle's element size.  A
 * chunk whose filter mask skips some steps (HDF5 records one per chunk) is decoded with a
 * codec that lacks them (oc_h5_masked).
 *
 * zlib comes from the system's libz.so.1, loaded on first use (codecs.c); without it deflate
 * chunks fail to decode and Python refuses such datasets up front (oc_zlib_ready).
 */
#include "oc_core.h"
#include "oc_files.h"
#include "oc_chunks.h"
#include "oc_codecs.h"
#include "oc_source.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- per-thread buffers: scratch mappings (scratch.c), kept from one chunk to the next;
 * a pager worker with nothing queued gives its own back (oc_h5_state_release_mine) ---- */

typedef struct {
    char *buf[3]; /* the stored bytes, and two for the steps undone in turn */
    size_t size[3];
} h5_state;

static pthread_key_t h5_key;
static pthread_once_t h5_key_once = PTHREAD_ONCE_INIT;

static void h5_state_free(void *p)
{
    h5_state *s = p;
    for (int i = 0; i < 3; i++) {
        oc_scratch_drop(&s->buf[i], &s->size[i]);
    }
    free(s);
}

static void h5_key_make(void) { pthread_key_create(&h5_key, h5_state_free); }

void oc_h5_state_release_mine(void)
{
    pthread_once(&h5_key_once, h5_key_make);
    h5_state *s = pthread_getspecific(h5_key);
    if (s != NULL) {
        for (int i = 0; i < 3; i++) {
            oc_scratch_drop(&s->buf[i], &s->size[i]);
        }
    }
}

static char *h5_buffer(int which, size_t n)
{
    pthread_once(&h5_key_once, h5_key_make);
    h5_state *s = pthread_getspecific(h5_key);
    if (s == NULL) {
        if ((s = calloc(1, sizeof *s)) == NULL) {
            return NULL;
        }
        if (pthread_setspecific(h5_key, s) != 0) {
            free(s);
            return NULL;
        }
    }
    return oc_scratch_grow(&s->buf[which], &s->size[which], n ? n : 1);
}

/* ---- the filters ---- */

/* HDF5's Fletcher-32 (H5_checksum_fletcher32): 16-bit big-endian words, sums from 0, an odd
 * last byte as the high byte of a word. */
uint32_t oc_fletcher32(const unsigned char *data, size_t n)
{
    uint32_t sum1 = 0, sum2 = 0;
    size_t words = n / 2;
    while (words) {
        size_t run = words > 360 ? 360 : words; /* the most sums without overflow */
        words -= run;
        do {
            sum1 += ((uint32_t)data[0] << 8) | data[1];
            data += 2;
            sum2 += sum1;
        } while (--run);
        sum1 = (sum1 & 0xffff) + (sum1 >> 16);
        sum2 = (sum2 & 0xffff) + (sum2 >> 16);
    }
    if (n % 2) {
        sum1 += (uint32_t)data[0] << 8;
        sum2 += sum1;
        sum1 = (sum1 & 0xffff) + (sum1 >> 16);
        sum2 = (sum2 & 0xffff) + (sum2 >> 16);
    }
    sum1 = (sum1 & 0xffff) + (sum1 >> 16);
    sum2 = (sum2 & 0xffff) + (sum2 >> 16);
    return (sum2 << 16) | sum1;
}

/* The checksum after n - 4 bytes of data (little-endian), as HDF5 checks it: HDF5 before
 * 1.6.3 wrote it with the bytes of each 16-bit half swapped, which it still accepts. */
static int fletcher_ok(const unsigned char *p, size_t n)
{
    const unsigned char *c = p + n - 4;
    uint32_t stored = (uint32_t)c[0] | (uint32_t)c[1] << 8 | (uint32_t)c[2] << 16 | (uint32_t)c[3] << 24;
    uint32_t sum = oc_fletcher32(p, n - 4);
    uint32_t swapped = ((sum & 0x00ff00ffu) << 8) | ((sum >> 8) & 0x00ff00ffu);
    return stored == sum || stored == swapped;
}

/* Bytes [skip, skip + n) of the unshuffled form of `in` (total bytes, elements of es bytes):
 * byte b of element e was stored at b * count + e; bytes after the last whole element stay. */
static inline void unshuffle_es(const unsigned char *in, size_t total, size_t es, size_t skip,
                                unsigned char *out, size_t n)
{
    size_t count = total / es, whole = count * es, j = skip, end = skip + n;
    for (; j < end && j % es != 0 && j < whole; j++) {
        out[j - skip] = in[(j % es) * count + j / es];
    }
    for (; j + es <= end && j + es <= whole; j += es) {
        size_t e = j / es;
        for (size_t b = 0; b < es; b++) {
            out[j - skip + b] = in[b * count + e];
        }
    }
    for (; j < end; j++) {
        out[j - skip] = j >= whole ? in[j] : in[(j % es) * count + j / es];
    }
}

void oc_h5_unshuffle(const char *src, size_t total, size_t es, size_t skip, char *dst, size_t n)
{
    const unsigned char *in = (const unsigned char *)src;
    unsigned char *out = (unsigned char *)dst;
    if (es <= 1 || total / es <= 1) { /* HDF5 leaves such buffers as they are */
        memcpy(out, in + skip, n);
        return;
    }
    switch (es) { /* constant sizes let the compiler unroll the inner loop */
    case 2: unshuffle_es(in, total, 2, skip, out, n); break;
    case 4: unshuffle_es(in, total, 4, skip, out, n); break;
    case 8: unshuffle_es(in, total, 8, skip, out, n); break;
    case 16: unshuffle_es(in, total, 16, skip, out, n); break;
    default: unshuffle_es(in, total, es, skip, out, n); break;
    }
}

/* ---- codecs ---- */

static int steps_of(int codec, int steps[OC_H5_MAX_STEPS])
{
    int k = 0;
    for (int i = 0; i < OC_H5_MAX_STEPS; i++) {
        int s = (codec >> (8 + 4 * i)) & 0xf;
        if (s != 0) {
            steps[k++] = s;
        }
    }
    return k;
}

int oc_h5_masked(int codec, unsigned mask)
{
    int out = codec & ~(0xffff << 8);
    int k = 0;
    for (int i = 0; i < OC_H5_MAX_STEPS; i++) {
        int s = (codec >> (8 + 4 * i)) & 0xf;
        if (s != 0 && !(mask & (1u << i))) {
            out |= s << (8 + 4 * k++);
        }
    }
    return out;
}

static int read_all(const oc_source *src, char *dst, size_t n, int64_t offset, char *err,
                    size_t err_n)
{
    size_t got;
    if (oc_source_read(src, dst, n, offset, &got) != 0) {
        snprintf(err, err_n, "read %zu of %zu bytes at %lld: %s", got, n, (long long)offset,
                 errno != EIO ? strerror(errno)
                 : src->fd >= 0 ? "the file ends"
                                : "the stored bytes end");
        return -1;
    }
    return 0;
}

/* Decode bytes [skip, skip + n) of one chunk (chunk_n bytes decoded) stored at src/offset with
 * `stored` bytes, through the pipeline of `codec`; 0, or -1 with a message in err. */
int oc_h5_decode(int codec, const oc_source *src, int64_t offset, int64_t stored, size_t chunk_n,
                 size_t skip, char *dst, size_t n, char *err, size_t err_n)
{
    int steps[OC_H5_MAX_STEPS];
    int k = steps_of(codec, steps);
    size_t es = (size_t)((codec >> 24) & 0x7f);
    if (stored < 0) {
        snprintf(err, err_n, "no stored size");
        return -1;
    }
    /* want[i]: the bytes step i took in when the chunk was written (fletcher32 adds 4), known
     * up to the first deflate (after it, the sizes are the stream's) */
    size_t want[OC_H5_MAX_STEPS + 1];
    int known[OC_H5_MAX_STEPS + 1];
    int deflated = 0;
    want[0] = chunk_n;
    known[0] = 1;
    for (int i = 0; i < k; i++) {
        want[i + 1] = want[i] + (steps[i] == OC_H5_FLETCHER32 ? 4 : 0);
        deflated |= steps[i] == OC_H5_DEFLATE;
        known[i + 1] = !deflated;
    }
    if (!deflated && (size_t)stored != want[k]) {
        snprintf(err, err_n, "%lld bytes stored, expected %zu", (long long)stored, want[k]);
        return -1;
    }
    /* deflate adds 5 bytes per 16 KiB block at worst; far more means a damaged size */
    if (deflated && (size_t)stored > want[k] + want[k] / 64 + 4096) {
        snprintf(err, err_n, "%lld bytes stored for a chunk of %zu", (long long)stored, chunk_n);
        return -1;
    }
    if (k == 0) {
        return read_all(src, dst, n, offset + (int64_t)skip, err, err_n);
    }
    if (deflated && !oc_zlib_ready()) {
        snprintf(err, err_n, "libz.so.1 is not available");
        return -1;
    }
    /* bytes in memory are decoded where they are; a file's are read into a buffer first */
    const char *cur = oc_source_at(src, offset, (size_t)stored);
    if (cur == NULL) {
        char *buf = h5_buffer(0, (size_t)stored);
        if (buf == NULL) {
            snprintf(err, err_n, "out of memory");
            return -1;
        }
        if (read_all(src, buf, (size_t)stored, offset, err, err_n) != 0) {
            return -1;
        }
        cur = buf;
    }
    size_t cur_n = (size_t)stored;
    int spare = 1; /* the buffer the next step writes to */
    int whole = skip == 0 && n == chunk_n;
    for (int i = k - 1; i >= 0; i--) {
        char *out;
        switch (steps[i]) {
        case OC_H5_FLETCHER32:
            if (cur_n < 4 || !fletcher_ok((const unsigned char *)cur, cur_n)) {
                snprintf(err, err_n, "the fletcher32 checksum does not match (%zu bytes)", cur_n);
                return -1;
            }
            cur_n -= 4;
            break;
        case OC_H5_DEFLATE: {
            if (!known[i]) {
                snprintf(err, err_n, "two deflate steps");
                return -1;
            }
            out = i == 0 && whole ? dst : h5_buffer(spare, want[i]);
            if (out == NULL) {
                snprintf(err, err_n, "out of memory");
                return -1;
            }
            size_t got = want[i];
            if (oc_zlib_uncompress(out, &got, cur, cur_n, err, err_n) != 0) {
                return -1;
            }
            cur = out;
            cur_n = got;
            spare = spare == 1 ? 2 : 1;
            break;
        }
        case OC_H5_SHUFFLE:
            if (i == 0) {
                if (cur_n != chunk_n) {
                    break; /* reported below */
                }
                oc_h5_unshuffle(cur, cur_n, es, skip, dst, n);
                return 0;
            }
            out = h5_buffer(spare, cur_n);
            if (out == NULL) {
                snprintf(err, err_n, "out of memory");
                return -1;
            }
            oc_h5_unshuffle(cur, cur_n, es, 0, out, cur_n);
            cur = out;
            spare = spare == 1 ? 2 : 1;
            break;
        default:
            snprintf(err, err_n, "unknown HDF5 filter step %d", steps[i]);
            return -1;
        }
        if (known[i] && cur_n != want[i]) {
            snprintf(err, err_n, "decoded %zu bytes, expected %zu", cur_n, want[i]);
            return -1;
        }
    }
    if (cur != dst) {
        memcpy(dst, cur + skip, n);
    }
    return 0;
}
