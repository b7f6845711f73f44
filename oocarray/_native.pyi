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

class Node:
    """One manager of the tree: counters, budget and the NumPy handler routed to it."""

    id: int
    closed: bool
    handler: object
    max_bytes: int
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
