"""Writing zarr chunks as zstd frames: the match-finder parameters a level gets per array.

A zstd level is a preset of match-finder parameters (window, hash tables, search depth) that
zstd scales with the size of the source.  For a 4 MiB chunk at level 3 it picks a 2 MiB window
and 768 KiB of tables.  On some data those find hardly more than the parameters it picks for a
128 KiB source (its largest block) and cost four times the CPU: W6's normalised float32
output encoded at 250-290 MB/s per core with the chunk-sized parameters and at 1,040 MB/s with
the block-sized ones, for 0.5-0.9% more bytes (blosc2 gets that speed by compressing each
chunk as independent blocks of at most 256 KiB, so that each zstd call sees a small source).
On other data the long window is worth it: floats rounded to two decimals came out 8.8%
larger with the block-sized parameters, and no faster.

So each array decides once, on the first chunk it writes: that chunk is compressed both ways
and the block-sized parameters are kept for every chunk when their output is at most
:data:`BLOCK_PARAMS_SLACK` larger.  Only the fast levels (3 and below: zstd's "fast" and
"dfast" strategies, which who picks them picks for speed) are tried; higher levels keep zstd's
own choice, the ratio asked for (level 5 lost 3.6% with block-sized parameters on W6's data,
level 19 16%).  Either way a chunk is one standard zstd frame with its content size in the
header, which every zarr reader decodes; only the encoder's search differs.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import numpy as np

from oocarray import _native

__all__ = [
    "BLOCK_PARAMS_BYTES",
    "BLOCK_PARAMS_MAX_LEVEL",
    "BLOCK_PARAMS_SLACK",
    "ZstdChunkWriter",
]

# zstd's largest block (ZSTD_BLOCKSIZE_MAX): the source size whose parameters are tried.
BLOCK_PARAMS_BYTES = 128 << 10
BLOCK_PARAMS_MAX_LEVEL = 3
# The block-sized parameters are kept when the probe chunk grows by at most this fraction.
BLOCK_PARAMS_SLACK = 0.01


class ZstdChunkWriter:
    """Writes one array's chunks as zstd frames at ``level`` (a checksum in the frame with
    ``checksum``, zarr's CRC-32C after it with ``crc32c``), with the parameters chosen on the
    first chunk (see the module's notes).  Thread-safe: chunks are written on every core.

    Examples
    --------
    >>> import os, tempfile, numpy as np
    >>> writer = ZstdChunkWriter(level=3, checksum=False, crc32c=False)
    >>> fd, path = tempfile.mkstemp()
    >>> writer.write(fd, np.zeros(1 << 20, dtype=np.float32)) < 1000
    True
    >>> writer.tune_bytes  # zeros lose nothing with the block-sized parameters
    131072
    >>> os.close(fd); os.unlink(path)
    """

    def __init__(self, level: int, checksum: bool, crc32c: bool) -> None:
        self.level = level
        self.checksum = checksum
        self.crc32c = crc32c
        # The source size whose parameters chunks get (0: zstd's own); None until decided.
        self.tune_bytes: int | None = None if level <= BLOCK_PARAMS_MAX_LEVEL else 0
        self._lock = threading.Lock()

    def write(self, fd: int, data: Any, direct: bool = False) -> int:
        """Write ``data`` (a C-contiguous buffer) to ``fd`` from its position as one frame;
        the bytes written.  The GIL is released while it compresses and writes; a failed
        write raises ``OSError`` (ENOSPC on a full disk).  With ``direct`` the file's whole
        blocks go past the page cache where its file system allows (``O_DIRECT``), the rest
        through it."""
        tune = self._tune(data)
        return _native.zstd_write(fd, data, self.level, self.checksum, self.crc32c, tune, direct)

    def append_frames(self, fds: Any, frames: Any, crcs: Any, scratch: Any) -> None:
        """Write ``frames[j]`` (any strides) to ``fds[j]`` (int64) from its position as one
        frame each of a chunk written as several (no CRC-32C after them), extending ``crcs[j]``
        (uint32, the CRC-32C of the chunk's frames before it) in place over what was written:
        one call, the GIL released.  A frame that is not contiguous is gathered into
        ``scratch`` (a writable buffer of a frame's bytes or more) first.  A failed write
        raises ``OSError`` (ENOSPC on a full disk)."""
        if len(frames):
            # A copy of the first frame only for the probe, once per array.
            tune = self.tune_bytes
            if tune is None:
                tune = self._tune(np.ascontiguousarray(frames[0]))
            _native.zstd_append_frames(fds, frames, self.level, self.checksum, tune, crcs, scratch)

    def _tune(self, data: Any) -> int:
        """The source size whose parameters frames get, probed on the first one."""
        tune = self.tune_bytes
        if tune is None:
            with self._lock:  # the first chunks wait for the probe of one of them
                if self.tune_bytes is None:
                    self.tune_bytes = self._probe(data)
            tune = self.tune_bytes
        return tune

    def _probe(self, data: Any) -> int:
        """Compress ``data`` with zstd's own and the block-sized parameters (to /dev/null,
        only the sizes count) and choose."""
        if memoryview(data).nbytes <= BLOCK_PARAMS_BYTES:
            return 0  # zstd's own parameters for a source this small are the block-sized
        sink = os.open(os.devnull, os.O_WRONLY)
        try:
            own = _native.zstd_write(sink, data, self.level, self.checksum, False, 0)
            block = _native.zstd_write(
                sink, data, self.level, self.checksum, False, BLOCK_PARAMS_BYTES
            )
        finally:
            os.close(sink)
        return BLOCK_PARAMS_BYTES if block <= own * (1 + BLOCK_PARAMS_SLACK) else 0
