"""The memory layer: managers, workspaces, spill, the resident-memory watcher.

Nothing here knows about chunked storage or compute; the layers above import from here."""

from oocarray._memory._accounting import budget_left
from oocarray._memory._arrays import detach, location, owner
from oocarray._memory._config import Config, config, configure
from oocarray._memory._manager import Manager, MemoryStats, active_manager, system
from oocarray._memory._scratch import release_scratch, scratch_bytes, scratch_step
from oocarray._memory._shapes import parse_shape
from oocarray._memory._spill import move_guard, spill, unspill
from oocarray._memory._units import format_bytes, parse_size
from oocarray._memory._workspace import Workspace, destroy_workspaces
from oocarray._memory._workspace_config import WorkspaceConfig
from oocarray._memory._workspace_stats import WorkspaceStats
from oocarray._memory._zstd_library import zstd_library

zstd_library()  # before zstd's first use: the native code keeps the first library bound

__all__ = [
    "Config",
    "Manager",
    "MemoryStats",
    "Workspace",
    "WorkspaceConfig",
    "WorkspaceStats",
    "active_manager",
    "budget_left",
    "config",
    "configure",
    "destroy_workspaces",
    "detach",
    "format_bytes",
    "location",
    "move_guard",
    "owner",
    "parse_shape",
    "parse_size",
    "release_scratch",
    "scratch_bytes",
    "scratch_step",
    "spill",
    "system",
    "unspill",
]
