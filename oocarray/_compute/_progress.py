"""Progress of long work: a bar where someone watches, one line where output goes to a log.

A bar is tqdm's (a widget in Jupyter, text on a terminal) and appears once the work has run
:data:`DELAY_SECONDS`.  Where stderr is neither a terminal nor a Jupyter kernel (cron, CI,
``nohup``, ``2> file``, a pipe), a bar would write every redrawn frame (``\\r``) into the log;
there a step that ran that long ends with one line instead::

    oocarray: to_zarr 1.5 GiB in 12.3 s (122.0 MiB/s)

``progress=False`` turns both off.
"""

from __future__ import annotations

import contextlib
import sys
import time
import warnings
from types import TracebackType
from typing import Any

from oocarray._memory import format_bytes

__all__ = ["DELAY_SECONDS", "interactive", "progress_bar"]

# Work shorter than this shows nothing: a bar, or a summary line, only for long steps.
DELAY_SECONDS = 2.0


def interactive() -> bool:
    """Whether a bar can be drawn: stderr is a terminal, or this is a Jupyter kernel."""
    stream = sys.stderr
    try:
        if stream is not None and stream.isatty():
            return True
    except (AttributeError, ValueError):  # a replaced or closed stream
        pass
    if "ipykernel" not in sys.modules:
        return False
    get_ipython = getattr(sys.modules.get("IPython"), "get_ipython", None)
    shell = get_ipython() if callable(get_ipython) else None
    return getattr(shell, "kernel", None) is not None


def progress_bar(
    *,
    total: int,
    desc: str,
    unit: str = "block",
    nbytes: int | None = None,
    initial: int = 0,
    disable: bool = False,
) -> Any:
    """Progress of a step of ``total`` units (``update(n)``, ``close()``, a context manager):
    a tqdm bar when :func:`interactive`, else a one-line summary at the end; nothing with
    ``disable``.  ``nbytes``, the bytes the step goes through, is what the summary reports
    when given."""
    if disable:
        return _Quiet()
    if not interactive():
        return _Summary(total, desc, unit, nbytes, initial)
    # tqdm.auto warns on its first import in a kernel without ipywidgets and then falls back
    # to the text bar; the fallback is fine, so the warning is not passed on.
    from tqdm import TqdmWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TqdmWarning)
        from tqdm.auto import tqdm
    return tqdm(
        total=total, initial=initial, desc=desc, unit=unit, delay=DELAY_SECONDS, leave=False
    )


class _Quiet:
    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> _Quiet:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


class _Summary:
    """Counts the units done; on close, when the step ran :data:`DELAY_SECONDS` or more,
    writes one line to stderr (how much, how long, how fast; or where it stopped)."""

    def __init__(self, total: int, desc: str, unit: str, nbytes: int | None, initial: int) -> None:
        self.total, self.desc, self.unit, self.nbytes = total, desc, unit, nbytes
        self.initial = self.n = initial
        self._delay = DELAY_SECONDS
        self._start = time.monotonic()
        self._closed = False

    def update(self, n: int = 1) -> None:
        self.n += n

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        seconds = time.monotonic() - self._start
        if seconds < self._delay or self.n == self.initial:
            return
        stream = sys.stderr
        if stream is None:
            return
        with contextlib.suppress(OSError, ValueError):  # a closed stderr: not worth an error
            print(self._line(seconds), file=stream, flush=True)

    def _line(self, seconds: float) -> str:
        if self.n < self.total:
            return (
                f"oocarray: {self.desc} stopped after {self.n} of {self.total} {self.unit}s, "
                f"in {seconds:.1f} s"
            )
        done = self.n - self.initial
        if self.nbytes is None:
            return f"oocarray: {self.desc} {done} {self.unit}s in {seconds:.1f} s"
        share = self.nbytes * done // max(self.total, 1)  # resumed work: what was done now
        rate = format_bytes(int(share / seconds)) if seconds > 0 else "-"
        return f"oocarray: {self.desc} {format_bytes(share)} in {seconds:.1f} s ({rate}/s)"

    def __enter__(self) -> _Summary:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
