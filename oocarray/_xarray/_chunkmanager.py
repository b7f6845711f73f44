"""The ``chunked_array_type="oocarray"`` xarray chunk manager (being built)."""

from __future__ import annotations

from typing import Any

from xarray.namedarray.parallelcompat import ChunkManagerEntrypoint

from oocarray._compute import ChunkedArray


class OOCArrayChunkManager(ChunkManagerEntrypoint[Any]):
    def __init__(self) -> None:
        self.array_cls = ChunkedArray

    def is_chunked_array(self, data: Any) -> bool:
        return isinstance(data, ChunkedArray)

    def chunks(self, data: Any) -> Any:
        raise NotImplementedError

    def normalize_chunks(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    def from_array(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    def compute(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    def apply_gufunc(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError
