/* Column moments of a matrix (moments.c): the means and centred sums of squares that mean,
 * var and std over the leading axes merge block by block. */
#ifndef OC_MOMENTS_H
#define OC_MOMENTS_H

#include <stddef.h>

/* The mean and the sum of squared deviations from it of each of the `cols` columns of the
 * C-contiguous (rows, cols) matrix x, of float (itemsize 4) or double (8), into mean[cols]
 * and m2[cols]; scratch holds 2 * cols doubles.  0, or -1 for an item size it does not know. */
int oc_column_moments(const void *x, size_t itemsize, size_t rows, size_t cols, double *mean,
                      double *m2, double *scratch);

#endif
