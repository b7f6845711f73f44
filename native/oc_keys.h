/* Order keys of float columns: the summary and gathering passes of exact order statistics
 * (key_columns.c; oocarray/_compute/_selection_passes.py), each value read once, and the keys
 * the counting pass bins by (bins.c). */
#ifndef OC_KEYS_H
#define OC_KEYS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The order key of a value: its bits, the sign bit flipped, every bit of a negative value
 * flipped; keys sort as the values do (NaN aside). */
static inline uint32_t key_of_float(float v)
{
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    return bits ^ ((uint32_t)((int32_t)bits >> 31) | UINT32_C(0x80000000));
}

static inline uint64_t key_of_double(double v)
{
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    return bits ^ ((uint64_t)((int64_t)bits >> 63) | UINT64_C(0x8000000000000000));
}

/* The values of a unit of whole rows of cols values, about 512 (one row where a row holds
 * more): the kernels spread each column's parameters over a unit once, so their loops over a
 * unit's values (flat, whatever the width) vectorize. */
static inline size_t oc_unit_values(size_t cols)
{
    return cols * (cols < 512 ? 512 / cols : 1);
}

/* For each column j of the C-contiguous (rows, cols) matrix x of float (itemsize 4) or double
 * (8): valid[j] its values that are not NaN, low[j] and high[j] the smallest and largest of
 * their order keys (the bits, the sign bit flipped, every bit of a negative value flipped).
 * A column of NaN only keeps low[j] the largest key of the width and high[j] 0.
 * 0; -1 where its scratch memory could not be had. */
int oc_key_summary(const void *x, size_t itemsize, size_t rows, size_t cols, int64_t *valid,
                    uint64_t *low, uint64_t *high);

/* The values of x (as above) whose order key lies in [low[s * cols + j], high[s * cols + j]]
 * for a slot s with own[s * cols + j], NaN never: each found once per such slot, as the pair
 * (group[s * cols + j], key) written to found_groups[i], found_keys[i] while i < capacity
 * (none written where found_groups is NULL).  Returns how many there are, written or not;
 * SIZE_MAX where its scratch memory could not be had. */
size_t oc_key_gather(const void *x, size_t itemsize, size_t rows, size_t cols, size_t slots,
                     const uint8_t *own, const uint64_t *low, const uint64_t *high,
                     const int64_t *group, int64_t *found_groups, uint64_t *found_keys,
                     size_t capacity);

#endif
