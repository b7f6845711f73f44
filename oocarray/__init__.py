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

from oocarray import _failures
from oocarray._chunked import ChunkedArray, create, from_dask, from_numpy, open, temp
from oocarray._config import Config, config, configure
from oocarray._manager import Manager, MemoryStats, detach, location, owner, system
from oocarray._spill import move_guard, spill, unspill
from oocarray._units import parse_size
from oocarray._workspace import Workspace, WorkspaceConfig, WorkspaceStats, destroy_workspaces
from oocarray.errors import (
    ClosedError,
    CorruptChunkError,
    MemoryBudgetError,
    OOCArrayError,
    ReadOnlyError,
    ScopeLeakError,
    SpillError,
    StoreNotFoundError,
    WorkspaceFullError,
    WorkspaceLeakError,
)

__version__ = "0.1.0"

__all__ = [
    "ChunkedArray",
    "ClosedError",
    "Config",
    "CorruptChunkError",
    "Manager",
    "MemoryBudgetError",
    "MemoryStats",
    "OOCArrayError",
    "ReadOnlyError",
    "ScopeLeakError",
    "SpillError",
    "StoreNotFoundError",
    "Workspace",
    "WorkspaceConfig",
    "WorkspaceFullError",
    "WorkspaceLeakError",
    "WorkspaceStats",
    "__version__",
    "config",
    "configure",
    "create",
    "destroy_workspaces",
    "detach",
    "from_dask",
    "from_numpy",
    "location",
    "move_guard",
    "open",
    "owner",
    "parse_size",
    "spill",
    "system",
    "temp",
    "unspill",
]

_failures.install()
system()
