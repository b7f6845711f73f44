"""Order keys: values as unsigned integers that sort as NumPy sorts the values, and the
blocks of a reduction turned into keys a slice at a time (``_selection`` counts and gathers
them).

Keys compare as the values do in NumPy's sort order (NaN left out: its places are reported
separately), so counting values in an interval of keys, or in bins of it, is exact integer
work for every integer, boolean and float dtype.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np

__all__ = [
    "KeySlices",
    "column_matrix",
    "from_keys",
    "key_type",
    "order_keys",
    "position_type",
    "value_bins",
    "write_keys",
]

Region = tuple[slice, ...]

# Rows of a block's column matrix turned into keys at once (bounds a partial's temporaries).
SLICE_ITEMS = 1 << 18
_HIGH_BIT = np.uint64(1 << 63)


def key_type(dtype: np.dtype[Any]) -> np.dtype[Any]:
    """The unsigned integers that hold the order keys of ``dtype`` values."""
    return np.dtype(np.uint8 if dtype.kind == "b" else f"u{dtype.itemsize}")


def write_keys(
    values: np.ndarray, keys: np.ndarray, scratch: np.ndarray | None, finite: np.ndarray | None
) -> None:
    """The order keys of ``values`` into ``keys`` (``scratch``: a buffer like ``keys``, for
    floats and signed integers) and, for floats, where they are not NaN into ``finite``.

    A signed integer's key flips its sign bit; a float's flips its sign bit, and every bit
    of a negative one (one xor with its sign spread over the word: no branch)."""
    kind = values.dtype.kind
    unsigned = key_type(values.dtype)
    if kind in "bu":
        np.copyto(keys, values.view(unsigned))
        return
    bits = 8 * values.dtype.itemsize
    top = unsigned.type(1 << (bits - 1))
    if kind == "i":
        np.bitwise_xor(values.view(unsigned), top, out=keys)
        return
    if kind != "f" or scratch is None or finite is None:
        raise TypeError(f"order keys of {values.dtype} values")
    signed = f"i{values.dtype.itemsize}"
    np.right_shift(values.view(signed), bits - 1, out=scratch.view(signed))
    scratch |= top
    np.bitwise_xor(values.view(unsigned), scratch, out=keys)
    np.isnan(values, out=finite)
    np.logical_not(finite, out=finite)


def order_keys(values: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """``values`` as unsigned keys of their width in NumPy's sort order (see
    :func:`write_keys`), and where they are not NaN (None: no NaN can occur)."""
    values = np.ascontiguousarray(values)
    keys = np.empty(values.shape, key_type(values.dtype))
    floats = values.dtype.kind == "f"
    finite = np.empty(values.shape, bool) if floats else None
    scratch = np.empty_like(keys) if values.dtype.kind in "fi" else None
    write_keys(values, keys, scratch, finite)
    return keys, finite


def from_keys(keys: np.ndarray, dtype: np.dtype[Any]) -> np.ndarray:
    """The values of order ``keys`` (the inverse of :func:`order_keys`)."""
    kind = dtype.kind
    if kind == "b":
        return keys.astype(np.uint8).view(np.bool_)
    size = dtype.itemsize
    unsigned = np.dtype(f"u{size}")
    native = keys.astype(unsigned)
    if kind == "u":
        return native
    top = unsigned.type(1 << (8 * size - 1))
    if kind == "i":
        signed: np.ndarray = (native ^ top).view(dtype)
        return signed
    flip = ((~native).view(f"i{size}") >> (8 * size - 1)).view(unsigned) | top
    floats: np.ndarray = (native ^ flip).view(dtype)
    return floats


def column_matrix(block: np.ndarray, region: Region, axes: tuple[int, ...]) -> np.ndarray:
    """A block as a (reduced items, kept cells) matrix, kept cells in C order."""
    shape = tuple(s.stop - s.start for s in region)
    moved = np.moveaxis(np.broadcast_to(block, shape), axes, tuple(range(len(axes))))
    return moved.reshape(math.prod(shape[a] for a in axes), -1)


class KeySlices:
    """A block's column matrix a slice of rows at a time, turned into keys, in buffers made
    once per block: the engine evaluates a block in a cyclic workspace, whose arena keeps
    every temporary of the block, so a partial reuses its buffers rather than making new
    ones.  ``transposed``: slices come column by column (shaped (columns, rows)), so the
    counts a column touches stay in cache; else as the matrix's rows (reductions over rows
    are vectorised across columns).  ``with_keys=False``: only where values are not NaN
    (the keys buffer is left as it is)."""

    def __init__(
        self,
        matrix: np.ndarray,
        value_positions: bool = False,
        transposed: bool = True,
        with_keys: bool = True,
    ) -> None:
        self.matrix = matrix
        self.transposed = transposed
        self.with_keys = with_keys
        rows, width = matrix.shape
        self.step = max(1, min(rows, SLICE_ITEMS // max(1, width)))
        size = width * self.step
        dtype = matrix.dtype
        self.key_type = key_type(dtype)
        self.values = np.empty(size, dtype)
        self.keys = np.empty(size, self.key_type)
        self.flip = np.empty(size, self.key_type) if dtype.kind in "fi" else None
        self.finite = np.empty(size, bool) if dtype.kind == "f" else None
        self.mask = np.empty(size, bool)
        self.other = np.empty(size, bool)
        self.where = np.empty(size, np.intp)
        self.position = np.empty(size, position_type(dtype)) if value_positions else None

    def scratch(self, keys: np.ndarray) -> np.ndarray:
        """A buffer shaped as a slice's keys (free once the keys are made)."""
        if self.flip is None:
            self.flip = np.empty(self.keys.size, self.key_type)
        return self.flip[: keys.size].reshape(keys.shape)

    def __iter__(self) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray | None]]:
        """(values, keys, where not NaN), each (width, rows of the slice) when transposed."""
        rows, width = self.matrix.shape
        for start in range(0, rows, self.step):
            count = min(self.step, rows - start)
            part = self.matrix[start : start + count]
            if self.transposed:
                shape = (width, count)
                values = self.values[: width * count].reshape(shape)
                np.copyto(values, part.T)
            else:
                shape = (count, width)
                values = np.ascontiguousarray(part)
            keys = self.keys[: width * count].reshape(shape)
            finite = None if self.finite is None else self.finite[: width * count].reshape(shape)
            if self.with_keys:
                write_keys(values, keys, self.scratch(keys), finite)
            elif finite is not None:
                np.isnan(values, out=finite)
                np.logical_not(finite, out=finite)
            yield values, keys, finite

    def inside(
        self, keys: np.ndarray, finite: np.ndarray | None, low: np.ndarray, high: np.ndarray
    ) -> np.ndarray:
        """Where keys lie in [low, high] (per column) and are not NaN (a reused buffer)."""
        mask = self.mask[: keys.size].reshape(keys.shape)
        other = self.other[: keys.size].reshape(keys.shape)
        np.greater_equal(keys, low, out=mask)
        np.less_equal(keys, high, out=other)
        mask &= other
        if finite is not None:
            mask &= finite
        return mask


def value_bins(
    values: np.ndarray,
    start: np.ndarray,
    scale: np.ndarray,
    bins: int,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """The bin of each value, as a float to truncate (NaN values: NaN, for the caller to mask
    out).  Computed in
    float32 for values of 32 bits or less, else float64: the same function wherever it is
    asked, so a bin is an interval of values."""
    work = position_type(values.dtype)
    position: np.ndarray = np.empty(values.shape, work) if out is None else out
    with np.errstate(invalid="ignore", over="ignore"):
        np.subtract(values, start.astype(work, copy=False), out=position)
        position *= scale.astype(work, copy=False)
        # (clipped at 0, truncation is the floor)
        np.clip(position, 0, bins - 1, out=position)
    if not scale.all():  # a range of one value: its infinities times 0 are NaN
        np.copyto(position, 0.0, where=np.isnan(position))
    return position


def position_type(dtype: np.dtype[Any]) -> np.dtype[Any]:
    return np.dtype(np.float32 if dtype.itemsize <= 4 else np.float64)
