"""Type stub of the C extension oocarray._native (native/)."""

from collections.abc import Callable
from typing import Any, TypedDict

import numpy as np

HEADER_BYTES: int
FLAG_REGION: int
FLAG_KEPT: int
FLAG_TRACED: int
FAIL_BUDGET: int
FAIL_CLOSED: int
FAIL_OS: int
FAIL_SPILL: int
FLAG_SPILLED: int
FLAG_MAPPED: int
SPILL_FAIL: int
SPILL_MMAP: int
SPILL_EVICT: int
LOCATION_RAM: int
LOCATION_MMAP: int

class Counters(TypedDict):
    current_bytes: int
    peak_bytes: int
    total_bytes: int
    total_count: int
    live_count: int
    kept_count: int
    kept_bytes: int
    region_bytes: int
    region_count: int
    spilled_bytes: int
    mapped_bytes: int
    spill_count: int
    spill_moved_bytes: int
    unspill_count: int
    unspill_moved_bytes: int

class Node:
    """One manager of the tree: counters, budget and the NumPy handler routed to it."""

    id: int
    closed: bool
    handler: object
    max_bytes: int
    spill_policy: int
    location: int
    def __init__(self, parent: Node | None = None, max_bytes: int = -1) -> None: ...
    def close(self) -> None: ...
    def reset_peak(self) -> None: ...
    def counters(self) -> Counters: ...

def set_handler(capsule: object | None, /) -> object: ...
def get_handler() -> object: ...
def block_info(obj: Any, /) -> tuple[int, int, int, int, int] | None: ...
def transfer(obj: np.ndarray, node: Node, kept: bool, /) -> tuple[int, int, int] | None: ...
def take_failure() -> tuple[int, int, int, int, int, int, int] | None: ...
def set_trace(
    on_alloc: Callable[[int, int, int], None] | None, on_free: Callable[[int], None] | None, /
) -> None: ...
def get_large_threshold() -> int: ...
def set_large_threshold(nbytes: int, /) -> None: ...
def spill(obj: np.ndarray, /) -> int: ...
def unspill(obj: np.ndarray, /) -> int | tuple[int, int, int]: ...
def spill_subtree(node: Node, skip_kept: bool, /) -> int: ...
def evict(need_bytes: int, /) -> int: ...
def drop_disk_pages() -> int: ...
def set_spill_dir(path: str, /) -> None: ...
def set_spill_limit(nbytes: int, /) -> None: ...
def spill_used() -> int: ...
def set_pressure_callback(callback: Callable[[int, int], bool] | None, /) -> None: ...
def region_cache(limit: int = ..., /) -> tuple[int, int]: ...
