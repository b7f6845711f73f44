/* Values counted in bins per column (bins.c): the counting passes of exact order statistics
 * (oocarray/_compute/_selection_passes.py). */
#ifndef OC_BINS_H
#define OC_BINS_H

#include <stddef.h>
#include <stdint.h>

/* Adds to counts[j * bins + b] the values of column j of the C-contiguous (rows, cols) matrix
 * x, of float (itemsize 4) or double (8), for the columns with own[j]; NaN is never counted.
 *
 * By value (start and scale given): every value of the column, in bin
 * clip((v - start[j]) * scale[j], 0, bins - 1), truncated, computed in the values' precision
 * (start and scale rounded to it first), a NaN position (an infinity times a scale of 0) in
 * bin 0: NumPy's arithmetic, step for step, so a bin holds what NumPy puts in it.
 *
 * By key (low, high and shift given): the values whose order key (the bits, the sign bit
 * flipped, every bit of a negative value flipped) lies in [low[j], high[j]], in bin
 * (key - low[j]) >> shift[j].
 *
 * 0; -1 for an item size it does not know, -2 where its scratch memory could not be had, -3 for
 * 65535 bins or more. */
int oc_bin_counts(const void *x, size_t itemsize, size_t rows, size_t cols, const uint8_t *own,
                  size_t bins, const double *start, const double *scale, const uint64_t *low,
                  const uint64_t *high, const uint64_t *shift, int64_t *counts);

#endif
