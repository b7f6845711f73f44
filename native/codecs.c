/*
 * Chunk codecs besides raw and zstd, decoded without the GIL (chunks.c calls these for the
 * eager reader and the pager's fill threads, which must never need Python):
 *
 *  - blosc (zarr v3's BloscCodec, numcodecs' Blosc): c-blosc's blosc_decompress_ctx, from
 *    numcodecs' own extension module (it exports c-blosc's API with lz4, zstd, blosclz, zlib,
 *    shuffle and bitshuffle built in), so what decodes here is what numcodecs decodes;
 *  - lz4 (numcodecs' LZ4: the decoded size, 4 bytes little-endian, then one LZ4 block):
 *    LZ4_decompress_safe from numcodecs' lz4 extension;
 *  - CRC-32C (the zarr v3 crc32c codec: 4 bytes little-endian after the data): crc32c_extend
 *    from the library google-crc32c ships.
 *
 * The libraries are found by Python (their paths depend on the installation) and loaded here
 * with oc_codec_load; a codec whose library is not loaded is decoded by Python instead, and
 * such arrays are not paged.  gzip and zlib streams are h5filters.c's (oc_inflate).
 *
 * c-blosc trusts its header: the sizes (which chunks.c checks against what was read), and the
 * flags and type size, which choose how the decoded bytes are unshuffled: one bit flipped there
 * decodes the whole chunk wrong without an error.  The header is checked here against what the
 * array's metadata says was written (the shuffle and type size travel in the codec number).
 */
#include "oc_core.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

static struct {
    int (*blosc_decompress_ctx)(const void *, void *, size_t, int);
    int (*blosc_cbuffer_validate)(const void *, size_t, size_t *);
    int (*lz4_decompress_safe)(const char *, char *, int, int);
    uint32_t (*crc32c_extend)(uint32_t, const uint8_t *, size_t);
} lib;
static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;

/* Load the library of codec kind `which` (OC_LIB_*) from path; 1 when it is ready (now or
 * before), 0 when it cannot be loaded or lacks the functions. */
int oc_codec_load(int which, const char *path)
{
    pthread_mutex_lock(&load_lock);
    int ready = oc_codec_lib_ready(which);
    if (!ready) {
        void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (h != NULL) {
            void *a = NULL, *b = NULL;
            switch (which) {
            case OC_LIB_BLOSC:
                a = dlsym(h, "blosc_decompress_ctx");
                b = dlsym(h, "blosc_cbuffer_validate");
                if (a && b) {
                    *(void **)&lib.blosc_cbuffer_validate = b;
                    __atomic_store_n((void **)&lib.blosc_decompress_ctx, a, __ATOMIC_RELEASE);
                }
                break;
            case OC_LIB_LZ4:
                if ((a = dlsym(h, "LZ4_decompress_safe")) != NULL) {
                    __atomic_store_n((void **)&lib.lz4_decompress_safe, a, __ATOMIC_RELEASE);
                }
                break;
            case OC_LIB_CRC32C:
                if ((a = dlsym(h, "crc32c_extend")) != NULL) {
                    __atomic_store_n((void **)&lib.crc32c_extend, a, __ATOMIC_RELEASE);
                }
                break;
            default:
                break;
            }
            ready = oc_codec_lib_ready(which);
            if (!ready) {
                dlclose(h);
            }
        }
    }
    pthread_mutex_unlock(&load_lock);
    return ready;
}

int oc_codec_lib_ready(int which)
{
    switch (which) {
    case OC_LIB_BLOSC:
        return __atomic_load_n((void **)&lib.blosc_decompress_ctx, __ATOMIC_ACQUIRE) != NULL;
    case OC_LIB_LZ4:
        return __atomic_load_n((void **)&lib.lz4_decompress_safe, __ATOMIC_ACQUIRE) != NULL;
    case OC_LIB_CRC32C:
        return __atomic_load_n((void **)&lib.crc32c_extend, __ATOMIC_ACQUIRE) != NULL;
    case OC_LIB_ZSTD:
        return oc_zstd_ready();
    case OC_LIB_ZLIB:
        return oc_zlib_ready();
    default:
        return 0;
    }
}

/* Whether every library `codec` needs is loaded. */
int oc_codec_ready(int codec)
{
    if ((codec & OC_CODEC_CRC32C) && OC_CODEC_KIND(codec) != OC_CODEC_H5 &&
        !oc_codec_lib_ready(OC_LIB_CRC32C)) {
        return 0;
    }
    switch (OC_CODEC_KIND(codec)) {
    case OC_CODEC_RAW:
        return 1;
    case OC_CODEC_ZSTD:
    case OC_CODEC_ZSTD_SHUFFLE8:
        return oc_zstd_ready();
    case OC_CODEC_BLOSC:
        return oc_codec_lib_ready(OC_LIB_BLOSC);
    case OC_CODEC_GZIP:
        return oc_zlib_ready();
    case OC_CODEC_LZ4:
        return oc_codec_lib_ready(OC_LIB_LZ4);
    default:
        return 0;
    }
}

uint32_t oc_crc32c(const void *data, size_t n) { return lib.crc32c_extend(0, data, n); }

/* Check that the last 4 bytes of src (n bytes in all) are the CRC-32C of the others; 0, or -1
 * with a message. */
int oc_crc32c_check(const char *src, size_t n, char *err, size_t err_n)
{
    if (n < 4) {
        snprintf(err, err_n, "%zu bytes stored, fewer than a CRC-32C checksum", n);
        return -1;
    }
    const unsigned char *c = (const unsigned char *)src + n - 4;
    uint32_t stored = (uint32_t)c[0] | (uint32_t)c[1] << 8 | (uint32_t)c[2] << 16 |
                      (uint32_t)c[3] << 24;
    uint32_t sum = oc_crc32c(src, n - 4);
    if (sum != stored) {
        snprintf(err, err_n, "the CRC-32C checksum does not match (stored %08x, computed %08x)",
                 stored, sum);
        return -1;
    }
    return 0;
}

/* ---- blosc ---- */

#define BLOSC_HEADER 16
#define BLOSC_DOSHUFFLE 0x01
#define BLOSC_MEMCPYED 0x02
#define BLOSC_DOBITSHUFFLE 0x04
#define BLOSC_MAX_TYPESIZE 255

static uint32_t le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Check a blosc header against what was read (n bytes), the chunk's size and what the codec
 * says was written; 0, or -1 with a message.  The same checks as _zarr_layout.py's
 * _check_blosc_frame. */
static int blosc_header_ok(int codec, const unsigned char *h, size_t n, size_t chunk_n, char *err,
                           size_t err_n)
{
    if (n < BLOSC_HEADER) {
        snprintf(err, err_n, "%zu bytes stored, fewer than a blosc header (16)", n);
        return -1;
    }
    unsigned version = h[0], flags = h[2], typesize = h[3];
    size_t nbytes = le32(h + 4), blocksize = le32(h + 8), cbytes = le32(h + 12);
    if (version == 0 || version > 2) {
        snprintf(err, err_n, "the blosc header says format version %u (1 or 2 expected)", version);
        return -1;
    }
    if (nbytes != chunk_n) {
        snprintf(err, err_n, "the blosc header says %zu bytes decoded, expected %zu", nbytes, chunk_n);
        return -1;
    }
    if (cbytes != n) {
        snprintf(err, err_n, "the blosc header says %zu bytes stored, %zu were read", cbytes, n);
        return -1;
    }
    if (chunk_n && (blocksize == 0 || blocksize > chunk_n)) {
        snprintf(err, err_n, "the blosc header says blocks of %zu bytes for a chunk of %zu",
                 blocksize, chunk_n);
        return -1;
    }
    if ((flags & BLOSC_MEMCPYED) && cbytes != BLOSC_HEADER + nbytes) {
        snprintf(err, err_n, "the blosc header says %zu bytes stored uncompressed, but %zu are stored",
                 nbytes, cbytes);
        return -1;
    }
    int shuffle = OC_BLOSC_SHUFFLE(codec);
    int found = flags & BLOSC_DOBITSHUFFLE ? (flags & BLOSC_DOSHUFFLE ? -1 : 2)
                                           : (flags & BLOSC_DOSHUFFLE ? 1 : 0);
    if (shuffle != OC_BLOSC_ANY_SHUFFLE && found != shuffle) {
        snprintf(err, err_n, "the blosc header's flags (0x%02x) say shuffle %d, the array's codec %d",
                 flags, found, shuffle);
        return -1;
    }
    unsigned want = (unsigned)OC_BLOSC_TYPESIZE(codec);
    if (want != 0 && typesize != want) {
        snprintf(err, err_n, "the blosc header says a type size of %u, the array's codec %u",
                 typesize, want);
        return -1;
    }
    return 0;
}

int oc_blosc_decode(int codec, const char *src, size_t n, char *dst, size_t chunk_n, char *err,
                    size_t err_n)
{
    if (blosc_header_ok(codec, (const unsigned char *)src, n, chunk_n, err, err_n) != 0) {
        return -1;
    }
    size_t nbytes = 0;
    if (lib.blosc_cbuffer_validate(src, n, &nbytes) != 0 || nbytes != chunk_n) {
        snprintf(err, err_n, "blosc: the header does not validate");
        return -1;
    }
    if (chunk_n == 0) {
        return 0;
    }
    int r = lib.blosc_decompress_ctx(src, dst, chunk_n, 1);
    if (r < 0 || (size_t)r != chunk_n) {
        if (r < 0) {
            snprintf(err, err_n, "blosc: the chunk is corrupt (error %d)", r);
        }
        else {
            snprintf(err, err_n, "blosc: decoded %d bytes, expected %zu", r, chunk_n);
        }
        return -1;
    }
    return 0;
}

/* ---- numcodecs' lz4: the decoded size (4 bytes little-endian), then one LZ4 block ---- */

int oc_lz4_decode(const char *src, size_t n, char *dst, size_t chunk_n, char *err, size_t err_n)
{
    if (n < 4) {
        snprintf(err, err_n, "%zu bytes stored, fewer than an lz4 header (4)", n);
        return -1;
    }
    size_t declared = le32((const unsigned char *)src);
    if (declared != chunk_n) {
        snprintf(err, err_n, "the lz4 header says %zu bytes decoded, expected %zu", declared, chunk_n);
        return -1;
    }
    if (n - 4 > (size_t)INT32_MAX || chunk_n > (size_t)INT32_MAX) {
        snprintf(err, err_n, "an lz4 chunk of over 2 GiB");
        return -1;
    }
    int r = lib.lz4_decompress_safe(src + 4, dst, (int)(n - 4), (int)chunk_n);
    if (r < 0 || (size_t)r != chunk_n) {
        snprintf(err, err_n, "lz4: the block is corrupt or holds %d bytes, expected %zu", r, chunk_n);
        return -1;
    }
    return 0;
}

/* ---- Python ---- */

/* codec_library(which, path) -> bool: load a codec's library (see oc_codec_load). */
PyObject *oc_py_codec_library(PyObject *Py_UNUSED(m), PyObject *args)
{
    int which;
    const char *path;
    if (!PyArg_ParseTuple(args, "is", &which, &path)) {
        return NULL;
    }
    int ok;
    Py_BEGIN_ALLOW_THREADS
    ok = oc_codec_load(which, path);
    Py_END_ALLOW_THREADS
    return PyBool_FromLong(ok);
}

/* codec_ready(codec) -> bool: whether the native reader decodes this codec number. */
PyObject *oc_py_codec_ready(PyObject *Py_UNUSED(m), PyObject *args)
{
    int codec;
    if (!PyArg_ParseTuple(args, "i", &codec)) {
        return NULL;
    }
    return PyBool_FromLong(OC_CODEC_KIND(codec) != OC_CODEC_H5 && oc_codec_ready(codec));
}

/* crc32c(data) -> int: the CRC-32C of a buffer's bytes, without the GIL. */
PyObject *oc_py_crc32c(PyObject *Py_UNUSED(m), PyObject *arg)
{
    if (!oc_codec_lib_ready(OC_LIB_CRC32C)) {
        PyErr_SetString(PyExc_RuntimeError, "the CRC-32C library is not loaded");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_C_CONTIGUOUS) != 0) {
        return NULL;
    }
    uint32_t sum;
    Py_BEGIN_ALLOW_THREADS
    sum = oc_crc32c(view.buf, (size_t)view.len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(sum);
}
