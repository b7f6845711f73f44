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
 * such arrays are not paged.  libzstd is the one Python gives (numcodecs' own copy, what
 * zarr-python encodes and decodes with), else the system's; libz is the system's; both are
 * loaded here on first use.
 *
 * c-blosc trusts its header: the sizes (which chunks.c checks against what was read), and the
 * flags and type size, which choose how the decoded bytes are unshuffled: one bit flipped there
 * decodes the whole chunk wrong without an error.  The header is checked here against what the
 * array's metadata says was written (the shuffle and type size travel in the codec number).
 */
#include "oc_core.h"
#include "oc_codecs.h"

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

/* ---- libzstd, loaded at run time through its stable API (the prototypes in oc_codecs.h are
 * copied from zstd.h, which need not be installed) ---- */

oc_zstd_api oc_zstd;
static int zstd_loaded; /* 1 once oc_zstd is bound (then never again); read atomically */
static pthread_once_t zstd_once = PTHREAD_ONCE_INIT;

/* Binds oc_zstd to the zstd functions of the library at path, under load_lock; 1 when bound
 * (now or before).  A library that lacks any of them (too old) is not used at all. */
static int zstd_bind(const char *path)
{
    if (zstd_loaded == 1) {
        return 1;
    }
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        return 0;
    }
    oc_zstd_api api = {0};
    *(void **)&api.create = dlsym(lib, "ZSTD_createDCtx");
    *(void **)&api.free = dlsym(lib, "ZSTD_freeDCtx");
    *(void **)&api.decompress = dlsym(lib, "ZSTD_decompressDCtx");
    *(void **)&api.stream = dlsym(lib, "ZSTD_decompressStream");
    *(void **)&api.reset = dlsym(lib, "ZSTD_DCtx_reset");
    *(void **)&api.is_error = dlsym(lib, "ZSTD_isError");
    *(void **)&api.error_name = dlsym(lib, "ZSTD_getErrorName");
    *(void **)&api.content_size = dlsym(lib, "ZSTD_getFrameContentSize");
    *(void **)&api.create_c = dlsym(lib, "ZSTD_createCCtx");
    *(void **)&api.free_c = dlsym(lib, "ZSTD_freeCCtx");
    *(void **)&api.set_parameter = dlsym(lib, "ZSTD_CCtx_setParameter");
    *(void **)&api.reset_c = dlsym(lib, "ZSTD_CCtx_reset");
    *(void **)&api.compress = dlsym(lib, "ZSTD_compress2");
    *(void **)&api.bound = dlsym(lib, "ZSTD_compressBound");
    *(void **)&api.sizeof_d = dlsym(lib, "ZSTD_sizeof_DCtx");
    *(void **)&api.sizeof_c = dlsym(lib, "ZSTD_sizeof_CCtx");
    *(void **)&api.level_params = dlsym(lib, "ZSTD_getCParams");
    *(void **)&api.version = dlsym(lib, "ZSTD_versionNumber");
    int complete = api.create && api.free && api.decompress && api.stream && api.reset &&
                   api.is_error && api.error_name && api.content_size && api.create_c &&
                   api.free_c && api.set_parameter && api.reset_c && api.compress && api.bound &&
                   api.version;
    if (!complete) {
        dlclose(lib);
        return 0;
    }
    oc_zstd = api;
    __atomic_store_n(&zstd_loaded, 1, __ATOMIC_RELEASE);
    return 1;
}

/* The system's libzstd, where nothing was given before the first use (oc_codec_load). */
static void zstd_load_system(void)
{
    pthread_mutex_lock(&load_lock);
    zstd_bind("libzstd.so.1");
    pthread_mutex_unlock(&load_lock);
}

int oc_zstd_ready(void)
{
    if (__atomic_load_n(&zstd_loaded, __ATOMIC_ACQUIRE) == 1) {
        return 1;
    }
    pthread_once(&zstd_once, zstd_load_system);
    return __atomic_load_n(&zstd_loaded, __ATOMIC_ACQUIRE) == 1;
}

/* ---- libz, loaded at run time (only its inflate functions: no zlib.h is needed to build) ---- */

#define Z_OK 0
#define Z_MEM_ERROR (-4)
#define Z_BUF_ERROR (-5)
#define Z_DATA_ERROR (-3)

#define Z_STREAM_END 1
#define Z_FINISH 4
#define Z_AUTO_WINDOW (15 + 32) /* inflateInit2: a zlib or a gzip header, found by its magic */

/* zlib's z_stream, as zlib.h (1.x, the ABI of libz.so.1) lays it out. */
typedef struct {
    const unsigned char *next_in;
    unsigned avail_in;
    unsigned long total_in;
    unsigned char *next_out;
    unsigned avail_out;
    unsigned long total_out;
    const char *msg;
    void *state;
    void *zalloc, *zfree, *opaque;
    int data_type;
    unsigned long adler, reserved;
} z_stream;

static int (*z_uncompress)(unsigned char *, unsigned long *, const unsigned char *, unsigned long);
static int (*z_inflate_init2)(z_stream *, int, const char *, int);
static int (*z_inflate)(z_stream *, int);
static int (*z_inflate_end)(z_stream *);
static const char *(*z_version)(void);
static int zlib_loaded; /* 1 loaded, -1 unavailable; set once under zlib_once */
static pthread_once_t zlib_once = PTHREAD_ONCE_INIT;

static void zlib_load(void)
{
    void *lib = dlopen("libz.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib != NULL) {
        *(void **)&z_uncompress = dlsym(lib, "uncompress");
        *(void **)&z_inflate_init2 = dlsym(lib, "inflateInit2_");
        *(void **)&z_inflate = dlsym(lib, "inflate");
        *(void **)&z_inflate_end = dlsym(lib, "inflateEnd");
        *(void **)&z_version = dlsym(lib, "zlibVersion");
        if (!z_uncompress || !z_inflate_init2 || !z_inflate || !z_inflate_end || !z_version) {
            z_uncompress = NULL;
            dlclose(lib);
        }
    }
    zlib_loaded = z_uncompress != NULL ? 1 : -1;
}

/* Inflate one gzip or zlib stream of n bytes (zarr's gzip, numcodecs' GZip and Zlib) into
 * exactly chunk_n bytes of dst; 0, or -1 with a message.  zlib checks the stream's own
 * checksum (gzip's CRC-32 and size, zlib's Adler-32); bytes after the stream are damage. */
int oc_inflate(const char *src, size_t n, char *dst, size_t chunk_n, char *err, size_t err_n)
{
    if (!oc_zlib_ready()) {
        snprintf(err, err_n, "libz.so.1 is not available");
        return -1;
    }
    if (n > 0xffffffffu || chunk_n >= 0xffffffffu) {
        snprintf(err, err_n, "a deflate chunk of 4 GiB or more");
        return -1;
    }
    z_stream z;
    memset(&z, 0, sizeof z);
    if (z_inflate_init2(&z, Z_AUTO_WINDOW, z_version(), (int)sizeof z) != Z_OK) {
        snprintf(err, err_n, "inflate: out of memory");
        return -1;
    }
    z.next_in = (const unsigned char *)src;
    z.avail_in = (unsigned)n;
    z.next_out = (unsigned char *)dst;
    z.avail_out = (unsigned)chunk_n; /* a longer stream stops short of its end: an error */
    int rc = z_inflate(&z, Z_FINISH);
    size_t got = (size_t)z.total_out, left = z.avail_in;
    const char *msg = z.msg;
    z_inflate_end(&z);
    if (rc != Z_STREAM_END) {
        snprintf(err, err_n, "inflate: %s", msg != NULL ? msg
                                            : rc == Z_BUF_ERROR ? "the stream ends early or holds more than a chunk"
                                                                : "the stream is corrupt");
        return -1;
    }
    if (got != chunk_n || left != 0) {
        snprintf(err, err_n, "inflate: %zu bytes decoded, expected %zu (%zu stored bytes after the stream)",
                 got, chunk_n, left);
        return -1;
    }
    return 0;
}

/* One zlib stream of n bytes into at most *got bytes of dst (HDF5's deflate filter), *got set
 * to what it holds; 0, or -1 with a message. */
int oc_zlib_uncompress(char *dst, size_t *got, const char *src, size_t n, char *err, size_t err_n)
{
    unsigned long len = *got;
    int rc = z_uncompress((unsigned char *)dst, &len, (const unsigned char *)src, n);
    if (rc != Z_OK) {
        snprintf(err, err_n, "inflate: %s",
                 rc == Z_DATA_ERROR  ? "the stream is corrupt or ends early"
                 : rc == Z_BUF_ERROR ? "the stream holds more than a chunk, or ends early"
                 : rc == Z_MEM_ERROR ? "out of memory"
                                     : "error");
        return -1;
    }
    *got = len;
    return 0;
}

int oc_zlib_ready(void)
{
    pthread_once(&zlib_once, zlib_load);
    return zlib_loaded == 1;
}

/* ---- the codec libraries Python finds ---- */

/* Load the library of codec kind `which` (OC_LIB_*) from path; 1 when it is ready (now or
 * before), 0 when it cannot be loaded or lacks the functions. */
int oc_codec_load(int which, const char *path)
{
    pthread_mutex_lock(&load_lock);
    int ready = oc_codec_lib_ready(which);
    if (!ready && which == OC_LIB_ZSTD) {
        ready = zstd_bind(path);
    }
    else if (!ready) {
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
        return __atomic_load_n(&zstd_loaded, __ATOMIC_ACQUIRE) == 1;
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

uint32_t oc_crc32c_extend(uint32_t crc, const void *data, size_t n)
{
    return lib.crc32c_extend(crc, data, n);
}

/* CRC-32C arithmetic in GF(2) modulo its reflected polynomial (the bits of x^0..x^31 from the
 * top bit down), as zlib's crc32_combine does it for CRC-32; by hand, as the CRC-32C library
 * gives no combine. */
#define CRC32C_POLY 0x82f63b78u

static uint32_t crc32c_multiply(uint32_t a, uint32_t b) /* a * b mod p */
{
    uint32_t m = (uint32_t)1 << 31, p = 0;
    for (;;) {
        if (a & m) {
            p ^= b;
            if ((a & (m - 1)) == 0) {
                break;
            }
        }
        m >>= 1;
        b = b & 1 ? (b >> 1) ^ CRC32C_POLY : b >> 1;
    }
    return p;
}

/* The CRC-32C of A then B, from crc1 (A's), crc2 (B's, computed from 0) and B's length: crc1
 * moved on over len2 zero bytes (times x^(8 len2) mod p), plus crc2. */
uint32_t oc_crc32c_combine(uint32_t crc1, uint32_t crc2, size_t len2)
{
    uint32_t power = (uint32_t)1 << 23; /* x^8: one byte */
    uint32_t shift = (uint32_t)1 << 31; /* x^0 */
    for (size_t n = len2; n > 0; n >>= 1) {
        if (n & 1) {
            shift = crc32c_multiply(power, shift);
        }
        power = crc32c_multiply(power, power);
    }
    return crc32c_multiply(shift, crc1) ^ crc2;
}

/* Check that the last 4 bytes of src (n bytes in all) are the CRC-32C of the others; 0, or -1
 * with a message. */
int oc_crc32c_check(const char *src, size_t n, char *err, size_t err_n)
{
    if (n < 4) {
        snprintf(err, err_n, "%zu bytes stored, fewer than a CRC-32C checksum", n);
        return -1;
    }
    return oc_crc32c_trailer_check(src, n, oc_crc32c(src, n - 4), err, err_n);
}

/* Check that the last 4 bytes of src (n >= 4 bytes in all) are sum, the CRC-32C of the others
 * (computed by the caller); 0, or -1 with a message. */
int oc_crc32c_trailer_check(const char *src, size_t n, uint32_t sum, char *err, size_t err_n)
{
    const unsigned char *c = (const unsigned char *)src + n - 4;
    uint32_t stored = (uint32_t)c[0] | (uint32_t)c[1] << 8 | (uint32_t)c[2] << 16 |
                      (uint32_t)c[3] << 24;
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

/* Check a blosc header against what was read (n bytes), the chunk's size and what the codec
 * says was written; 0, or -1 with a message.  The same checks as _check_blosc_frame in
 * oocarray/_storage/_zarr/_layout.py. */
static int blosc_header_ok(int codec, const unsigned char *h, size_t n, size_t chunk_n, char *err,
                           size_t err_n)
{
    if (n < BLOSC_HEADER) {
        snprintf(err, err_n, "%zu bytes stored, fewer than a blosc header (16)", n);
        return -1;
    }
    unsigned version = h[0], flags = h[2], typesize = h[3];
    size_t nbytes = oc_le32(h + 4), blocksize = oc_le32(h + 8), cbytes = oc_le32(h + 12);
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
    size_t declared = oc_le32((const unsigned char *)src);
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
