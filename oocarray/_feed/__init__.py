"""The feed layer: streaming ingest, batches for training, map_chunks and the Dask integration.

Sits above the compute layer: it may import ``_memory``, ``_storage`` and ``_compute``, never
``_diagnostics`` or ``_cli``.
"""

from oocarray._feed._batches import Batches, batches
from oocarray._feed._ingest import from_batches, read_parquet
from oocarray._feed._map._chunks import map_chunks

__all__: list[str] = ["Batches", "batches", "from_batches", "map_chunks", "read_parquet"]
