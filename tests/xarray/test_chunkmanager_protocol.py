"""The chunk manager as xarray's own chunk-manager tests check one (the patterns of xarray's
test_parallelcompat module, in its repository): found by name, by option and by array, in-memory
arrays ignored, mixed with dask refused, and ``Variable.chunk`` / ``compute`` through it."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
import xarray as xr
from xarray.namedarray.parallelcompat import (
    get_chunked_array_type,
    guess_chunkmanager,
    list_chunkmanagers,
)

from oocarray._xarray._chunkmanager import OOCArrayChunkManager
from oocarray._xarray._lazy import OOCLazyArray


def _lazy() -> OOCLazyArray:
    lazy = OOCArrayChunkManager().from_array(np.arange(6.0), chunks=((3, 3),))
    assert isinstance(lazy, OOCLazyArray)
    return lazy


def test_it_is_listed_and_found_by_name_and_by_option() -> None:
    assert isinstance(list_chunkmanagers()["oocarray"], OOCArrayChunkManager)
    assert isinstance(guess_chunkmanager("oocarray"), OOCArrayChunkManager)
    with xr.set_options(chunk_manager="oocarray"):
        assert isinstance(guess_chunkmanager(None), OOCArrayChunkManager)
        chunked = xr.Variable("x", np.arange(6.0)).chunk({"x": 2})
    assert isinstance(chunked.data, OOCLazyArray)


def test_its_arrays_are_detected_and_in_memory_ones_ignored() -> None:
    lazy = _lazy()
    manager = get_chunked_array_type(lazy, 1.0, np.array([5, 6]))
    assert isinstance(manager, OOCArrayChunkManager)
    with pytest.raises(TypeError, match="Expected a chunked array"):
        get_chunked_array_type(1.0, np.array([5, 6]))


def test_mixing_with_dask_arrays_is_refused() -> None:
    with pytest.raises(TypeError, match="received multiple types"):
        get_chunked_array_type(_lazy(), da.from_array(np.arange(6.0), chunks=3))


def test_variables_chunk_and_compute_through_it() -> None:
    variable = xr.Variable(("x", "y"), np.arange(12.0).reshape(3, 4))
    chunked = variable.chunk({"x": 2, "y": 2}, chunked_array_type="oocarray")
    assert isinstance(chunked.data, OOCLazyArray)
    assert chunked.chunks == ((2, 1), (2, 2))
    assert chunked.chunksizes == {"x": (2, 1), "y": (2, 2)}
    (computed,) = OOCArrayChunkManager().compute(chunked.data * 2)
    np.testing.assert_array_equal(computed, variable.values * 2)
    xr.testing.assert_identical(chunked.compute(), variable)
    xr.testing.assert_identical(chunked.load(), variable)
