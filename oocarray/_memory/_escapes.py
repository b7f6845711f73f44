"""Naming the arrays that outlived a scope or a workspace cycle, for leak reports."""

from __future__ import annotations

import gc
import inspect
import os
import sys
from collections.abc import Callable, Iterable
from typing import Any, cast

import numpy as np

from oocarray import _native
from oocarray._memory import _config, _events, _tracing

__all__ = ["describe_escapes", "find_arrays"]

# Holder hints cost scans of the heap: only the first escape gets them.
_HINTED_ARRAYS = 1

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def find_arrays(node_ids: set[int]) -> list[tuple[np.ndarray, tuple[int, ...]]]:
    """Arrays still referenced whose memory is owned by one of ``node_ids`` (best effort: it
    searches everything the garbage collector and the threads' frames can reach)."""
    found: dict[int, tuple[np.ndarray, tuple[int, ...]]] = {}

    def consider(candidates: Iterable[object]) -> None:
        for ref in candidates:
            # type(), not isinstance(): isinstance reads ``__class__``, which lazy modules and
            # deprecation shims in the heap answer with a warning (torch.distributed.reduce_op).
            if issubclass(type(ref), np.ndarray):
                array = cast(np.ndarray, ref)
                info = _native.block_info(array)
                if info is not None and info[0] in node_ids and info[1] not in found:
                    found[info[1]] = (array, info)

    # Running frames do not show their locals to the garbage collector: read them directly.
    # Before Python 3.13 f_locals is a snapshot dict stored on the frame, which would keep the
    # arrays alive after the user deletes them; drop the arrays from it again (every path that
    # writes a snapshot back into the frame refreshes it first, so this changes no variable).
    # The library's own frames are skipped: reading their locals would tie them into cycles.
    for frame in sys._current_frames().values():
        f: Any = frame
        while f is not None:
            if not f.f_code.co_filename.startswith(_PACKAGE_DIR):
                snapshot = f.f_locals
                consider(snapshot.values())
                # Only a function's f_locals is a snapshot; a module's or class body's is the
                # namespace itself, whose entries are the user's variables.
                if type(snapshot) is dict and f.f_code.co_flags & inspect.CO_OPTIMIZED:
                    for key in [k for k, v in snapshot.items() if isinstance(v, np.ndarray)]:
                        del snapshot[key]
                del snapshot
            f = f.f_back
        del f, frame
    for holder in gc.get_objects():
        consider(gc.get_referents(holder))
    return list(found.values())


def describe_escapes(
    headline: str,
    node_ids: set[int],
    wanted: Callable[[tuple[int, ...]], bool],
    label: Callable[[tuple[int, ...]], str] = lambda info: "",
) -> str:
    """``headline``, then one line per live array owned by ``node_ids`` that ``wanted`` picks
    (shape, dtype, bytes, and where it was allocated when tracing is on)."""
    lines = [headline]
    found = [pair for pair in find_arrays(node_ids) if wanted(pair[1])]
    arrays = [arr for arr, _ in found]
    infos = [info for _, info in found]
    del found
    for i, info in enumerate(infos):
        arr = arrays[i]
        lines.append(f"  - array shape={arr.shape} dtype={arr.dtype} bytes={info[2]}{label(info)}")
        record = _tracing.record_for(info[1])
        if record is not None:
            lines.append("    allocated at:")
            lines.append(record.format("      "))
        if i < _HINTED_ARRAYS:
            for hint in list(_events.holder_hints):
                for line in hint(arr, {id(arrays)}):
                    lines.append(f"    held by {line}")
        del arr
    if not _config.config().trace:
        lines.append("  (oc.configure(trace=True) records where each array was allocated)")
    return "\n".join(lines)
