"""The progress marker of a rechunk: in the output zarr array's attributes, which units (the
blocks of a direct pass or the written blocks of a scatter pass) are whole on disk, so a rerun
after a crash continues with the others; removed at the end.

Units are recorded only after their write returned, and saved in batches (at most every
``SAVE_SECONDS`` or ``SAVE_EVERY`` units) as half-open ranges, so saving costs little however
many units there are: a crash loses at most the batch not yet saved, whose units a rerun
writes again, whole.
"""

from __future__ import annotations

import threading
import time
from typing import Any

__all__ = ["MARKER", "Marker", "ranges", "units"]

MARKER = "oocarray_rechunk_in_progress"
SAVE_SECONDS = 0.25
SAVE_EVERY = 256


def ranges(done: set[int]) -> list[list[int]]:
    """``done`` as sorted half-open ``[start, stop]`` ranges."""
    out: list[list[int]] = []
    for unit in sorted(done):
        if out and out[-1][1] == unit:
            out[-1][1] = unit + 1
        else:
            out.append([unit, unit + 1])
    return out


def units(recorded: Any) -> set[int]:
    """The units a marker's ``done`` names: ranges, or single numbers."""
    done: set[int] = set()
    for item in recorded or []:
        if isinstance(item, list) and len(item) == 2:
            done.update(range(int(item[0]), int(item[1])))
        else:
            done.add(int(item))
    return done


class Marker:
    """Reads and records the written units of a local zarr output at ``path``; thread-safe."""

    def __init__(self, path: str, identity: dict[str, Any]) -> None:
        import zarr

        self._array = zarr.open_array(path, mode="r+")
        self.path = path
        self.identity = identity
        self.done: set[int] = set()
        self._lock = threading.Lock()
        # One save at a time, each with every unit recorded before it; the other threads
        # record on meanwhile (a save rewrites the array's metadata: about 8 ms).
        self._saving = threading.Lock()
        self._unsaved = 0
        self._saved_at = time.monotonic()

    @staticmethod
    def found(path: str) -> dict[str, Any] | None:
        """The marker of an unfinished rechunk at ``path``, or None."""
        import zarr

        try:
            attrs = dict(zarr.open_array(path, mode="r").attrs)
        except Exception:  # not a zarr array: never an unfinished rechunk
            return None
        marker = attrs.get(MARKER)
        return marker if isinstance(marker, dict) else None

    def start(self, done: set[int]) -> None:
        self.done = set(done)
        self.save()

    def record(self, unit: int) -> None:
        """``unit`` is whole on disk; saved with its batch."""
        with self._lock:
            self.done.add(unit)
            self._unsaved += 1
            due = self._unsaved >= SAVE_EVERY or time.monotonic() - self._saved_at > SAVE_SECONDS
            if due:  # this thread saves: the others go on
                self._unsaved = 0
                self._saved_at = time.monotonic()
        if due:
            self.save()

    def save(self) -> None:
        with self._saving:
            with self._lock:
                value = {**self.identity, "done": ranges(self.done)}
                self._unsaved = 0
                self._saved_at = time.monotonic()
            self._array.attrs[MARKER] = value

    def finish(self) -> None:
        attrs = dict(self._array.attrs)
        attrs.pop(MARKER, None)
        self._array.attrs.clear()
        self._array.attrs.update(attrs)
