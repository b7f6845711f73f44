"""oocarray: ordinary NumPy code on data larger than RAM.

A tree of memory managers owns, counts and budgets every NumPy allocation made while one is
active, through a native NEP 49 allocation handler.

Examples
--------
>>> import numpy as np
>>> import oocarray as oc
>>> with oc.Manager("etl", max_bytes="1G") as m:
...     a = np.ones((1024, 1024))
...     m.stats().current_bytes
8388608
"""

from oocarray import array_api as array_api  # registers itself as x.__array_namespace__()
from oocarray._compute import (
    ChunkedArray,
    Expr,
    LazyResult,
    compute,
    create,
    from_dask,
    from_numpy,
    open,
    rechunk,
    temp,
    top_k,
)
from oocarray._diagnostics import (
    MemoryEvent,
    MemoryMonitor,
    MemoryReport,
    MetricsServer,
    memory_report,
    on_event,
    remove_listener,
    serve_metrics,
    who_holds,
)
from oocarray._feed import Batches, batches, from_batches, map_chunks, read_parquet
from oocarray._memory import (
    Config,
    Manager,
    MemoryStats,
    Workspace,
    WorkspaceConfig,
    WorkspaceStats,
    _refusals,
    config,
    configure,
    destroy_workspaces,
    detach,
    location,
    move_guard,
    owner,
    parse_size,
    spill,
    system,
    unspill,
)
from oocarray._xarray._open import open_dataset
from oocarray.errors import (
    ClosedError,
    CompressedSpillFallbackWarning,
    CorruptChunkError,
    MemoryBudgetError,
    ObjectStoreError,
    OOCArrayError,
    PagingUnavailableError,
    ReadOnlyError,
    ScopeLeakError,
    SpillError,
    StoreAccessError,
    StoreExistsError,
    StoreNotFoundError,
    WorkspaceFullError,
    WorkspaceLeakError,
)

__version__ = "0.1.0"

__all__ = [
    "Batches",
    "ChunkedArray",
    "ClosedError",
    "CompressedSpillFallbackWarning",
    "Config",
    "CorruptChunkError",
    "Expr",
    "LazyResult",
    "Manager",
    "MemoryBudgetError",
    "MemoryEvent",
    "MemoryMonitor",
    "MemoryReport",
    "MemoryStats",
    "MetricsServer",
    "OOCArrayError",
    "ObjectStoreError",
    "PagingUnavailableError",
    "ReadOnlyError",
    "ScopeLeakError",
    "SpillError",
    "StoreAccessError",
    "StoreExistsError",
    "StoreNotFoundError",
    "Workspace",
    "WorkspaceConfig",
    "WorkspaceFullError",
    "WorkspaceLeakError",
    "WorkspaceStats",
    "__version__",
    "batches",
    "compute",
    "config",
    "configure",
    "create",
    "destroy_workspaces",
    "detach",
    "from_batches",
    "from_dask",
    "from_numpy",
    "location",
    "map_chunks",
    "memory_report",
    "move_guard",
    "on_event",
    "open",
    "open_dataset",
    "owner",
    "parse_size",
    "read_parquet",
    "rechunk",
    "remove_listener",
    "serve_metrics",
    "spill",
    "system",
    "temp",
    "top_k",
    "unspill",
    "who_holds",
]


def __getattr__(name: str) -> object:
    # oc.dask imports distributed, which is optional and slow to import: only when used.
    if name == "dask":
        import importlib

        return importlib.import_module("oocarray.dask")
    raise AttributeError(f"module 'oocarray' has no attribute {name!r}")


_refusals.install()
system()
