"""A raw scratch file for an algorithm's intermediate data (a sort's runs, a staged copy,
a rechunk's scatter buffer).

Values an algorithm writes once and reads back once need no chunk files, codec or checksum:
one unnamed file in the spill directory (removed by the system when closed, or when the
process dies) written and read at byte offsets straight from and into NumPy arrays.  A full
disk is a :class:`~oocarray.errors.SpillError`, as for every spill.
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType

import numpy as np

from oocarray._memory._spill_files import private_dir, spill_error

__all__ = ["ScratchFile"]


class ScratchFile:
    """An unnamed temporary file read and written at byte offsets; a context manager that
    closes it (its space is freed at once).

    Examples
    --------
    >>> import numpy as np
    >>> with ScratchFile() as scratch:
    ...     scratch.write(0, np.arange(4.0))
    ...     back = np.empty(2)
    ...     scratch.read_into(16, back)
    >>> back
    array([2., 3.])
    >>> scratch.write(0, back)
    Traceback (most recent call last):
    ...
    ValueError: the scratch file is closed (its algorithm has ended)
    """

    def __init__(self) -> None:
        # Held open until close(): the file has no name, and closing it frees its space.
        self._file = tempfile.TemporaryFile(  # noqa: SIM115
            dir=private_dir(), prefix="oocarray-scratch-"
        )
        self.fd = self._file.fileno()
        # Reads and writes in progress, which close() waits for; after it they raise.  Its
        # descriptor's number is soon another file's: a worker that outlived its algorithm
        # (Ctrl-C while a pool starts a thread leaves one the pool never joins) must not
        # write there.
        self._in_use = 0
        self._closed = False
        self._idle = threading.Condition()

    @contextmanager
    def _using(self) -> Iterator[int]:
        with self._idle:
            if self._closed:
                raise ValueError("the scratch file is closed (its algorithm has ended)")
            self._in_use += 1
        try:
            yield self.fd
        finally:
            with self._idle:
                self._in_use -= 1
                self._idle.notify_all()

    def write(self, offset: int, values: np.ndarray) -> None:
        """Writes ``values`` (C order) at byte ``offset``."""
        view = memoryview(np.ascontiguousarray(values)).cast("B")  # type: ignore[arg-type]
        with self._using() as fd:
            try:
                while view:
                    written = os.pwrite(fd, view, offset)
                    view, offset = view[written:], offset + written
            except OSError as error:
                raise spill_error(error, "a sort's scratch file", len(view)) from error

    def read_into(self, offset: int, out: np.ndarray) -> None:
        """Fills the C-contiguous ``out`` with the bytes at ``offset``."""
        view = memoryview(out).cast("B")  # type: ignore[arg-type]
        with self._using() as fd:
            while view:
                got = os.preadv(fd, [view], offset)
                if got == 0:
                    raise OSError(f"scratch file ended at byte {offset}")
                view, offset = view[got:], offset + got

    def close(self) -> None:
        """Frees the file's space, once the reads and writes in progress are done; later ones
        raise ``ValueError``."""
        with self._idle:
            self._closed = True
            self._idle.wait_for(lambda: self._in_use == 0)
        self._file.close()

    def __enter__(self) -> ScratchFile:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
