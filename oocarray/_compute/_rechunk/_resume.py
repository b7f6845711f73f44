"""The progress marker of a rechunk: in the output zarr array's attributes, which target
blocks are written, so a rerun after a crash continues with the others; removed at the end."""

from __future__ import annotations

from typing import Any

__all__ = ["MARKER", "Marker"]

MARKER = "oocarray_rechunk_in_progress"


class Marker:
    """Reads and records the written blocks of a local zarr output at ``path``."""

    def __init__(self, path: str, identity: dict[str, Any]) -> None:
        import zarr

        self._array = zarr.open_array(path, mode="r+")
        self.identity = identity
        self.done: set[int] = set()

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

    def start(self, done: list[int]) -> None:
        self.done = set(done)
        self._save()

    def record(self, block: int) -> None:
        self.done.add(block)
        self._save()

    def finish(self) -> None:
        attrs = dict(self._array.attrs)
        attrs.pop(MARKER, None)
        self._array.attrs.clear()
        self._array.attrs.update(attrs)

    def _save(self) -> None:
        self._array.attrs[MARKER] = {**self.identity, "done": sorted(self.done)}
