"""Means, variances and standard deviations (and their nan variants) in one streaming pass,
from chunk moments: a block's partial is its count, mean and sum of squared deviations, and
partials merge with Chan's parallel formula, which stays accurate where a sum of squares would
cancel.  Reductions over leading axes of float blocks take the fast column sums of
``_compute._reduce`` or the native one-pass moments (``native/moments.c``).
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from oocarray import _native
from oocarray._compute._nodes import Node, input_identity
from oocarray._compute._reduce import (
    Reduction,
    Region,
    _column_sums,
    _leading_matrix,
    _probe_dtype,
)

__all__ = ["Moments"]

# Bytes of the slab the variance's deviations are squared in (well inside a core's L2 cache).
_SLAB_BYTES = 512 << 10
# The dtypes whose moments native/moments.c computes (native byte order).
_NATIVE_MOMENTS = (np.dtype(np.float32), np.dtype(np.float64))


class Moments(Reduction):
    """mean, var, std and their nan variants, from merged chunk moments."""

    def __init__(
        self, name: str, expr: Node, axes: tuple[int, ...], keepdims: bool, dtype: Any, ddof: int
    ) -> None:
        super().__init__(name, expr, axes, keepdims)
        self.skip_nan = name.startswith("nan")
        self.kind = name.removeprefix("nan")
        self.sharing_rank = 0 if self.kind == "mean" else 1  # a var partial serves a mean too
        numpy_function = getattr(np, name)
        kwargs = {} if dtype is None else {"dtype": np.dtype(dtype)}
        if self.kind != "mean":
            if isinstance(ddof, int) and not -(1 << 63) <= ddof < 1 << 63:
                # NumPy would raise OverflowError from deep inside its own code
                raise ValueError(f"ddof must fit in a 64-bit integer, got {ddof}")
            kwargs["ddof"] = ddof
        self.result_dtype = _probe_dtype(numpy_function, expr.dtype, **kwargs)
        if dtype is not None:
            work = np.dtype(dtype)
        elif expr.dtype.kind in "biu":
            work = np.dtype(np.float64)
        elif expr.dtype == np.float16:
            work = np.dtype(np.float32)
        else:
            work = expr.dtype
        # In the machine's byte order: NumPy's sums take no byte order in dtype=, and the
        # arithmetic runs in native order anyway (a big-endian array's mean is native too).
        self.work = work.newbyteorder("=")
        self.ddof = ddof
        self.count = np.zeros(self.kept_shape, dtype=np.float64)
        self.mean = np.zeros(self.kept_shape, dtype=self.work)
        real = self.work.type(0).real.dtype if self.work.kind == "c" else self.work
        self.m2 = np.zeros(self.kept_shape, dtype=real)

    def partial(self, block: np.ndarray, region: Region) -> Any:
        # A block's infinities (inf - inf) and overflows give NaN and inf as in NumPy; a
        # whole-array NumPy call may see no such step (its mean can be NaN already), so these
        # arithmetic warnings would be spurious here.
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            return self._moments(block)

    def _moments(self, block: np.ndarray) -> Any:
        values = block.astype(self.work, copy=False)
        matrix = _leading_matrix(values, self.axes)
        if matrix is not None:
            fast = self._matrix_moments(matrix, values.shape)
            # The nan variants equal the plain ones on a block without NaN, and a NaN in the
            # block makes its column's mean NaN: the fast sums first, the NaN-skipping way
            # (several passes over the block) only where a mean came out NaN.
            if not (self.skip_nan and values.dtype.kind == "f") or not np.isnan(fast[1]).any():
                return fast
        if self.skip_nan and values.dtype.kind in "fc":
            valid = ~np.isnan(values)
            count = valid.sum(axis=self.axes, keepdims=True).astype(np.float64)
            total = np.where(valid, values, 0).sum(axis=self.axes, keepdims=True, dtype=self.work)
        else:
            valid = None
            count = np.full(
                self.kept_shape_of(block), math.prod(block.shape[a] for a in self.axes), np.float64
            )
            total = values.sum(axis=self.axes, keepdims=True, dtype=self.work)
        mean = total / np.where(count == 0, 1, count).astype(
            self.work.type(0).real.dtype if self.work.kind == "c" else self.work
        )
        if self.kind == "mean":
            return count, mean, None
        deviation = values - mean
        if deviation.dtype.kind == "c":
            squared = (deviation * deviation.conj()).real
        else:
            # In place where it is an array (a 0-d block gives a scalar): one block-sized
            # temporary instead of two.
            out = deviation if isinstance(deviation, np.ndarray) else None
            squared = np.square(deviation, out=out)
        if valid is not None:
            squared = np.where(valid, squared, 0)
        return count, mean, squared.sum(axis=self.axes, keepdims=True)

    def _matrix_moments(self, matrix: np.ndarray, shape: tuple[int, ...]) -> Any:
        """The moments of a block reduced over its leading axes, as a (rows, columns) matrix:
        the same streams as NumPy's ``var`` but with fast column sums."""
        kept = (1,) * len(self.axes) + shape[len(self.axes) :]
        rows = matrix.shape[0]
        count = np.full(kept, rows, np.float64)
        if self.kind != "mean" and matrix.dtype in _NATIVE_MOMENTS:
            # Means and squared deviations in one pass over memory, a cache-sized slab of rows
            # at a time, without the GIL (native/moments.c), in double precision.
            columns = matrix.shape[1]
            out = np.empty(4 * columns, np.float64)
            _native.column_moments(matrix, out)
            mean = out[:columns].astype(matrix.dtype).reshape(kept)
            return count, mean, out[columns : 2 * columns].astype(matrix.dtype).reshape(kept)
        mean = (_column_sums(matrix) / max(rows, 1)).reshape(kept)
        if self.kind == "mean":
            return count, mean, None
        # The squared deviations a cache-sized slab at a time, into one reused buffer: a
        # block-sized temporary would be written and read back from memory (1.2-1.9x slower
        # on W5's 16-64 MiB blocks).
        centre = mean.reshape(1, -1)
        step = max(1, _SLAB_BYTES // max(1, matrix.shape[1] * matrix.itemsize))
        slab = np.empty((min(step, rows), matrix.shape[1]), matrix.dtype)
        m2 = np.zeros(matrix.shape[1], matrix.dtype)
        for start in range(0, rows, step):
            deviation = slab[: min(step, rows - start)]
            np.subtract(matrix[start : start + step], centre, out=deviation)
            np.square(deviation, out=deviation)
            m2 += _column_sums(deviation)
        return count, mean, m2.reshape(kept)

    def sharing_key(self) -> Any:
        """mean, var and std of one expression over the same axes share their moments: a
        mean, var and std computed together read and sum each block once."""
        return ("moments", input_identity(self.expr), self.axes, self.work, self.skip_nan)

    def kept_shape_of(self, block: np.ndarray) -> tuple[int, ...]:
        return tuple(1 if i in self.axes else n for i, n in enumerate(block.shape))

    def merge(self, partial: Any, region: Region) -> None:
        count_b, mean_b, m2_b = partial
        target = self.target(region)
        count_a = self.count[target]
        mean_a = self.mean[target]
        total = count_a + count_b
        safe = np.where(total == 0, 1, total)
        real = self.m2.dtype
        # Infinite means (inf - inf) are NaN by design here, as in NumPy's sums: no warning.
        with np.errstate(invalid="ignore", over="ignore"):
            delta = mean_b - mean_a
            weight_b = (count_b / safe).astype(real)
            # An infinite mean stays infinite: mean_a + (mean_b - mean_a) * w would turn
            # inf followed by a finite mean into inf - inf = NaN.
            self.mean[target] = np.where(
                np.isfinite(mean_a) & np.isfinite(mean_b),
                mean_a + delta * weight_b,
                mean_a * (count_a / safe).astype(real) + mean_b * weight_b,
            )
            if m2_b is not None:
                cross = (delta * delta.conj()).real if delta.dtype.kind == "c" else delta * delta
                self.m2[target] = (
                    self.m2[target] + m2_b + cross * (count_a * count_b / safe).astype(real)
                )
        self.count[target] = total

    def finish(self) -> Any:
        empty = self.count == 0
        short = empty if self.kind == "mean" else self.count - self.ddof <= 0
        # NumPy's mean and var judge the number of items reduced (so they warn even when the
        # result is empty); the nan variants judge each cell's count.
        judge_cells = self.skip_nan and self.expr.dtype.kind in "fc"  # (else nan* = plain)
        if judge_cells:
            warn = bool(short.any())
        else:
            reduced = math.prod(self.expr.shape[a] for a in self.axes)
            warn = reduced == 0 if self.kind == "mean" else reduced <= self.ddof
        if warn:
            warnings.warn(
                "Mean of empty slice"
                if self.kind == "mean"
                else "Degrees of freedom <= 0 for slice",
                RuntimeWarning,
                stacklevel=3,
            )
        with np.errstate(invalid="ignore", divide="ignore"):
            if self.kind == "mean":
                result = np.where(empty, np.nan, self.mean)
            else:
                # NumPy's var divides by max(n - ddof, 0) (inf, or NaN for 0 / 0); its nanvar
                # gives NaN wherever n - ddof <= 0.
                denominator = np.maximum(self.count - self.ddof, 0)
                if judge_cells:
                    denominator = np.where(short, np.nan, denominator)
                numerator = self.m2
                if np.dtype(self.result_dtype).kind == "c":
                    # A complex dtype asked for: NumPy divides in it (x / 0 is inf+nanj).
                    numerator = numerator.astype(self.result_dtype)
                result = numerator / denominator.astype(self.m2.dtype)
                if self.kind == "std":
                    result = np.sqrt(result)
        return self.shaped(np.asarray(result).astype(self.result_dtype, copy=False))
