/*
 * Chunks read and written without the GIL: the reader and zstd packing (chunks.c), the
 * scratch mappings they work in (scratch.c), and the write-back of a chunk-backed array's
 * chunks (writeback.c).
 */
#ifndef OC_CHUNKS_H
#define OC_CHUNKS_H

#include "oc_core.h"
#include "oc_source.h"

/* scratch.c: decode, encode and staging buffers, each a mapping of its own, counted */
void *oc_scratch_map(size_t n);
void oc_scratch_unmap(void *p, size_t n);
char *oc_scratch_grow(char **buf, size_t *size, size_t n); /* at least n bytes, page aligned */
void oc_scratch_drop(char **buf, size_t *size);
long long oc_scratch_bytes(void);      /* every scratch byte mapped, zstd contexts included */
extern atomic_llong oc_scratch_total;
/* chunks.c: each thread's reader state (zstd contexts and buffers) */
void oc_scratch_release(void); /* idle threads' scratch and cached free regions */
void oc_chunk_states_release(void); /* idle ones now, busy ones when their call ends */
void oc_chunk_state_release_mine(void);
size_t oc_chunk_state_bytes_mine(void);
void oc_zstd_pack_done(void); /* after oc_zstd_pack*: its output may be released again */
void oc_chunks_atfork(int phase);

/* chunks.c: decoding chunks without the GIL, the one decoder of the chunk reader (reader.c)
 * and the pager */
int oc_decode(int codec, const oc_source *src, int64_t offset, int64_t nbytes, size_t chunk_n,
              size_t skip, char *dst, size_t n, char *err, size_t err_n);
#define OC_ZW_NOMEM (-1) /* oc_zstd_write: out of memory */
#define OC_ZW_ZSTD (-2)  /* oc_zstd_write: zstd refused (*written: its error code) */
int oc_zstd_write(int fd, const char *src, size_t n, int level, int checksum, int crc,
                  size_t tune_bytes, int direct, uint32_t *running, size_t *written);
void oc_shuffle8(const char *src, size_t n, char *dst);
void oc_unshuffle8(const char *src, size_t total, size_t skip, char *dst, size_t n);
int oc_zstd_pack_shuffled(const char *src, size_t n, int level, char **out, size_t *out_n);
int oc_zstd_pack(const char *src, size_t n, int level, int checksum, char **out, size_t *out_n);
int oc_decode_range(int codec, int fd, int64_t offset, int64_t nbytes, size_t chunk_n, size_t skip,
                    char *dst, size_t n, char *err, size_t err_n);

/* writeback.c: the chunks of a range of a chunk-backed array, encoded and written back */
typedef struct {
    char **paths;         /* the pager's chunk files */
    int npaths;
    const int64_t *table; /* the pager's table: per chunk, its path's index first */
    size_t nchunks, chunk_bytes, data_bytes;
    const char *fill; /* one element's fill bytes, for the last chunk's rows past the end */
    size_t fill_n;
    int codec, level, checksum; /* raw or zstd (oc_wb_codec_ok); zstd's level and checksum */
    int file_mode;              /* given to each new chunk file, as the store's writer does */
} oc_wb_store;
int oc_wb_codec_ok(int codec); /* raw or zstd, with the CRC-32C when its library is loaded */
/* Writes every chunk starting in [start, start + len) of the array at base; 0 with *chunks
 * written, or errno with what failed in msg (chunks written before it stay written). */
int oc_wb_write_range(const oc_wb_store *s, const char *base, size_t start, size_t len, int *chunks,
                      char *msg, size_t msg_n);

#endif
