"""``Store`` is an abstract base: a backend implements reading, writing and sizing a chunk,
and says what more it can do with capability flags (the format-by-format checks of those
flags are in ``test_store_contract.py``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from oocarray._storage._base import Store


class _Partial(Store):
    """A backend that forgot :meth:`Store.write_chunk` and :meth:`Store.stored_bytes`."""

    def read_chunk(self, chunk: tuple[int, ...]) -> np.ndarray:
        return np.zeros(self.chunks)


class _InMemory(Store):
    """The smallest whole backend: one ndarray, chunks of 2 rows."""

    format = "memory"
    codec = "none"

    def __init__(self, data: np.ndarray) -> None:
        self.data = data
        self.shape, self.dtype, self.chunks = data.shape, data.dtype, (2, *data.shape[1:])
        self.readonly, self.path = False, "memory"

    def read_chunk(self, chunk: tuple[int, ...]) -> np.ndarray:
        return self.data[self.chunk_region(chunk)].copy()

    def write_chunk(self, chunk: tuple[int, ...], data: Any) -> None:
        self.data[self.chunk_region(chunk)] = data

    def stored_bytes(self) -> int:
        return self.data.nbytes


def test_store_and_incomplete_backends_cannot_be_made() -> None:
    with pytest.raises(TypeError, match="abstract"):
        Store()  # type: ignore[abstract]
    with pytest.raises(TypeError, match=r"stored_bytes|write_chunk"):
        _Partial()  # type: ignore[abstract]


def test_a_whole_backend_gets_the_defaults_and_no_capability_it_did_not_claim() -> None:
    data = np.arange(10.0).reshape(5, 2)
    store = _InMemory(data)
    assert (store.supports_partial_reads, store.supports_appends, store.supports_paging) == (
        False,
        False,
        False,
    )
    assert not store.memory_mapped and store.dataset_name is None
    assert np.array_equal(store.read_piece((1, 0), (slice(1, 2),)), data[3:4])
    assert np.array_equal(store.read_block((2, 0)), data[4:5])
    out = np.empty((5, 2))
    assert store.read_rows_into(0, out) is False  # no fast row path: the caller reads chunks
    store.write_blocks([((0, 0), np.ones((2, 2)))])
    assert np.array_equal(data[:2], np.ones((2, 2)))
    with pytest.raises(NotImplementedError, match="memory arrays do not grow"):
        store.grown(7)
    with pytest.raises(NotImplementedError, match="do not grow"):
        store.commit_rows(7)
