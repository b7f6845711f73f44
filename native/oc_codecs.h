/*
 * Chunk codecs: the numbers that name a chunk's codec (zarr's, and HDF5 filter pipelines), the
 * codec libraries loaded at run time (codecs.c) and the HDF5 filters (h5filters.c).
 */
#ifndef OC_CODECS_H
#define OC_CODECS_H

#include "oc_core.h"
#include "oc_source.h"

/* libzstd's API, as much of it as is used (codecs.c loads it; chunks.c calls it). */
typedef struct ZSTD_DCtx_s ZSTD_DCtx;
typedef struct ZSTD_CCtx_s ZSTD_CCtx;
typedef struct {
    const void *src;
    size_t size;
    size_t pos;
} ZSTD_inBuffer;
typedef struct {
    void *dst;
    size_t size;
    size_t pos;
} ZSTD_outBuffer;
#define ZSTD_RESET_SESSION_ONLY 1
#define ZSTD_CONTENTSIZE_UNKNOWN (0ULL - 1)
#define ZSTD_CONTENTSIZE_ERROR (0ULL - 2)
#define ZSTD_BLOCKSIZE_MAX (1 << 17)
#define ZSTD_C_COMPRESSION_LEVEL 100
#define ZSTD_C_CHECKSUM_FLAG 201
#define ZSTD_RESET_SESSION_AND_PARAMETERS 3
/* ZSTD_cParameter numbers of the match finder's parameters (stable API since zstd 1.4.0) */
#define ZSTD_C_WINDOW_LOG 101
#define ZSTD_C_HASH_LOG 102
#define ZSTD_C_CHAIN_LOG 103
#define ZSTD_C_SEARCH_LOG 104
#define ZSTD_C_MIN_MATCH 105
#define ZSTD_C_TARGET_LENGTH 106
#define ZSTD_C_STRATEGY 107
/* zstd.h's ZSTD_compressionParameters (its layout unchanged since zstd 1.0) */
typedef struct {
    unsigned window_log, chain_log, hash_log, search_log, min_match, target_length;
    int strategy;
} oc_zstd_cparams;

typedef struct {
    ZSTD_DCtx *(*create)(void);
    size_t (*free)(ZSTD_DCtx *);
    size_t (*decompress)(ZSTD_DCtx *, void *, size_t, const void *, size_t);
    size_t (*stream)(ZSTD_DCtx *, ZSTD_outBuffer *, ZSTD_inBuffer *);
    size_t (*reset)(ZSTD_DCtx *, int);
    unsigned (*is_error)(size_t);
    const char *(*error_name)(size_t);
    unsigned long long (*content_size)(const void *, size_t);
    ZSTD_CCtx *(*create_c)(void);
    size_t (*free_c)(ZSTD_CCtx *);
    size_t (*set_parameter)(ZSTD_CCtx *, int, int);
    size_t (*reset_c)(ZSTD_CCtx *, int);
    size_t (*compress)(ZSTD_CCtx *, void *, size_t, const void *, size_t);
    size_t (*bound)(size_t);
    size_t (*sizeof_d)(const ZSTD_DCtx *); /* optional: counting the contexts' memory */
    size_t (*sizeof_c)(const ZSTD_CCtx *);
    /* optional: the parameters a level picks for a source of a given size (ZSTD_getCParams) */
    oc_zstd_cparams (*level_params)(int, unsigned long long, size_t);
    unsigned (*version)(void); /* ZSTD_versionNumber: 10506 for 1.5.6 */
} oc_zstd_api;
/* A 4-byte little-endian number in a chunk's header or trailer. */
static inline uint32_t oc_le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

#define OC_CODEC_RAW 0
#define OC_CODEC_ZSTD 1
#define OC_CODEC_ZSTD_SHUFFLE8 2 /* compressed spill: byte shuffle by 8, then one zstd frame */

extern oc_zstd_api oc_zstd; /* complete once oc_zstd_ready() */
int oc_zstd_ready(void);

/* codecs.c: zarr's other chunk codecs (blosc, numcodecs' lz4, gzip/zlib through h5filters.c)
 * and the crc32c codec.  A codec number that is not OC_CODEC_H5 is its kind in the low byte
 * and these flags: OC_CODEC_CRC32C, a CRC-32C of the stored bytes follows them (zarr v3's
 * crc32c codec, last in the chain); OC_CODEC_VERIFY, check the chunk's checksum (CRC-32C, or
 * a zstd frame's) even when only part of the chunk is wanted, by decoding it whole (the pager
 * asks for it; an eager read of part of a chunk reads only that part); OC_CODEC_RANDOM, on a
 * read job of an uncompressed chunk, the read is not part of a scan in order; for blosc, the
 * shuffle (0 none, 1 byte, 2 bit, 3 not known) and type size (0: not known) the array's
 * metadata says were written, which the chunk's header must repeat. */
#define OC_CODEC_BLOSC 4
#define OC_CODEC_GZIP 5 /* one gzip or zlib stream (numcodecs GZip, Zlib; zarr v3 gzip) */
#define OC_CODEC_LZ4 6  /* numcodecs LZ4: the decoded size, 4 bytes little-endian, one LZ4 block */
#define OC_CODEC_CRC32C (1 << 8)
#define OC_CODEC_VERIFY (1 << 9)
/* A read job's flag, for an uncompressed chunk: the file is read at random (see reader.c). */
#define OC_CODEC_RANDOM (1 << 10)
#define OC_BLOSC_SHUFFLE(codec) (((codec) >> 12) & 3)
#define OC_BLOSC_ANY_SHUFFLE 3
#define OC_BLOSC_TYPESIZE(codec) (((codec) >> 16) & 0xff)
#define OC_LIB_ZSTD 0
#define OC_LIB_ZLIB 1
#define OC_LIB_BLOSC 2
#define OC_LIB_LZ4 3
#define OC_LIB_CRC32C 4
int oc_codec_load(int which, const char *path);
int oc_codec_lib_ready(int which);
int oc_codec_ready(int codec);
uint32_t oc_crc32c(const void *data, size_t n);
/* The CRC-32C of data, computed on from crc (the CRC of the bytes before it). */
uint32_t oc_crc32c_extend(uint32_t crc, const void *data, size_t n);
/* The CRC-32C of A then B, from A's (crc1), B's (crc2, computed from 0) and B's length. */
uint32_t oc_crc32c_combine(uint32_t crc1, uint32_t crc2, size_t len2);
int oc_crc32c_check(const char *src, size_t n, char *err, size_t err_n);
int oc_crc32c_trailer_check(const char *src, size_t n, uint32_t sum, char *err, size_t err_n);
int oc_blosc_decode(int codec, const char *src, size_t n, char *dst, size_t chunk_n, char *err,
                    size_t err_n);
int oc_lz4_decode(const char *src, size_t n, char *dst, size_t chunk_n, char *err, size_t err_n);
int oc_zlib_ready(void);
int oc_zlib_uncompress(char *dst, size_t *got, const char *src, size_t n, char *err, size_t err_n);
int oc_inflate(const char *src, size_t n, char *dst, size_t chunk_n, char *err, size_t err_n);

/* h5filters.c: HDF5 filter pipelines.  An OC_CODEC_H5 codec is the low byte 3, up to
 * OC_H5_MAX_STEPS steps of 4 bits from bit 8 in the order HDF5 applies them on write
 * (OC_H5_SHUFFLE, OC_H5_DEFLATE, OC_H5_FLETCHER32), and the shuffle's element size in bits
 * 24-30.  A chunk's HDF5 filter mask (bit i: step i skipped) rides in bits 32-47 of its table
 * entry's path number (OC_CHUNK_PATH, OC_CHUNK_MASK). */
#define OC_CODEC_H5 3
#define OC_CODEC_KIND(codec) ((codec) & 0xff)
#define OC_H5_MAX_STEPS 4
#define OC_H5_SHUFFLE 1
#define OC_H5_DEFLATE 2
#define OC_H5_FLETCHER32 3
#define OC_CHUNK_PATH(v) ((int64_t)((uint64_t)(v) & 0xffffffffu))
#define OC_CHUNK_MASK(v) ((unsigned)(((uint64_t)(v) >> 32) & 0xffffu))
void oc_h5_state_release_mine(void); /* this thread's HDF5 decode buffers */
int oc_h5_masked(int codec, unsigned mask);
uint32_t oc_fletcher32(const unsigned char *data, size_t n);
void oc_h5_unshuffle(const char *src, size_t total, size_t es, size_t skip, char *dst, size_t n);
int oc_h5_decode(int codec, const oc_source *src, int64_t offset, int64_t stored, size_t chunk_n,
                 size_t skip, char *dst, size_t n, char *err, size_t err_n);

#endif
