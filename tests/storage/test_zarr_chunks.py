"""zarr chunks written back from an ``as_ndarray("r+")`` view: each whole, beside its file and
renamed over it, a fill unit at a time, never the whole array.  (What every format's write-back
promises is the store contract, ``test_store_contract.py``.)"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr

import oocarray as oc
from oocarray._storage._paged._arrays import paging_available

needs_paging = pytest.mark.skipif(
    not paging_available()[0], reason=f"no chunk-backed ndarrays here: {paging_available()[1]}"
)


def _store(path: Path, data: np.ndarray, rows: int) -> str:
    x = oc.create(path, data.shape, data.dtype, chunks=(rows, *data.shape[1:]), codec="zstd")
    x[...] = data
    return str(path)


def _chunk_files(path: str) -> dict[str, int]:
    return {str(p): p.stat().st_ino for p in (Path(path) / "c").rglob("*") if p.is_file()}


@needs_paging
def test_written_chunks_are_replaced_whole_a_unit_at_a_time(tmp_path: Path) -> None:
    data = np.arange(4096 * 16, dtype=np.int64).reshape(4096, 16)  # 32 KiB chunks
    path = _store(tmp_path / "w.zarr", data, 256)
    before = _chunk_files(path)
    x = oc.open(path, mode="r+")
    view = x.as_ndarray("r+")
    view[300:310] = -1  # chunk 1
    view[4000] += 5  # the last chunk
    assert x.flush() == 4  # the two units, two chunks each
    after = _chunk_files(path)
    # Written back a fill unit at a time (64 KiB: two chunks here), never the whole array.
    assert 2 <= sum(before[k] != after[k] for k in before) <= 4
    assert not list(Path(path).rglob(".tmp-*"))
    expected = data.copy()
    expected[300:310] = -1
    expected[4000] += 5
    assert np.array_equal(zarr.open_array(path, mode="r")[...], expected)
    del view
    x.close()
