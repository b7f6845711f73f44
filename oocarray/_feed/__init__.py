"""The feed layer: streaming ingest, batches for training, map_chunks and the Dask integration.

Sits above the compute layer: it may import ``_memory``, ``_storage`` and ``_compute``, never
``_diagnostics`` or ``_cli``.
"""

__all__: list[str] = []
