/*
 * Values counted in bins per column, for exact quantiles: the inner loop of a counting pass.
 * In NumPy it took a dozen passes over each slice of a block (keys, masks, positions, offsets)
 * and np.add.at; here each value is read once.
 *
 * Counting straight from the rows into the caller's counts took 13-42 ns a value here: a
 * row's values go to as many columns' counts (megabytes of them, a power of two apart), and a
 * column walked down the rows reads a cache line per value.  So the columns are copied out
 * GROUP at a time (a cache line of each row) for a tile of rows, and each column's values are
 * then counted in order into 32-bit counts that stay in the first-level cache (10-13 ns a
 * value on the benchmarks' machine, most of it the copy's reads).
 */
#include "oc_bins.h"

#include <stdlib.h>
#include <string.h>

/* (a column of the copy is padded by a cache line: columns a power of two apart would all
 * fall in the same cache sets) */
enum { GROUP = 16, TILE_ROWS = 2048, COLUMN_STRIDE = TILE_ROWS + 16 };

static inline uint64_t key_of_float(float v)
{
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    uint32_t flip = (uint32_t)((int32_t)bits >> 31) | UINT32_C(0x80000000);
    return bits ^ flip;
}

static inline uint64_t key_of_double(double v)
{
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    uint64_t flip = (uint64_t)((int64_t)bits >> 63) | UINT64_C(0x8000000000000000);
    return bits ^ flip;
}

/* The bin of a value by value, as NumPy computes it (_order_keys.value_bins, then a cast to an
 * index): in the values' precision; clip keeps a NaN, which only an infinity times a scale of
 * 0 gives here (NaN values are left out before) and value_bins then sets to 0. */
#define VALUE_BIN(T)                                                                          \
    static inline size_t value_bin_##T(T v, T start, T scale, T last)                         \
    {                                                                                         \
        T p = (v - start) * scale;                                                            \
        if (p != p) {                                                                         \
            return 0;                                                                         \
        }                                                                                     \
        p = p < 0 ? 0 : p;                                                                    \
        p = p > last ? last : p;                                                              \
        return (size_t)(int)p; /* (an int: p <= bins - 1) */                                  \
    }
VALUE_BIN(float)
VALUE_BIN(double)

/* Rows of the matrix taken TILE_ROWS at a time, GROUP columns of them copied into `column`
 * (one column after the other); each owned column's values are then counted in order into
 * `local` and added to the caller's counts.  Values that are NaN are left out. */
#define COUNT_GROUPS(T, KEY)                                                                  \
    do {                                                                                      \
        const T *m = x;                                                                       \
        T *column = scratch;                                                                  \
        for (size_t r0 = 0; r0 < rows; r0 += TILE_ROWS) {                                     \
            size_t n = rows - r0 < TILE_ROWS ? rows - r0 : TILE_ROWS;                         \
            for (size_t j0 = 0; j0 < cols; j0 += GROUP) {                                     \
                size_t g = cols - j0 < GROUP ? cols - j0 : GROUP;                             \
                for (size_t r = 0; r < n; r++) {                                              \
                    const T *row = m + (r0 + r) * cols + j0;                                  \
                    for (size_t i = 0; i < g; i++) {                                          \
                        column[i * COLUMN_STRIDE + r] = row[i];                               \
                    }                                                                         \
                }                                                                             \
                for (size_t i = 0; i < g; i++) {                                              \
                    size_t j = j0 + i;                                                        \
                    if (!own[j]) {                                                            \
                        continue;                                                             \
                    }                                                                         \
                    const T *values = column + i * COLUMN_STRIDE;                             \
                    if (start != NULL) {                                                      \
                        T s = (T)start[j], k = (T)scale[j], last = (T)(bins - 1);             \
                        for (size_t r = 0; r < n; r++) {                                      \
                            T v = values[r];                                                  \
                            if (v == v) {                                                     \
                                local[value_bin_##T(v, s, k, last)]++;                        \
                            }                                                                 \
                        }                                                                     \
                    } else {                                                                  \
                        /* (key - lo) >> sh is below bins by the shift's choice */            \
                        uint64_t lo = low[j], hi = high[j], sh = shift[j];                    \
                        for (size_t r = 0; r < n; r++) {                                      \
                            T v = values[r];                                                  \
                            uint64_t key = KEY(v);                                            \
                            if (v == v && key >= lo && key <= hi) {                           \
                                uint64_t b = (key - lo) >> sh;                                \
                                local[b < bins ? b : bins - 1]++;                             \
                            }                                                                 \
                        }                                                                     \
                    }                                                                         \
                    int64_t *c = counts + j * bins;                                           \
                    for (size_t b = 0; b < bins; b++) {                                       \
                        c[b] += local[b];                                                     \
                        local[b] = 0;                                                         \
                    }                                                                         \
                }                                                                             \
            }                                                                                 \
        }                                                                                     \
    } while (0)

int oc_bin_counts(const void *x, size_t itemsize, size_t rows, size_t cols, const uint8_t *own,
                  size_t bins, const double *start, const double *scale, const uint64_t *low,
                  const uint64_t *high, const uint64_t *shift, int64_t *counts)
{
    if (itemsize != 4 && itemsize != 8) {
        return -1;
    }
    int32_t *local = calloc(bins, sizeof *local); /* (a tile has fewer than 2**31 rows) */
    void *scratch = malloc(GROUP * COLUMN_STRIDE * itemsize);
    if (local == NULL || scratch == NULL) {
        free(local);
        free(scratch);
        return -2;
    }
    if (itemsize == 4) {
        COUNT_GROUPS(float, key_of_float);
    } else {
        COUNT_GROUPS(double, key_of_double);
    }
    free(local);
    free(scratch);
    return 0;
}
