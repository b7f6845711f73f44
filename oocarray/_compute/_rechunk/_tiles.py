"""Scatter slots in piece order: each piece a group of source chunks adds to a target block is
stored in one run of the block's slot, the pieces one after another.

Why: where a group's piece of a target block is not one run of the block's bytes in C order
(series -> time: a (64, 512) box of a (2048, 2048) block, rows of 2 KiB 8 KiB apart), the
copies land on pages that other groups fill later.  With RAM to spare the page cache keeps
them; under a memory limit the kernel writes them back and reads them again before the next
group's copy -- 4 KiB and 8 KiB requests, a million of them at 4 GiB.  In piece order every
piece is one ``pwrite`` and a slot is read back in one ``pread``, then put in C order in
memory (one copy) before it is encoded.

The pieces of a block are the boxes its span is cut into, per axis, at the group boundaries
(and at the array's end); they are laid out in C order of that grid of boxes, each in C order
of its own shape: the box at grid index ``i`` starts at element
``sum over axes a of start_a(i_a) * prod(length_c(i_c), c < a) * prod(span_c, c > a)``.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Callable, Iterator

import numpy as np

__all__ = ["Tiles", "assemble", "pieces_are_runs", "write_pieces"]


def pieces_are_runs(group: tuple[int, ...], unit: tuple[int, ...]) -> bool:
    """Whether a group's piece of a target block (per axis the smaller of the two) is one run of
    the block's C order: one index along the leading axes, a run along one, whole along the
    rest."""
    piece = [min(g, u) for g, u in zip(group, unit, strict=True)]
    axis = 0
    while axis < len(unit) - 1 and piece[axis] == 1:
        axis += 1
    return all(p == u for p, u in zip(piece[axis + 1 :], unit[axis + 1 :], strict=True))


class Tiles:
    """Where the pieces of each target block lie in its slot, stored in piece order."""

    def __init__(self, shape: tuple[int, ...], unit: tuple[int, ...], group: tuple[int, ...]):
        self._shape, self._unit, self._group = shape, unit, group

    def _cuts(self, block: tuple[int, ...]) -> list[list[int]]:
        """Per axis: the starts of the block's pieces (relative to the block), then its span.
        Worked out per call, not kept: an axis of a million blocks would hold a million
        lists."""
        cuts = []
        for n, u, g, b in zip(self._shape, self._unit, self._group, block, strict=True):
            low = b * u
            high = min(n, low + u)
            first_cut = (low // g + 1) * g
            cuts.append([0, *(c - low for c in range(first_cut, high, g)), high - low])
        return cuts

    def even_grid(self, block: tuple[int, ...]) -> tuple[list[int], list[int]] | None:
        """Where every piece of the block has one shape: the number of pieces and their length,
        per axis; else None."""
        counts, lengths = [], []
        for cut in self._cuts(block):
            steps = {b - a for a, b in itertools.pairwise(cut)}
            if len(steps) != 1:
                return None
            counts.append(len(cut) - 1)
            lengths.append(steps.pop())
        return counts, lengths

    def span(self, block: tuple[int, ...]) -> tuple[int, ...]:
        """The block's extent inside the array, per axis."""
        return tuple(
            min(n, (b + 1) * u) - b * u
            for n, u, b in zip(self._shape, self._unit, block, strict=True)
        )

    def offset(self, block: tuple[int, ...], within: tuple[slice, ...]) -> int:
        """The element of the slot where the piece at ``within`` (relative to the block, one
        box of the grid) starts."""
        cuts = self._cuts(block)
        index = [bisect.bisect_right(c, w.start) - 1 for c, w in zip(cuts, within, strict=True)]
        return self._offset(cuts, index)

    def pieces(self, block: tuple[int, ...]) -> Iterator[tuple[tuple[slice, ...], int]]:
        """Every piece of the block: its box (relative to the block) and its first element."""
        cuts = self._cuts(block)
        for index in itertools.product(*(range(len(c) - 1) for c in cuts)):
            box = tuple(slice(c[i], c[i + 1]) for c, i in zip(cuts, index, strict=True))
            yield box, self._offset(cuts, list(index))

    @staticmethod
    def _offset(cuts: list[list[int]], index: list[int]) -> int:
        lengths = [c[i + 1] - c[i] for c, i in zip(cuts, index, strict=True)]
        spans = [c[-1] for c in cuts]
        return sum(
            cuts[a][index[a]] * math.prod(lengths[:a]) * math.prod(spans[a + 1 :])
            for a in range(len(cuts))
        )


WriteAt = Callable[[int, np.ndarray], None]
# Pieces of one size stacked along the first axis, each written at its own byte offset.
WriteMany = Callable[[np.ndarray, np.ndarray], None]


def write_pieces(
    write_at: WriteAt,
    write_many: WriteMany,
    moved: np.ndarray,
    blocks: tuple[slice, ...],
    within: tuple[slice, ...],
    tiles: Tiles,
    slot_at: Callable[[tuple[int, ...]], int],
    staging: np.ndarray,
) -> None:
    """Write the pieces of ``moved`` (block axes, then piece axes; each piece at ``within`` of
    its block) each into its run of its block's slot (``slot_at``: the slot's first byte):
    all in one call where they lie one after another in memory (series -> time: a source
    chunk's (1, 64, 64) pieces of 256 blocks), else one at a time."""
    ndim = len(blocks)
    indices = list(itertools.product(*(range(b.stop - b.start) for b in blocks)))
    offsets = np.empty(len(indices), dtype=np.int64)
    for j, index in enumerate(indices):
        block = tuple(b.start + i for b, i in zip(blocks, index, strict=True))
        offsets[j] = slot_at(block) + tiles.offset(block, within) * moved.itemsize
    if moved.flags.c_contiguous:
        write_many(offsets, moved.reshape(len(indices), *moved.shape[ndim:]))
        return
    for index, at in zip(indices, offsets.tolist(), strict=True):
        _write_run(write_at, moved[index], at, staging)


def _write_run(write_at: WriteAt, piece: np.ndarray, at: int, staging: np.ndarray) -> None:
    """Write a piece's values in C order from byte ``at`` on: as it is where contiguous, else
    copied into ``staging`` as many leading rows at a time as it holds (a row larger than it,
    row by row)."""
    if piece.flags.c_contiguous:
        write_at(at, piece)
        return
    row_bytes = piece[0].nbytes
    if row_bytes > staging.nbytes:
        for row in piece:
            _write_run(write_at, row, at, staging)
            at += row_bytes
        return
    rows = staging.nbytes // row_bytes
    stage = staging.view(piece.dtype)
    for first in range(0, len(piece), rows):
        part = piece[first : first + rows]
        copy = stage[: part.size].reshape(part.shape)
        copy[...] = part
        write_at(at + first * row_bytes, copy)


def assemble(
    read_at: Callable[[int, np.ndarray], None],
    tiles: Tiles,
    block: tuple[int, ...],
    base: int,
    raw: np.ndarray,
    out: np.ndarray,
) -> np.ndarray:
    """A block's values in C order (its span inside the array), from its slot in piece order
    at byte ``base``: the slot read into ``raw`` in one request, its pieces copied into
    ``out`` (flat arrays of a slot's size, raw bytes and the dtype's elements)."""
    span = tiles.span(block)
    count = math.prod(span)
    stored = raw[: count * out.itemsize]
    read_at(base, stored)
    values = stored.view(out.dtype)
    ordered = out[:count].reshape(span)
    grid = tiles.even_grid(block)
    if grid is not None:
        # Every piece of one shape: the slot is a (pieces..., piece shape...) array, and one
        # transposing copy puts it in C order (a copy per piece cost ~10 us of Python each).
        counts, lengths = grid
        stacked = values[:count].reshape(counts + lengths)
        ndim = len(span)
        interleaved = [a for axis in range(ndim) for a in (axis, ndim + axis)]
        ordered.reshape([n for pair in zip(counts, lengths, strict=True) for n in pair])[...] = (
            stacked.transpose(interleaved)
        )
        return ordered
    for box, first in tiles.pieces(block):
        shape = tuple(s.stop - s.start for s in box)
        ordered[box] = values[first : first + math.prod(shape)].reshape(shape)
    return ordered
