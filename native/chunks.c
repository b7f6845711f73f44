/*
 * Reading chunks: a chunk's stored bytes are read from a file and decoded straight into the
 * caller's buffer, without the GIL.  Several threads run the same job list at once, each taking
 * the next job from a shared counter, so one read decodes its chunks on every core.
 *
 * A job may want only part of its chunk: the decoded bytes [skip, skip + len(dest)).  Raw
 * chunks are then read from that offset only; zstd frames are decoded as a stream that stops
 * once dest is full, so reading the first rows of a chunk never decodes the rest.
 *
 * zstd comes from numcodecs' own copy of libzstd, else the system's libzstd.so.1, loaded on
 * first use (codecs.c).  Without either zstd_available() is false and Python decodes with
 * numcodecs instead.
 */
#include "oc_core.h"
#include "oc_regions.h"
#include "oc_files.h"
#include "oc_chunks.h"
#include "oc_codecs.h"
#include "oc_source.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- per-thread state: a decoder context and buffers ----
 * Kept between calls (a context and buffers per chunk would cost more than the decoding of a
 * small chunk), and given back when the work is done: oc_chunk_states_release() (the end of a
 * step, a pager worker with nothing queued) drops the buffers and contexts of every thread not
 * inside a call now, and those of busy threads when their call ends.  The buffers are scratch
 * mappings (scratch.c); the contexts' memory is counted there too. */

typedef struct reader_state reader_state;
struct reader_state {
    ZSTD_DCtx *dctx;
    ZSTD_CCtx *cctx;
    char *src; /* a chunk's stored bytes */
    size_t src_size;
    char *junk; /* decoded bytes before a job's skip land here */
    size_t junk_size;
    char *whole; /* a whole decoded chunk, when only part of it is wanted */
    size_t whole_size;
    char *packed; /* a chunk compressed for writing */
    size_t packed_size;
    size_t ctx_bytes; /* the contexts' memory, as counted in oc_scratch_total */
    int busy;         /* calls in progress on this thread (and a pack's output in use) */
    int release;      /* released while busy: drop everything when the call ends */
    reader_state *next, *prev; /* every thread's state, under states_lock */
};

static pthread_key_t state_key;
static pthread_once_t state_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t states_lock = PTHREAD_MUTEX_INITIALIZER;
static reader_state states = {.next = &states, .prev = &states};
static OC_TLS reader_state *my_state;

/* The contexts' memory as zstd reports it, counted with the scratch; lock held. */
static void count_contexts(reader_state *s)
{
    size_t now = 0;
    if (s->dctx != NULL && oc_zstd.sizeof_d != NULL) {
        now += oc_zstd.sizeof_d(s->dctx);
    }
    if (s->cctx != NULL && oc_zstd.sizeof_c != NULL) {
        now += oc_zstd.sizeof_c(s->cctx);
    }
    atomic_fetch_add(&oc_scratch_total, (long long)now - (long long)s->ctx_bytes);
    s->ctx_bytes = now;
}

/* Drops the buffers and contexts (the next call makes new ones); states_lock held or the
 * state unreachable. */
static void state_drop(reader_state *s)
{
    if (s->dctx != NULL) {
        oc_zstd.free(s->dctx);
        s->dctx = NULL;
    }
    if (s->cctx != NULL) {
        oc_zstd.free_c(s->cctx);
        s->cctx = NULL;
    }
    count_contexts(s);
    oc_scratch_drop(&s->src, &s->src_size);
    oc_scratch_drop(&s->junk, &s->junk_size);
    oc_scratch_drop(&s->whole, &s->whole_size);
    oc_scratch_drop(&s->packed, &s->packed_size);
    s->release = 0;
}

static void state_free(void *p)
{
    reader_state *s = p;
    pthread_mutex_lock(&states_lock);
    s->prev->next = s->next;
    s->next->prev = s->prev;
    state_drop(s);
    pthread_mutex_unlock(&states_lock);
    free(s);
}

static void state_key_make(void)
{
    pthread_key_create(&state_key, state_free);
}

/* This thread's state, marked busy until state_put(). */
static reader_state *state_get(void)
{
    reader_state *s = my_state;
    if (s == NULL) {
        pthread_once(&state_once, state_key_make);
        s = calloc(1, sizeof *s);
        if (s == NULL) {
            return NULL;
        }
        if (pthread_setspecific(state_key, s) != 0) {
            free(s);
            return NULL;
        }
        pthread_mutex_lock(&states_lock);
        s->next = states.next;
        s->prev = &states;
        states.next->prev = s;
        states.next = s;
        pthread_mutex_unlock(&states_lock);
        my_state = s;
    }
    pthread_mutex_lock(&states_lock);
    s->busy++;
    pthread_mutex_unlock(&states_lock);
    return s;
}

/* The call that took s is over: its contexts are counted, and dropped if released meanwhile. */
static void state_put(reader_state *s)
{
    if (s == NULL) {
        return;
    }
    pthread_mutex_lock(&states_lock);
    count_contexts(s);
    if (--s->busy == 0 && s->release) {
        state_drop(s);
    }
    pthread_mutex_unlock(&states_lock);
}

void oc_chunk_states_release(void)
{
    pthread_mutex_lock(&states_lock);
    for (reader_state *s = states.next; s != &states; s = s->next) {
        if (s->busy > 0) {
            s->release = 1;
        }
        else {
            state_drop(s);
        }
    }
    pthread_mutex_unlock(&states_lock);
}

/* Idle threads' scratch and cached free regions, here rather than in scratch.c: the readers'
 * states are above the scratch mappings they hold. */
void oc_scratch_release(void)
{
    oc_chunk_states_release();
    oc_region_cache_trim(0);
}

void oc_chunk_state_release_mine(void)
{
    reader_state *s = my_state;
    if (s != NULL) {
        pthread_mutex_lock(&states_lock);
        if (s->busy == 0) {
            state_drop(s);
        }
        pthread_mutex_unlock(&states_lock);
    }
}

size_t oc_chunk_state_bytes_mine(void)
{
    reader_state *s = my_state;
    if (s == NULL) {
        return 0;
    }
    pthread_mutex_lock(&states_lock);
    size_t n = s->src_size + s->junk_size + s->whole_size + s->packed_size + s->ctx_bytes;
    pthread_mutex_unlock(&states_lock);
    return n;
}

void oc_chunks_atfork(int phase)
{
    if (phase == OC_FORK_PREPARE) {
        pthread_mutex_lock(&states_lock);
        return;
    }
    pthread_mutex_unlock(&states_lock);
}

static char *grow(char **buf, size_t *size, size_t n) { return oc_scratch_grow(buf, size, n); }

/* How many stored bytes a job has: nbytes, or (-1) the rest of the source from offset; -1 with
 * a message when that cannot be told. */
static int64_t stored_length(const oc_source *src, int64_t offset, int64_t nbytes, char *err,
                             size_t err_n)
{
    if (nbytes >= 0) {
        return nbytes;
    }
    int64_t rest = oc_source_rest(src, offset);
    if (rest < 0) {
        snprintf(err, err_n, "the size of the stored bytes: %s", strerror(errno));
    }
    return rest;
}

/* n stored bytes at offset in memory: where they are for bytes in memory, else read into this
 * thread's buffer.  NULL with a message when they cannot be read. */
static const char *stored_in_memory(reader_state *s, const oc_source *src, int64_t offset,
                                    size_t n, char *err, size_t err_n)
{
    const char *at = oc_source_at(src, offset, n);
    if (at != NULL) {
        return at;
    }
    char *buf = grow(&s->src, &s->src_size, n + 1);
    size_t got;
    if (buf == NULL) {
        snprintf(err, err_n, "out of memory");
        return NULL;
    }
    if (oc_source_read(src, buf, n, offset, &got) != 0) {
        snprintf(err, err_n, "read %zu of %zu bytes: %s", got, n, strerror(errno));
        return NULL;
    }
    return buf;
}

/* ---- one job ---- */

/* Where one job's stored bytes are. */
typedef struct {
    const oc_source *src;
    int64_t offset, nbytes; /* nbytes -1: the rest of the source */
    int64_t skip;           /* decoded bytes before the wanted range */
} job_spec;

/* Decode a whole frame of exactly n bytes into dst. */
static int zstd_whole(reader_state *s, const char *src, size_t src_n, char *dst, size_t n,
                      char *err, size_t err_n)
{
    size_t r = oc_zstd.decompress(s->dctx, dst, n, src, src_n);
    if (oc_zstd.is_error(r)) {
        snprintf(err, err_n, "zstd: %s", oc_zstd.error_name(r));
        return -1;
    }
    if (r != n) {
        snprintf(err, err_n, "decoded %zu bytes, expected %zu", r, n);
        return -1;
    }
    return 0;
}

/* Decode the bytes [skip, skip + n) of a chunk of chunk_n bytes stored as zstd frames into
 * dst: one frame, or several one after the other (a rechunk copies its source chunks' frames;
 * zstd decodes them as one stream). */
static int zstd_range(reader_state *s, const char *src, size_t src_n, size_t chunk_n,
                      size_t skip, char *dst, size_t n, char *err, size_t err_n)
{
    unsigned long long declared = oc_zstd.content_size(src, src_n);
    if (declared == ZSTD_CONTENTSIZE_ERROR) {
        snprintf(err, err_n, "not a zstd frame");
        return -1;
    }
    if (declared != ZSTD_CONTENTSIZE_UNKNOWN && declared > chunk_n) {
        snprintf(err, err_n, "the zstd frame holds %llu bytes, expected %zu", declared, chunk_n);
        return -1;
    }
    if (skip == 0 && n == chunk_n) {
        return zstd_whole(s, src, src_n, dst, n, err, err_n);
    }
    if (chunk_n <= 2 * ZSTD_BLOCKSIZE_MAX || 4 * (skip + n) > 3 * chunk_n) {
        /* Small chunks, or ranges near the end: decoding the whole frame at once and copying
           the range beats streaming, which copies every decoded block out of its window. */
        if (grow(&s->whole, &s->whole_size, chunk_n) == NULL) {
            snprintf(err, err_n, "out of memory");
            return -1;
        }
        if (zstd_whole(s, src, src_n, s->whole, chunk_n, err, err_n) != 0) {
            return -1;
        }
        memcpy(dst, s->whole + skip, n);
        return 0;
    }
    if (grow(&s->junk, &s->junk_size, ZSTD_BLOCKSIZE_MAX) == NULL) {
        snprintf(err, err_n, "out of memory");
        return -1;
    }
    oc_zstd.reset(s->dctx, ZSTD_RESET_SESSION_ONLY);
    ZSTD_inBuffer in = {src, src_n, 0};
    size_t done = 0; /* decoded bytes so far, skipped ones included */
    while (done < skip + n) {
        ZSTD_outBuffer out;
        if (done < skip) {
            size_t want = skip - done;
            out = (ZSTD_outBuffer){s->junk, want < ZSTD_BLOCKSIZE_MAX ? want : ZSTD_BLOCKSIZE_MAX, 0};
        } else {
            out = (ZSTD_outBuffer){dst + (done - skip), skip + n - done, 0};
        }
        size_t before = in.pos;
        size_t r = oc_zstd.stream(s->dctx, &out, &in);
        if (oc_zstd.is_error(r)) {
            snprintf(err, err_n, "zstd: %s", oc_zstd.error_name(r));
            return -1;
        }
        done += out.pos;
        /* A frame that ends with bytes after it is followed by the next frame. */
        int ended = (r == 0 && in.pos == in.size) || (out.pos == 0 && in.pos == before);
        if (done < skip + n && ended) {
            /* the last frame ended, or its bytes did, before the range did */
            snprintf(err, err_n, "the frame ends after %zu of %zu bytes", done, skip + n);
            return -1;
        }
    }
    return 0;
}

/* An uncompressed chunk followed by its CRC-32C (chunk_n + 4 bytes stored): the whole chunk is
 * read, into dst when the job wants all of it, and checked. */
static int raw_checked(reader_state *s, const job_spec *job, size_t chunk_n, size_t skip,
                       char *dst, size_t n, char *err, size_t err_n)
{
    int whole = skip == 0 && n == chunk_n;
    char *buf = whole ? dst : grow(&s->whole, &s->whole_size, chunk_n);
    unsigned char sum[4];
    size_t got;
    if (buf == NULL) {
        snprintf(err, err_n, "out of memory");
        return -1;
    }
    if (oc_source_read(job->src, buf, chunk_n, job->offset, &got) != 0 ||
        oc_source_read(job->src, (char *)sum, 4, job->offset + (int64_t)chunk_n, &got) != 0) {
        snprintf(err, err_n, "read the chunk: %s", strerror(errno));
        return -1;
    }
    uint32_t computed = oc_crc32c(buf, chunk_n);
    if (computed != oc_le32(sum)) {
        snprintf(err, err_n, "the CRC-32C checksum does not match (stored %08x, computed %08x)",
                 oc_le32(sum), computed);
        return -1;
    }
    if (!whole) {
        memcpy(dst, buf + skip, n);
    }
    return 0;
}

/* Decode one whole chunk of the other codecs (blosc, gzip/zlib, numcodecs' lz4) into dst. */
static int decode_other(int codec, const char *src, size_t src_n, char *dst, size_t chunk_n,
                        char *err, size_t err_n)
{
    switch (OC_CODEC_KIND(codec)) {
    case OC_CODEC_BLOSC:
        return oc_blosc_decode(codec, src, src_n, dst, chunk_n, err, err_n);
    case OC_CODEC_GZIP:
        return oc_inflate(src, src_n, dst, chunk_n, err, err_n);
    case OC_CODEC_LZ4:
        return oc_lz4_decode(src, src_n, dst, chunk_n, err, err_n);
    default:
        snprintf(err, err_n, "unknown codec %d", codec);
        return -1;
    }
}

/* Run one job; 0, or -1 with a message in err.  A job that wants only part of a chunk with a
 * checksum reads or decodes only that part unless the codec asks to verify (OC_CODEC_VERIFY):
 * the checksum covers the whole chunk. */
static int run_job(reader_state *s, int codec, const job_spec *job, size_t chunk_n, char *dst,
                   size_t n, char *err, size_t err_n)
{
    size_t skip = (size_t)job->skip;
    if (skip + n > chunk_n) {
        snprintf(err, err_n, "bytes %zu-%zu asked of a chunk of %zu", skip, skip + n, chunk_n);
        return -1;
    }
    int64_t stored = stored_length(job->src, job->offset, job->nbytes, err, err_n);
    if (stored < 0) {
        return -1;
    }
    int kind = OC_CODEC_KIND(codec);
    int crc = (codec & OC_CODEC_CRC32C) != 0;
    int whole = skip == 0 && n == chunk_n;
    int verify = whole || (codec & OC_CODEC_VERIFY) != 0;
    size_t tail = crc ? 4 : 0;
    size_t got;
    if (kind == OC_CODEC_RAW) {
        if ((size_t)stored != chunk_n + tail) {
            snprintf(err, err_n, "%lld bytes stored, expected %zu", (long long)stored,
                     chunk_n + tail);
            return -1;
        }
        if (crc && verify) {
            return raw_checked(s, job, chunk_n, skip, dst, n, err, err_n);
        }
        if (oc_source_read(job->src, dst, n, job->offset + (int64_t)skip, &got) != 0) {
            snprintf(err, err_n, "read %zu of %zu bytes: %s", got, n, strerror(errno));
            return -1;
        }
        return 0;
    }
    /* zstd, lz4 and gzip add a few bytes per 128 KiB at worst, blosc 16 and a few per block;
       far more means a damaged size */
    if ((size_t)stored > chunk_n + chunk_n / 64 + 4096 + tail) {
        snprintf(err, err_n, "%lld bytes stored for a chunk of %zu", (long long)stored, chunk_n);
        return -1;
    }
    /* bytes in memory are decoded where they are; a file's are read into this thread's buffer */
    const char *src = stored_in_memory(s, job->src, job->offset, (size_t)stored, err, err_n);
    if (src == NULL) {
        return -1;
    }
    size_t src_n = (size_t)stored;
    if (crc) {
        if (oc_crc32c_check(src, src_n, err, err_n) != 0) {
            return -1;
        }
        src_n -= 4;
    }
    if (kind == OC_CODEC_ZSTD && (whole || !verify)) {
        /* whole frames are checked by zstd (the frame's checksum, when it has one) */
        return zstd_range(s, src, src_n, chunk_n, skip, dst, n, err, err_n);
    }
    /* a shuffled spill chunk is unshuffled from a buffer of its own into dst */
    int direct = whole && kind != OC_CODEC_ZSTD_SHUFFLE8;
    char *out = direct ? dst : grow(&s->whole, &s->whole_size, chunk_n);
    if (out == NULL) {
        snprintf(err, err_n, "out of memory");
        return -1;
    }
    int rc = kind == OC_CODEC_ZSTD || kind == OC_CODEC_ZSTD_SHUFFLE8
                 ? zstd_range(s, src, src_n, chunk_n, 0, out, chunk_n, err, err_n)
                 : decode_other(codec, src, src_n, out, chunk_n, err, err_n);
    if (rc != 0) {
        return -1;
    }
    if (kind == OC_CODEC_ZSTD_SHUFFLE8) {
        oc_unshuffle8(out, chunk_n, skip, dst, n);
    }
    else if (!direct) {
        memcpy(dst, out + skip, n);
    }
    return 0;
}

/* ---- byte shuffle by 8: byte b of every 8-byte word goes to stream b (blosc's shuffle with a
 * type size of 8, which also groups the bytes of 2- and 4-byte types by significance) ---- */

void oc_shuffle8(const char *src, size_t n, char *dst)
{
    size_t m = n / 8;
    const unsigned char *in = (const unsigned char *)src;
    unsigned char *out = (unsigned char *)dst;
    for (size_t i = 0; i < m; i++) {
        uint64_t v;
        memcpy(&v, in + 8 * i, 8);
        for (int b = 0; b < 8; b++) {
            out[(size_t)b * m + i] = (unsigned char)(v >> (8 * b));
        }
    }
    memcpy(out + 8 * m, in + 8 * m, n - 8 * m);
}

/* Bytes [skip, skip + n) of the unshuffled form of `src` (total bytes) into dst. */
void oc_unshuffle8(const char *src, size_t total, size_t skip, char *dst, size_t n)
{
    size_t m = total / 8;
    const unsigned char *in = (const unsigned char *)src;
    unsigned char *out = (unsigned char *)dst;
    size_t j = skip, end = skip + n;
    while (j < end && (j % 8 != 0 || j + 8 > 8 * m)) {
        out[j - skip] = j >= 8 * m ? in[j] : in[(j % 8) * m + j / 8];
        j++;
    }
    for (; j + 8 <= end && j + 8 <= 8 * m; j += 8) {
        size_t i = j / 8;
        uint64_t v = 0;
        for (int b = 0; b < 8; b++) {
            v |= (uint64_t)in[(size_t)b * m + i] << (8 * b);
        }
        memcpy(out + (j - skip), &v, 8);
    }
    for (; j < end; j++) {
        out[j - skip] = j >= 8 * m ? in[j] : in[(j % 8) * m + j / 8];
    }
}

/* Compress n bytes of src as one zstd frame at `level` (a checksum when asked, the content
 * size in the header: what numcodecs writes), shuffled by 8 first when asked, into this
 * thread's buffer: *out and *out_n (valid until this thread's next call).  0, ENOMEM, ENOSYS
 * (no libzstd) or EIO (zstd refused). */
static int pack(const char *src, size_t n, int shuffle8, int level, int checksum, char **out,
                size_t *out_n)
{
    if (!oc_zstd_ready()) {
        return ENOSYS;
    }
    reader_state *s = state_get();
    if (s == NULL) {
        return ENOMEM;
    }
    if (s->cctx == NULL && (s->cctx = oc_zstd.create_c()) == NULL) {
        state_put(s);
        return ENOMEM;
    }
    size_t bound = oc_zstd.bound(n);
    if (oc_zstd.is_error(bound) || grow(&s->packed, &s->packed_size, bound) == NULL ||
        (shuffle8 && grow(&s->whole, &s->whole_size, n) == NULL)) {
        state_put(s);
        return ENOMEM;
    }
    if (shuffle8) {
        oc_shuffle8(src, n, s->whole);
        src = s->whole;
    }
    oc_zstd.reset_c(s->cctx, ZSTD_RESET_SESSION_AND_PARAMETERS);
    size_t r = oc_zstd.set_parameter(s->cctx, ZSTD_C_COMPRESSION_LEVEL, level);
    if (!oc_zstd.is_error(r)) {
        r = oc_zstd.set_parameter(s->cctx, ZSTD_C_CHECKSUM_FLAG, checksum);
    }
    if (!oc_zstd.is_error(r)) {
        r = oc_zstd.compress(s->cctx, s->packed, bound, src, n);
    }
    if (oc_zstd.is_error(r)) {
        state_put(s);
        return EIO;
    }
    *out = s->packed;
    *out_n = r;
    return 0; /* busy until oc_zstd_pack_done(): *out is this state's buffer */
}

void oc_zstd_pack_done(void) { state_put(my_state); }

/* Compressed spill's chunks: shuffled by 8, no checksum (see pack); oc_zstd_pack_done()
 * once the output is written. */
int oc_zstd_pack_shuffled(const char *src, size_t n, int level, char **out, size_t *out_n)
{
    return pack(src, n, 1, level, 0, out, out_n);
}

/* A zarr chunk's bytes as its store's zstd codec writes them (see pack). */
int oc_zstd_pack(const char *src, size_t n, int level, int checksum, char **out, size_t *out_n)
{
    return pack(src, n, 0, level, checksum, out, out_n);
}


/* The stored bytes of a checked source (an entry of the chunk cache) read whole into this
 * thread's buffer and checked against the source's CRC-32C, as a source in memory in *whole:
 * a damaged entry fails here, before any of it is decoded.  Where *codec ends in zarr's
 * crc32c, that checksum is checked here too, from the same pass over the bytes (the entry's
 * CRC-32C is combined from it, see oc_crc32c_combine), and *whole and *codec are the chunk
 * without it.  0, or -1 with a message. */
static int checked_bytes(reader_state *s, const oc_source *src, int64_t offset, int64_t nbytes,
                         int *codec, oc_source *whole, char *err, size_t err_n)
{
    nbytes = stored_length(src, offset, nbytes, err, err_n);
    if (nbytes < 0) {
        return -1;
    }
    if (!oc_codec_lib_ready(OC_LIB_CRC32C)) {
        snprintf(err, err_n, "the CRC-32C library is not loaded");
        return -1;
    }
    const char *at = stored_in_memory(s, src, offset, (size_t)nbytes, err, err_n);
    if (at == NULL) {
        return -1;
    }
    int chunk_crc = (*codec & OC_CODEC_CRC32C) != 0 && OC_CODEC_KIND(*codec) != OC_CODEC_H5 &&
                    nbytes >= 4;
    size_t body = chunk_crc ? (size_t)nbytes - 4 : (size_t)nbytes;
    uint32_t chunk_sum = oc_crc32c(at, body);
    uint32_t sum = oc_crc32c_extend(oc_crc32c_combine(src->crc_seed, chunk_sum, body), at + body,
                                    (size_t)nbytes - body);
    if (sum != src->crc) {
        snprintf(err, err_n, "the cache entry's CRC-32C does not match (stored %08x, computed %08x)",
                 src->crc, sum);
        return -1;
    }
    if (chunk_crc) {
        if (oc_crc32c_trailer_check(at, (size_t)nbytes, chunk_sum, err, err_n) != 0) {
            return -1;
        }
        *codec &= ~OC_CODEC_CRC32C;
    }
    *whole = (oc_source){.fd = -1, .path = NULL, .mem = at, .mem_len = (int64_t)body, .checked = 0};
    return 0;
}

/* Decode bytes [skip, skip + n) of one chunk (chunk_n bytes decoded) whose stored bytes are
 * at src/offset/nbytes (nbytes -1: the rest of the source) into dst, on this thread's state:
 * the one decoder of the chunk reader (reader.c) and the pager (pager.c), for callers that
 * run without the GIL.  HDF5 pipelines go to h5filters.c.  0, or -1 with a message in err. */
int oc_decode(int codec, const oc_source *src, int64_t offset, int64_t nbytes, size_t chunk_n,
              size_t skip, char *dst, size_t n, char *err, size_t err_n)
{
    if (OC_CODEC_KIND(codec) == OC_CODEC_H5 && !src->checked) {
        return oc_h5_decode(codec, src, offset, nbytes, chunk_n, skip, dst, n, err, err_n);
    }
    int zstd_codec = OC_CODEC_KIND(codec) == OC_CODEC_ZSTD ||
                     OC_CODEC_KIND(codec) == OC_CODEC_ZSTD_SHUFFLE8;
    if (!oc_codec_ready(codec)) {
        snprintf(err, err_n, "the library of codec %d is not loaded", codec);
        return -1;
    }
    reader_state *s = state_get();
    if (s != NULL && zstd_codec && s->dctx == NULL) {
        s->dctx = oc_zstd.create();
    }
    if (s == NULL || (zstd_codec && s->dctx == NULL)) {
        state_put(s);
        snprintf(err, err_n, "out of memory");
        return -1;
    }
    oc_source whole;
    if (src->checked) {
        if (checked_bytes(s, src, offset, nbytes, &codec, &whole, err, err_n) != 0) {
            state_put(s);
            return -1;
        }
        src = &whole;
        offset = 0;
        nbytes = whole.mem_len;
    }
    job_spec job = {.src = src, .offset = offset, .nbytes = nbytes, .skip = (int64_t)skip};
    int rc = run_job(s, codec, &job, chunk_n, dst, n, err, err_n);
    state_put(s);
    return rc;
}

int oc_decode_range(int codec, int fd, int64_t offset, int64_t nbytes, size_t chunk_n, size_t skip,
                    char *dst, size_t n, char *err, size_t err_n)
{
    oc_source file = oc_file_source(fd);
    return oc_decode(codec, &file, offset, nbytes, chunk_n, skip, dst, n, err, err_n);
}

/* ---- zstd frames, for the Python functions (py_chunks.c), without the GIL ---- */

/* Gives the compression context the parameters that level picks for a source of tune_bytes
 * (its match window, tables and search), where the library can say them; the frame stays one
 * frame of the whole source, which every zstd decoder reads. */
static size_t zstd_tune(ZSTD_CCtx *cctx, int level, size_t tune_bytes)
{
    if (oc_zstd.level_params == NULL) {
        return 0; /* a library without ZSTD_getCParams: the level's own parameters */
    }
    oc_zstd_cparams p = oc_zstd.level_params(level, tune_bytes, 0);
    const int ids[] = {ZSTD_C_WINDOW_LOG, ZSTD_C_CHAIN_LOG,    ZSTD_C_HASH_LOG, ZSTD_C_SEARCH_LOG,
                       ZSTD_C_MIN_MATCH,  ZSTD_C_TARGET_LENGTH, ZSTD_C_STRATEGY};
    const int values[] = {(int)p.window_log, (int)p.chain_log,     (int)p.hash_log,
                          (int)p.search_log, (int)p.min_match, (int)p.target_length, p.strategy};
    size_t r = 0;
    for (size_t i = 0; i < sizeof ids / sizeof ids[0] && !oc_zstd.is_error(r); i++) {
        r = oc_zstd.set_parameter(cctx, ids[i], values[i]);
    }
    return r;
}

/* Writes one zstd frame of src (level, checksum; with crc, the frame's CRC-32C after it) to fd
 * from its position, compressed into this thread's buffer; with tune_bytes (0 < tune_bytes < n),
 * using the parameters the level picks for a source of that size (see zstd_tune).  With running
 * (not NULL), the CRC-32C *running is extended over the frame's bytes: a chunk written as several
 * frames is checksummed whole without reading it back.  0 with *written the bytes written;
 * OC_ZW_NOMEM; OC_ZW_ZSTD with *written zstd's error code; or the errno of the write. */
int oc_zstd_write(int fd, const char *src, size_t n, int level, int checksum, int crc,
                  size_t tune_bytes, int direct, uint32_t *running, size_t *written)
{
    size_t r = 0;
    int result = 0;
    reader_state *s = state_get();
    size_t bound = oc_zstd.bound(n);
    if (s != NULL && s->cctx == NULL) {
        s->cctx = oc_zstd.create_c();
    }
    if (s == NULL || s->cctx == NULL || oc_zstd.is_error(bound) ||
        grow(&s->packed, &s->packed_size, bound + 4) == NULL) {
        result = OC_ZW_NOMEM;
    } else {
        oc_zstd.reset_c(s->cctx, ZSTD_RESET_SESSION_AND_PARAMETERS);
        r = oc_zstd.set_parameter(s->cctx, ZSTD_C_COMPRESSION_LEVEL, level);
        if (!oc_zstd.is_error(r) && tune_bytes > 0 && tune_bytes < n &&
            oc_zstd.is_error(zstd_tune(s->cctx, level, tune_bytes))) {
            /* a library refusing a parameter: the level's own ones, as without tune_bytes */
            oc_zstd.reset_c(s->cctx, ZSTD_RESET_SESSION_AND_PARAMETERS);
            r = oc_zstd.set_parameter(s->cctx, ZSTD_C_COMPRESSION_LEVEL, level);
        }
        if (!oc_zstd.is_error(r)) {
            r = oc_zstd.set_parameter(s->cctx, ZSTD_C_CHECKSUM_FLAG, checksum);
        }
        if (!oc_zstd.is_error(r)) {
            r = oc_zstd.compress(s->cctx, s->packed, bound, src, n);
        }
        if (oc_zstd.is_error(r)) {
            result = OC_ZW_ZSTD;
        } else {
            if (running != NULL) {
                *running = oc_crc32c_extend(*running, s->packed, r);
            }
            if (crc) {
                uint32_t sum = oc_crc32c(s->packed, r);
                for (int i = 0; i < 4; i++) {
                    s->packed[r + (size_t)i] = (char)(sum >> (8 * i));
                }
                r += 4;
            }
            /* the buffer is a mapping of its own: aligned for direct I/O */
            result = direct ? oc_write_direct(fd, s->packed, r) : oc_write_all(fd, s->packed, r);
        }
    }
    state_put(s);
    *written = r;
    return result;
}
