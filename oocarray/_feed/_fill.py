"""Filling one batch: the rows of a range of epoch positions, gathered from the sources.

Chunked sources are read a window at a time (see :mod:`._plan`) into one window buffer per
source.  A pass fills its positions in increasing order, and a batch that spans two windows
takes all it needs from the first before the second is read, so a window is never needed
again once the next one is read: one buffer per source is enough, and the next window is read
into it when the first batch that needs it is filled (a second buffer would only hold a
window nobody reads again: a window's worth of resident memory for nothing).  Should a
position behind the loaded window ever be asked for, that window is read again.  Other
sources are gathered straight from the array.  Window buffers are made once, in the
iteration's manager; what a window read or a gather allocates for the moment lives in the
iteration's cyclic workspace, one cycle each.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from oocarray._feed._plan import Plan, Window
from oocarray._feed._sources import Source
from oocarray._memory import Manager, Workspace

__all__ = ["Filler"]


@dataclass(slots=True)
class _Loaded:
    number: int
    window: Window
    rows: np.ndarray | None  # source rows per buffer index, for sources gathered directly
    buffers: list[np.ndarray | None]  # per source: the window's rows (windowed sources)


class Filler:
    """Fills batch buffers with the rows of epoch positions ``[q0, q1)``."""

    def __init__(
        self, sources: list[Source], plan: Plan, manager: Manager, workspace: Workspace
    ) -> None:
        self._sources = sources
        self._plan = plan
        self._manager = manager
        self._workspace = workspace
        self._loaded: _Loaded | None = None  # the window in the buffers
        self._buffers: list[np.ndarray | None] | None = None  # made at the first window
        self._windowed = any(s.windowed for s in sources)
        self._direct = any(not s.windowed for s in sources)

    def fill(self, q0: int, q1: int, outs: list[np.ndarray]) -> None:
        """``outs[i][:q1 - q0]`` = the rows of positions ``q0 .. q1`` of source ``i``."""
        if self._plan.mode == "full":
            rows = self._plan.permutation[q0:q1]
            with self._workspace:
                for source, out in zip(self._sources, outs, strict=True):
                    source.gather(rows, out[: q1 - q0])
            return
        at = 0
        position = q0
        while position < q1:
            loaded = self._window(self._plan.window_at(position))
            window = loaded.window
            end = min(q1, window.start + window.size)
            a, b = position - window.start, end - window.start
            with self._workspace:
                self._gather(loaded, a, b, [out[at : at + b - a] for out in outs])
            at += b - a
            position = end

    def _gather(self, loaded: _Loaded, a: int, b: int, outs: list[np.ndarray]) -> None:
        window = loaded.window
        order = None if window.order is None else window.order[a:b]
        for source, buffer, out in zip(self._sources, loaded.buffers, outs, strict=True):
            if buffer is not None:
                if order is None:
                    out[...] = buffer[a:b]
                else:
                    # Indices valid by construction: "clip" lets NumPy write into out
                    # directly ("raise" gathers into a temporary first).
                    np.take(buffer, order, axis=0, out=out, mode="clip")
            elif order is None:  # positions in file order: one run of rows
                source.copy_rows(window.runs[0][0] + a, out)
            else:
                assert loaded.rows is not None
                source.gather(loaded.rows[order], out)

    def _window(self, number: int) -> _Loaded:
        if self._loaded is not None and self._loaded.number == number:
            return self._loaded
        # Made outside any cycle: the window's order and rows serve many batches.
        window = self._plan.window(number)
        rows = window.rows() if self._direct and window.order is not None else None
        self._loaded = None  # its buffers are overwritten now
        if self._buffers is None:
            self._buffers = self._new_buffers()
        buffers = self._buffers
        with self._workspace:  # what a read needs besides the buffer (decode scratch)
            for source, buffer in zip(self._sources, buffers, strict=True):
                if buffer is not None:
                    source.read_runs(window.runs, buffer)
        self._loaded = _Loaded(number, window, rows, buffers)
        return self._loaded

    def _new_buffers(self) -> list[np.ndarray | None]:
        rows = min(self._plan.window_chunks * self._plan.chunk_rows, self._plan.n_rows)
        return [
            self._manager.empty((rows, *s.row_shape), s.dtype) if s.windowed else None
            for s in self._sources
        ]
