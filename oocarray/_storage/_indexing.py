"""Selections on chunked arrays: NumPy-style keys turned into per-chunk work.

Supported keys: integers (negative too), slices with any step, ``...``, and one integer-array
or boolean index on one axis.  A key becomes one :class:`AxisSelection` per axis; the chunks a
selection touches are the product, per axis, of the chunks each axis touches.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

__all__ = ["AxisSelection", "ChunkPiece", "Selection", "parse_key"]


@dataclass(frozen=True, slots=True)
class AxisPiece:
    """The part of one axis's selection that falls in one chunk."""

    chunk: int
    local: slice | np.ndarray  # positions inside the chunk
    out: slice | np.ndarray  # positions in the output along this axis
    covers_chunk: bool  # the piece is the whole (valid part of the) chunk, in order


@dataclass(frozen=True, slots=True)
class AxisSelection:
    """What one axis selects: an integer (axis dropped), a slice, or integer positions."""

    size: int
    chunk: int
    index: int | slice | np.ndarray

    @property
    def dropped(self) -> bool:
        return isinstance(self.index, int)

    @property
    def length(self) -> int:
        if isinstance(self.index, int):
            return 1
        if isinstance(self.index, slice):
            return len(range(*self.index.indices(self.size)))
        return len(self.index)

    def pieces(self) -> list[AxisPiece]:
        chunk = self.chunk
        index = self.index
        if isinstance(index, int):
            c, local = divmod(index, chunk)
            return [AxisPiece(c, slice(local, local + 1), slice(0, 1), False)]
        if isinstance(index, slice):
            start, stop, step = index.indices(self.size)
            positions = range(start, stop, step)
            if len(positions) == 0:
                return []
            if step > 0:
                return self._forward_pieces(positions)
            # Negative steps: read the same positions forward, place them backwards.
            n = len(positions)
            return [
                AxisPiece(
                    p.chunk,
                    p.local,
                    slice(n - 1 - p.out.start, _reverse_stop(n - 1 - p.out.stop), -1),
                    p.covers_chunk,
                )
                for p in self._forward_pieces(positions[::-1])
                if isinstance(p.out, slice)
            ]
        return self._positions_pieces(index)

    def _forward_pieces(self, positions: range) -> list[AxisPiece]:
        chunk = self.chunk
        step = positions.step
        pieces = []
        out_start = 0
        first, last = positions[0], positions[-1]
        for c in range(first // chunk, last // chunk + 1):
            lo = max(first, c * chunk)
            # first position >= lo on the grid first + k*step
            k0 = -(-(lo - first) // step)
            p0 = first + k0 * step
            hi = min(last, (c + 1) * chunk - 1)
            if p0 > hi:
                continue
            k1 = (hi - first) // step
            count = k1 - k0 + 1
            local = slice(p0 - c * chunk, p0 - c * chunk + (count - 1) * step + 1, step)
            chunk_len = min(chunk, self.size - c * chunk)
            covers = step == 1 and local.start == 0 and local.stop == chunk_len
            pieces.append(AxisPiece(c, local, slice(out_start, out_start + count), covers))
            out_start += count
        return pieces

    def _positions_pieces(self, positions: np.ndarray) -> list[AxisPiece]:
        if positions.size == 0:
            return []
        chunk_ids = positions // self.chunk
        order = np.argsort(chunk_ids, kind="stable")
        sorted_ids = chunk_ids[order]
        boundaries = np.flatnonzero(np.diff(sorted_ids)) + 1
        pieces = []
        for group in np.split(order, boundaries):
            c = int(chunk_ids[group[0]])
            pieces.append(AxisPiece(c, positions[group] - c * self.chunk, group, False))
        return pieces


def _reverse_stop(stop: int) -> int | None:
    return None if stop < 0 else stop


@dataclass(frozen=True, slots=True)
class ChunkPiece:
    """One chunk's share of a selection: where in the chunk, where in the output."""

    chunk: tuple[int, ...]
    local: tuple[slice | np.ndarray, ...]
    out: tuple[slice | np.ndarray, ...]
    covers_chunk: bool


@dataclass(frozen=True, slots=True)
class Selection:
    """A parsed key: one :class:`AxisSelection` per axis."""

    axes: tuple[AxisSelection, ...]

    @property
    def _kept_shape(self) -> tuple[int, ...]:
        return tuple(a.length for a in self.axes if not a.dropped)

    @property
    def _array_position(self) -> int | None:
        """Where NumPy moves the array-indexed axis to the front, its place among the kept
        axes: integers next to an array index are advanced indices too, and when the advanced
        indices are not adjacent the result's advanced axis comes first."""
        advanced = [
            i for i, a in enumerate(self.axes) if a.dropped or isinstance(a.index, np.ndarray)
        ]
        arrays = [i for i, a in enumerate(self.axes) if isinstance(a.index, np.ndarray)]
        if not arrays or advanced == list(range(advanced[0], advanced[-1] + 1)):
            return None
        return sum(1 for a in self.axes[: arrays[0]] if not a.dropped)

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape of the result, as NumPy gives it."""
        kept = self._kept_shape
        position = self._array_position
        if position is None:
            return kept
        return (kept[position], *kept[:position], *kept[position + 1 :])

    def to_result(self, full: np.ndarray) -> np.ndarray:
        """The result from an array of :attr:`full_shape` filled piece by piece."""
        result = full.reshape(self._kept_shape)
        position = self._array_position
        return result if position is None else np.moveaxis(result, position, 0)

    def from_value(self, value: np.ndarray) -> np.ndarray:
        """A value of the result's shape, laid out as :attr:`full_shape`."""
        position = self._array_position
        if position is not None:
            value = np.moveaxis(value, 0, position)
        return value.reshape(self.full_shape)

    @property
    def full_shape(self) -> tuple[int, ...]:
        """The shape with integer-indexed axes kept as length 1."""
        return tuple(a.length for a in self.axes)

    def pieces(self) -> Iterator[ChunkPiece]:
        per_axis = [a.pieces() for a in self.axes]
        for combo in itertools.product(*per_axis):
            yield ChunkPiece(
                tuple(p.chunk for p in combo),
                tuple(p.local for p in combo),
                tuple(p.out for p in combo),
                all(p.covers_chunk for p in combo),
            )


def parse_key(key: object, shape: tuple[int, ...], chunks: tuple[int, ...]) -> Selection:
    """Turn a NumPy-style key into a :class:`Selection`.

    Raises
    ------
    IndexError
        An index is out of range, there are too many indices, or more than one axis has an
        array index.
    TypeError
        An index has an unsupported type.
    """
    items = key if isinstance(key, tuple) else (key,)
    if sum(1 for k in items if k is Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    explicit = sum(1 for k in items if k is not Ellipsis and k is not None)
    if any(k is None for k in items):
        raise TypeError("np.newaxis (None) is not supported in chunked-array indexing")
    if explicit > len(shape):
        raise IndexError(
            f"too many indices: the array is {len(shape)}-dimensional, but {explicit} were given"
        )
    expanded: list[object] = []
    for k in items:
        if k is Ellipsis:
            expanded.extend([slice(None)] * (len(shape) - explicit))
        else:
            expanded.append(k)
    expanded.extend([slice(None)] * (len(shape) - len(expanded)))
    axes = []
    arrays = 0
    for axis, (k, size, chunk) in enumerate(zip(expanded, shape, chunks, strict=True)):
        selection = _parse_axis(k, axis, size)
        if isinstance(selection, np.ndarray):
            arrays += 1
        axes.append(AxisSelection(size, chunk, selection))
    if arrays > 1:
        raise IndexError(
            "only one axis may have an integer-array or boolean index; "
            "index the result again for the others"
        )
    return Selection(tuple(axes))


def _parse_axis(k: object, axis: int, size: int) -> int | slice | np.ndarray:
    if isinstance(k, (int, np.integer)) and not isinstance(k, (bool, np.bool_)):
        i = int(k)
        if not -size <= i < size:
            raise IndexError(f"index {i} is out of bounds for axis {axis} with size {size}")
        return i % size if size else i
    if isinstance(k, slice):
        for part in (k.start, k.stop, k.step):
            if part is not None and not isinstance(part, (int, np.integer)):
                raise TypeError(f"slice indices must be integers or None, got {k!r}")
        if k.step == 0:
            raise ValueError("slice step cannot be zero")
        return k
    if isinstance(k, (list, np.ndarray)):
        arr = np.asarray(k)
        if arr.dtype == bool:
            if arr.ndim != 1:
                raise IndexError(
                    f"a boolean index must be 1-d (one flag per position of axis {axis}, "
                    f"length {size}), got a {arr.ndim}-d mask of shape {arr.shape}; select "
                    "along one axis at a time, or read the array and mask the result"
                )
            if len(arr) != size:
                raise IndexError(
                    f"boolean index for axis {axis} has length {len(arr)}, expected {size}"
                )
            return np.flatnonzero(arr).astype(np.intp)
        if arr.size == 0:
            return np.empty(0, dtype=np.intp)
        if arr.dtype.kind not in "iu" or arr.ndim != 1:
            raise IndexError(
                f"array indices must be a 1-d array of integers or booleans, got dtype "
                f"{arr.dtype} with {arr.ndim} dimensions on axis {axis}"
            )
        arr = arr.astype(np.intp)
        bad = (arr < -size) | (arr >= size)
        if bad.any():
            raise IndexError(
                f"index {int(arr[bad][0])} is out of bounds for axis {axis} with size {size}"
            )
        return np.where(arr < 0, arr + size, arr)
    raise TypeError(
        f"unsupported index {k!r} on axis {axis}: use integers, slices, '...', or one "
        "integer/boolean array"
    )
