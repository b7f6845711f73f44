"""Properties of the blockwise node behind the chunk manager's block functions: any region of
a ``map_blocks`` result (cutting blocks or not, with blocks that change size) equals dask's."""

from __future__ import annotations

import dask.array as da
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from oocarray._xarray._chunkmanager import OOCArrayChunkManager

MANAGER = OOCArrayChunkManager()


@st.composite
def arrays_and_chunks(draw: st.DrawFn) -> tuple[np.ndarray, tuple[int, ...]]:
    shape = tuple(draw(st.lists(st.integers(1, 9), min_size=1, max_size=3)))
    chunks = (draw(st.integers(1, shape[0])), *shape[1:])  # blocks along the first axis
    values = np.arange(int(np.prod(shape)), dtype=float).reshape(shape)
    return values, chunks


def _block_stats(b: np.ndarray) -> np.ndarray:
    """A block of two rows per block along axis 0: the block's column sums and maxima."""
    return np.stack([b.sum(axis=0), b.max(axis=0)])


@settings(max_examples=60, deadline=None)
@given(arrays_and_chunks(), st.data())
def test_any_region_of_a_map_blocks_result_equals_dask(
    case: tuple[np.ndarray, tuple[int, ...]], data: st.DataObject
) -> None:
    values, chunks = case
    ours = MANAGER.map_blocks(
        _block_stats, MANAGER.from_array(values, chunks), dtype=float,
        chunks=((2,) * -(-values.shape[0] // chunks[0]), *((c,) for c in values.shape[1:])),
    )  # fmt: skip
    theirs = da.from_array(values, chunks=chunks)
    expected = theirs.map_blocks(
        _block_stats, dtype=float, chunks=((2,) * theirs.numblocks[0], *theirs.chunks[1:])
    ).compute()
    assert ours.shape == expected.shape
    key = tuple(
        slice(start, data.draw(st.integers(start + 1, n)))
        for n in ours.shape
        for start in [data.draw(st.integers(0, n - 1))]
    )
    np.testing.assert_array_equal(ours.lazy[key], expected[key])
    np.testing.assert_array_equal(np.asarray(ours.compute()), expected)
