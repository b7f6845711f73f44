/*
 * Order keys of float columns, for exact quantiles: each column's count and range of keys, and
 * the keys inside given intervals.  In NumPy each took a dozen passes over every slice of a
 * block (keys, masks, comparisons, boolean indexing); here each value is read once, row after
 * row, with per-column state that stays in the first-level cache.
 */
#include "oc_keys.h"

#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#define KEY_CLONES __attribute__((target_clones("avx2", "default"), optimize("O3")))
#else
#define KEY_CLONES __attribute__((optimize("O3")))
#endif

/* A column's count and smallest and largest key, in keys' width K, over at most 2**31 rows:
 * written without branches, all in one width, so the loop over a row's columns vectorizes. */
#define SLAB_SUMMARY(NAME, T, K, KEY, LARGEST)                                                \
    KEY_CLONES static void NAME(const T *m, size_t rows, size_t cols, K *n, K *lo, K *hi)    \
    {                                                                                         \
        for (size_t r = 0; r < rows; r++) {                                                   \
            const T *row = m + r * cols;                                                      \
            for (size_t j = 0; j < cols; j++) {                                               \
                T v = row[j];                                                                 \
                K number = v == v;                                                            \
                K key = KEY(v);                                                               \
                K below = number ? key : (K)LARGEST;                                          \
                K above = number ? key : 0;                                                   \
                n[j] += number;                                                               \
                lo[j] = below < lo[j] ? below : lo[j];                                        \
                hi[j] = above > hi[j] ? above : hi[j];                                        \
            }                                                                                 \
        }                                                                                     \
    }
SLAB_SUMMARY(summary_f32, float, uint32_t, key_of_float, UINT32_MAX)
SLAB_SUMMARY(summary_f64, double, uint64_t, key_of_double, UINT64_MAX)

#define SUMMARY(T, K, SLAB, LARGEST)                                                          \
    do {                                                                                      \
        K *n = scratch, *lo = n + cols, *hi = lo + cols;                                      \
        for (size_t j = 0; j < cols; j++) {                                                   \
            lo[j] = LARGEST;                                                                  \
            hi[j] = 0;                                                                        \
        }                                                                                     \
        for (size_t r0 = 0; r0 < rows; r0 += SLAB_ROWS) {                                     \
            size_t step = rows - r0 < SLAB_ROWS ? rows - r0 : SLAB_ROWS;                      \
            memset(n, 0, cols * sizeof *n);                                                   \
            SLAB((const T *)x + r0 * cols, step, cols, n, lo, hi);                            \
            for (size_t j = 0; j < cols; j++) {                                               \
                valid[j] += (int64_t)n[j];                                                    \
            }                                                                                 \
        }                                                                                     \
        for (size_t j = 0; j < cols; j++) {                                                   \
            low[j] = lo[j];                                                                   \
            high[j] = hi[j];                                                                  \
        }                                                                                     \
    } while (0)

enum { SLAB_ROWS = 1 << 30 };

int oc_key_summary(const void *x, size_t itemsize, size_t rows, size_t cols, int64_t *valid,
                   uint64_t *low, uint64_t *high)
{
    void *scratch = malloc(3 * cols * itemsize + 1);
    if (scratch == NULL) {
        return -1;
    }
    memset(valid, 0, cols * sizeof *valid);
    if (itemsize == 4) {
        SUMMARY(float, uint32_t, summary_f32, UINT32_MAX);
    } else {
        SUMMARY(double, uint64_t, summary_f64, UINT64_MAX);
    }
    free(scratch);
    return 0;
}

/* The values of a tile (a whole number of rows, flat) whose key lies in some owned interval of
 * their column, found by loops over the tile that vectorize (the intervals spread out to the
 * tile's length beforehand: lo, hi and in_use hold slots x tile items), then written, a value
 * at a time, for each slot that holds it (few values do). */
#define TILE_GATHER(NAME, T, K, KEY)                                                          \
    KEY_CLONES static size_t NAME(const T *m, size_t values, size_t tile, const K *lo,        \
                                  const K *hi, const uint8_t *in_use, K *keys, uint8_t *hit,  \
                                  const struct gather *g, size_t found)                       \
    {                                                                                         \
        for (size_t i0 = 0; i0 < values; i0 += tile) {                                        \
            size_t n = values - i0 < tile ? values - i0 : tile;                               \
            const T *v = m + i0;                                                              \
            for (size_t i = 0; i < n; i++) {                                                  \
                keys[i] = KEY(v[i]);                                                          \
                hit[i] = 0;                                                                   \
            }                                                                                 \
            for (size_t s = 0; s < g->slots; s++) {                                           \
                const K *l = lo + s * tile, *h = hi + s * tile;                               \
                const uint8_t *u = in_use + s * tile;                                         \
                for (size_t i = 0; i < n; i++) {                                              \
                    hit[i] |= u[i] & (keys[i] >= l[i]) & (keys[i] <= h[i]);                   \
                }                                                                             \
            }                                                                                 \
            for (size_t i = n; i % 8 != 0; i++) {                                             \
                hit[i] = 0; /* (the tile's last word, read whole below) */                    \
            }                                                                                 \
            for (size_t i = 0; i < n; i++) {                                                  \
                uint64_t word;                                                                \
                memcpy(&word, hit + (i & ~(size_t)7), sizeof word);                           \
                if (word == 0) {                                                              \
                    i |= 7; /* eight values, none in an interval */                           \
                    continue;                                                                 \
                }                                                                             \
                if (!hit[i] || v[i] != v[i]) {                                                \
                    continue;                                                                 \
                }                                                                             \
                size_t j = i % g->cols;                                                       \
                for (size_t s = 0; s < g->slots; s++) {                                       \
                    size_t at = s * g->cols + j;                                              \
                    if (g->own[at] && keys[i] >= g->low[at] && keys[i] <= g->high[at]) {      \
                        if (g->groups != NULL && found < g->capacity) {                       \
                            g->groups[found] = g->group[at];                                  \
                            g->keys[found] = keys[i];                                         \
                        }                                                                     \
                        found++;                                                              \
                    }                                                                         \
                }                                                                             \
            }                                                                                 \
        }                                                                                     \
        return found;                                                                         \
    }

struct gather {
    size_t cols, slots, capacity;
    const uint8_t *own;
    const uint64_t *low, *high;
    const int64_t *group;
    int64_t *groups;
    uint64_t *keys;
};

TILE_GATHER(gather_f32, float, uint32_t, key_of_float)
TILE_GATHER(gather_f64, double, uint64_t, key_of_double)

/* The intervals spread out to a tile of `tile` values (rows of cols), in the keys' width: an
 * interval beyond the width holds no key of it. */
#define SPREAD(K, LARGEST)                                                                    \
    do {                                                                                      \
        K *lo = scratch, *hi = lo + slots * tile, *keys = hi + slots * tile;                  \
        uint8_t *in_use = (uint8_t *)(keys + tile), *hit = in_use + slots * tile;             \
        for (size_t s = 0; s < slots; s++) {                                                  \
            for (size_t i = 0; i < tile; i++) {                                               \
                size_t at = s * cols + i % cols;                                              \
                int fits = low[at] <= (LARGEST);                                              \
                lo[s * tile + i] = fits ? (K)low[at] : 0;                                     \
                hi[s * tile + i] = high[at] > (LARGEST) ? (K)(LARGEST) : (K)high[at];         \
                in_use[s * tile + i] = own[at] && fits;                                       \
            }                                                                                 \
        }                                                                                     \
        found = itemsize == 4                                                                 \
                    ? gather_f32(x, rows * cols, tile, (const uint32_t *)lo,                  \
                                 (const uint32_t *)hi, in_use, (uint32_t *)keys, hit, &g, 0)  \
                    : gather_f64(x, rows * cols, tile, (const uint64_t *)lo,                  \
                                 (const uint64_t *)hi, in_use, (uint64_t *)keys, hit, &g, 0); \
    } while (0)

size_t oc_key_gather(const void *x, size_t itemsize, size_t rows, size_t cols, size_t slots,
                     const uint8_t *own, const uint64_t *low, const uint64_t *high,
                     const int64_t *group, int64_t *found_groups, uint64_t *found_keys,
                     size_t capacity)
{
    if (rows == 0 || cols == 0 || slots == 0) {
        return 0;
    }
    struct gather g = {cols, slots, capacity, own, low, high, group, found_groups, found_keys};
    size_t tile = oc_unit_values(cols);
    void *scratch = malloc(slots * tile * (2 * itemsize + 1) + tile * itemsize + tile + 8);
    if (scratch == NULL) {
        return SIZE_MAX;
    }
    size_t found;
    if (itemsize == 4) {
        SPREAD(uint32_t, UINT32_MAX);
    } else {
        SPREAD(uint64_t, UINT64_MAX);
    }
    free(scratch);
    return found;
}
