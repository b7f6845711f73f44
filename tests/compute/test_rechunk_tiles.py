"""Scatter slots in piece order (``oocarray/_compute/_rechunk/_tiles.py``): the layout, the
plans that choose it, and rechunks through it equal to their input."""

from __future__ import annotations

import math

import numpy as np
import pytest
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st

import oocarray as oc
from oocarray._compute._rechunk._tiles import Tiles, assemble, pieces_are_runs, write_pieces


@settings(max_examples=60, deadline=None)
@given(
    dims=st.lists(
        st.tuples(st.integers(1, 23), st.integers(1, 9), st.integers(1, 9)), min_size=1, max_size=3
    )
)
def test_the_pieces_of_each_block_fill_its_slot_once(dims) -> None:
    shape = tuple(n for n, _, _ in dims)
    unit = tuple(min(u, n) for n, u, _ in dims)
    group = tuple(min(g, n) for n, _, g in dims)
    tiles = Tiles(shape, unit, group)
    grid = [range(-(-n // u)) for n, u in zip(shape, unit, strict=True)]
    for block in np.ndindex(*(len(g) for g in grid)):
        span = tiles.span(block)
        assert span == tuple(
            min(n, (b + 1) * u) - b * u for n, u, b in zip(shape, unit, block, strict=True)
        )
        owner = np.full(math.prod(span), -1)
        for number, (box, first) in enumerate(tiles.pieces(block)):
            size = math.prod(s.stop - s.start for s in box)
            assert (owner[first : first + size] == -1).all()
            owner[first : first + size] = number
            assert tiles.offset(block, box) == first
            # A piece is what one group puts in the block: it never crosses a group boundary.
            for s, b, u, g in zip(box, block, unit, group, strict=True):
                assert (b * u + s.start) // g == (b * u + s.stop - 1) // g
        assert (owner >= 0).all()


@pytest.mark.parametrize("strided", [True, False])
def test_pieces_written_in_piece_order_assemble_to_the_block(strided: bool) -> None:
    shape, unit, group = (5, 13, 10), (5, 8, 7), (2, 3, 4)
    # A strided view: its pieces are not contiguous, so they are gathered before each write;
    # else a piece whose rows are whole is written in one call with its offset.
    spaced = np.zeros(tuple(2 * n for n in shape), dtype=np.int32)
    values = spaced[::2, ::2, ::2] if strided else np.zeros(shape, dtype=np.int32)
    values[...] = np.arange(math.prod(shape), dtype=np.int32).reshape(shape)
    calls = {"one": 0, "many": 0}
    tiles = Tiles(shape, unit, group)
    grid = (1, 2, 2)
    slot = math.prod(unit) * 4
    stored = bytearray(slot * math.prod(grid))

    def write_at(at: int, piece: np.ndarray) -> None:
        calls["one"] += 1
        stored[at : at + piece.nbytes] = piece.tobytes()

    def write_many(offsets: np.ndarray, pieces: np.ndarray) -> None:
        calls["many"] += 1
        assert pieces.flags.c_contiguous and len(pieces) == len(offsets)
        for at, piece in zip(offsets.tolist(), pieces, strict=True):
            stored[at : at + piece.nbytes] = piece.tobytes()

    def slot_at(block: tuple[int, ...]) -> int:
        return int(np.ravel_multi_index(block, grid)) * slot

    staging = np.empty(24, dtype=np.uint8)  # smaller than most pieces: written in parts
    # Each group cut at the blocks' bounds, as the pass cuts it: a piece per block it meets.
    for origin in np.ndindex(*(-(-n // g) for n, g in zip(shape, group, strict=True))):
        region = [
            (o * g, min(n, (o + 1) * g)) for o, g, n in zip(origin, group, shape, strict=True)
        ]
        blocks = [
            range(low // u, (high - 1) // u + 1)
            for (low, high), u in zip(region, unit, strict=True)
        ]
        for block in np.ndindex(*(len(b) for b in blocks)):
            block = tuple(b[i] for b, i in zip(blocks, block, strict=True))
            box = [
                (max(low, b * u), min(high, (b + 1) * u))
                for (low, high), b, u in zip(region, block, unit, strict=True)
            ]
            piece = values[tuple(slice(low, high) for low, high in box)]
            within = tuple(
                slice(low - b * u, high - b * u)
                for (low, high), b, u in zip(box, block, unit, strict=True)
            )
            if not strided:
                piece = np.ascontiguousarray(piece)
            moved = piece[np.newaxis, np.newaxis, np.newaxis]
            at = tuple(slice(b, b + 1) for b in block)
            write_pieces(write_at, write_many, moved, at, within, tiles, slot_at, staging)
    assert (calls["one"] > 0) if strided else (calls["one"] == 0 and calls["many"] > 0)

    def read_at(at: int, out: np.ndarray) -> None:
        out[...] = np.frombuffer(bytes(stored[at : at + out.nbytes]), dtype=np.uint8)

    raw, flat = np.empty(slot, np.uint8), np.empty(math.prod(unit), np.int32)
    for block in np.ndindex(*grid):
        region = tuple(
            slice(b * u, min(n, (b + 1) * u)) for b, u, n in zip(block, unit, shape, strict=True)
        )
        got = assemble(read_at, tiles, block, slot_at(block), raw, flat)
        np.testing.assert_array_equal(got, values[region])


@pytest.mark.parametrize(
    ("group", "unit", "runs"),
    [
        ((2, 2048, 2048), (256, 64, 64), True),  # time -> series: a few whole planes
        ((256, 64, 512), (1, 2048, 2048), False),  # series -> time: boxes of a plane
        ((1024, 1024), (1048576, 16), True),  # rows -> columns
        ((8, 4), (8, 4), True),
        ((1, 3, 9), (4, 5, 9), True),  # one index, a run, whole
        ((1, 3, 4), (4, 5, 9), False),
    ],
)
def test_which_pieces_are_runs_of_their_slots(group, unit, runs) -> None:
    assert pieces_are_runs(group, unit) is runs


def test_the_plan_stores_slots_in_piece_order_only_where_pieces_are_not_runs() -> None:
    cube = np.zeros((64, 64, 64), dtype="f4")
    series = oc.from_numpy(cube, chunks=(64, 8, 8))
    to_time = oc.rechunk(series, (1, 64, 64), max_mem="256K", dry_run=True)
    assert to_time.strategy == "scatter" and to_time.passes[0].tiled
    assert "slots in piece order" in str(to_time)
    time = oc.from_numpy(cube, chunks=(1, 64, 64))
    to_series = oc.rechunk(time, (64, 8, 8), max_mem="512K", dry_run=True)
    assert to_series.strategy == "scatter" and not to_series.passes[0].tiled


@settings(max_examples=25, deadline=None)
@given(
    shape=st.tuples(st.integers(2, 30), st.integers(2, 40), st.integers(2, 40)),
    source=st.tuples(st.integers(2, 30), st.integers(1, 9), st.integers(1, 9)),
    target_rows=st.integers(1, 4),
    dtype=st.sampled_from(["f4", "i1", "u2", "f8", "c8", "?"]),
    fill=st.sampled_from([0, 1]),
    budget=st.sampled_from(["48K", "128K", "512K"]),
)
def test_a_rechunk_through_slots_in_piece_order_equals_its_input(
    tmp_path_factory, shape, source, target_rows, dtype, fill, budget
) -> None:
    source = tuple(min(c, n) for c, n in zip(source, shape, strict=True))
    rng = np.random.default_rng(sum(shape))
    values = (rng.random(shape) * 100).astype(dtype)
    tmp = tmp_path_factory.mktemp("tiles")
    # A fill value of ones: the padding of the edge blocks is not zeros.
    stored = zarr.create_array(
        tmp / "src.zarr", shape=shape, chunks=source, dtype=dtype, fill_value=fill
    )
    stored[...] = values
    x = oc.open(tmp / "src.zarr")
    target = (target_rows, -1, -1)
    try:
        plan = oc.rechunk(x, target, max_mem=budget, strategy="scatter", dry_run=True)
    except oc.MemoryBudgetError:
        return  # no scatter fits this budget: another test's concern
    y = oc.rechunk(x, target, tmp / "out.zarr", max_mem=budget, strategy="scatter", progress=False)
    assert y.chunks == (min(target_rows, shape[0]), shape[1], shape[2])
    np.testing.assert_array_equal(y[...], values)
    assert plan.passes[0].tiled == (not pieces_are_runs(plan.passes[0].block, y.chunks))


@pytest.mark.parametrize(
    ("shape", "unit", "group", "even"),
    [
        ((4, 64, 64), (1, 64, 64), (4, 16, 32), True),  # series -> time: boxes of one shape
        ((3, 12, 10), (3, 12, 10), (1, 4, 5), True),
        ((5, 13, 10), (5, 8, 7), (2, 3, 4), False),  # cut unevenly
        ((7,), (7,), (7,), True),  # one piece
    ],
)
def test_a_block_of_pieces_of_one_shape_is_assembled_in_one_copy(
    monkeypatch, shape, unit, group, even
) -> None:
    tiles = Tiles(shape, unit, group)
    values = np.arange(math.prod(shape), dtype=np.int32).reshape(shape) * 3 - 7
    block = (0,) * len(shape)
    assert (tiles.even_grid(block) is not None) is even
    span = tiles.span(block)
    stored = np.empty(math.prod(span), dtype=np.int32)
    for box, first in tiles.pieces(block):
        piece = values[box]
        stored[first : first + piece.size] = piece.ravel()

    def read_at(at: int, out: np.ndarray) -> None:
        out[...] = stored.view(np.uint8)[at : at + out.nbytes]

    def assembled() -> np.ndarray:
        raw, flat = np.empty(stored.nbytes, np.uint8), np.empty(stored.size, np.int32)
        return assemble(read_at, tiles, block, 0, raw, flat).copy()

    fast = assembled()
    monkeypatch.setattr(Tiles, "even_grid", lambda self, block: None)  # a copy per piece
    np.testing.assert_array_equal(fast, assembled())
    np.testing.assert_array_equal(fast, values[tuple(slice(0, s) for s in span)])
