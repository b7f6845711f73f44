"""The strategy of a rechunk and its printable plan.

- **direct**, one pass, when a block made of whole source chunks and whole target chunks (per
  axis the lcm of the two chunk sizes, capped at the axis) fits the memory: every source chunk
  is read once and every target chunk written once;
- **scatter**, one pass, when a source chunk and a target chunk fit: each source chunk is read
  once and its pieces copied into the partial target chunks of a raw scatter buffer (a
  temporary file, paged by the kernel); a target chunk is encoded and written once, when its
  last piece arrives.  Where each target chunk is runs of rows that strips of source chunks
  supply in order (series to time steps), the runs are instead appended to the target
  chunks' files as zstd frames, strip after strip: no buffer (see :mod:`._frames`);
- **two-pass** otherwise, through a temporary store whose chunks are, per axis, the smaller of
  the source and target chunk (as rechunker does).  With an output on local disk both passes
  are resumable: the temporary store is kept inside the output array's directory with a
  progress marker of its own, and removed when pass 2 is whole.  It is the plan only where a
  source chunk and a target chunk do not fit at once.

Blocks run on up to :func:`~oocarray._storage._pool.workers` threads, as many as the budget
holds at once.  A scatter pass whose chunks are large (8 MiB or more) decodes and encodes
them as zstd streams where the stores allow and that fits more threads (see
:mod:`._zstd_stream`): the native codec's buffers, a chunk's size per thread, are then not
needed.  A direct pass whose target chunks are each made of whole source chunks, one after
the other, copies their zstd frames, none decoded or encoded (see :mod:`._direct_stream`);
with ``recompress`` it streams both where that runs more threads.

An output larger than the page cache should hold (see
:func:`~oocarray._compute._limits.outgrows_page_cache`), written by the native zstd writer,
has its chunk files written past the page cache (``O_DIRECT``), on a thread more than the
cores: a thread waiting for the disk leaves its core to the others.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from oocarray._compute._rechunk._passes import (
    Pass,
    block_pass,
    direct_pass,
    frames_pass,
    grown_middle,
    lcm_block,
    scatter_pass,
)
from oocarray._memory._units import format_bytes
from oocarray._storage._pool import workers as cpu_workers
from oocarray.errors import MemoryBudgetError

__all__ = ["AUTO_CHUNK_BYTES", "Plan", "make_plan", "normalize_chunks"]

# The byte target of a chunk sized "auto": large enough for few files, small enough to read.
AUTO_CHUNK_BYTES = 8 << 20


@dataclass(frozen=True)
class Plan:
    """A rechunk's plan: its strategy, passes and projected totals (``str()`` prints it).

    ``oc.rechunk(..., dry_run=True)`` returns one; every field is also an attribute.

    Parameters
    ----------
    shape, dtype
        The array's shape and dtype.
    source_chunks, target_chunks
        The chunks read and the chunks written.
    strategy
        ``"direct"`` (one pass) or ``"two-pass"`` (through a temporary store).
    passes
        The passes, in order: each one's blocks, chunks, bytes read and written, and peak
        memory.
    intermediate_chunks
        The temporary store's chunks of a two-pass rechunk, else ``None``.

    Examples
    --------
    >>> import numpy as np, oocarray as oc
    >>> x = oc.from_numpy(np.zeros((100, 100)), chunks=(10, 100))
    >>> plan = oc.rechunk(x, (-1, 10), dry_run=True)
    >>> print(str(plan).splitlines()[0])  # then a line per pass (its threads: the cores')
    rechunk (100, 100) float64 chunks (10, 100) -> (100, 10): direct, 1 pass(es)
    >>> plan.strategy, plan.bytes_read, plan.bytes_written
    ('direct', 80000, 80000)
    """

    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    source_chunks: tuple[int, ...]
    target_chunks: tuple[int, ...]
    strategy: str
    passes: tuple[Pass, ...]
    intermediate_chunks: tuple[int, ...] | None

    @property
    def bytes_read(self) -> int:
        """Bytes all passes read, decoded.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> x = oc.from_numpy(np.zeros((100, 100)), chunks=(10, 100))
        >>> oc.rechunk(x, (-1, 10), dry_run=True).bytes_read
        80000
        """
        return sum(p.bytes_read for p in self.passes)

    @property
    def bytes_written(self) -> int:
        """Bytes all passes write, before encoding.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> x = oc.from_numpy(np.zeros((100, 100)), chunks=(10, 100))
        >>> oc.rechunk(x, (-1, 10), dry_run=True).bytes_written
        80000
        """
        return sum(p.bytes_written for p in self.passes)

    @property
    def peak_bytes(self) -> int:
        """The most memory a pass holds at once, projected.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> x = oc.from_numpy(np.zeros((100, 100)), chunks=(10, 100))
        >>> plan = oc.rechunk(x, (-1, 10), dry_run=True)
        >>> plan.peak_bytes >= plan.passes[0].block[0] * plan.passes[0].block[1] * 8
        True
        """
        return max((p.peak_bytes for p in self.passes), default=0)

    def __str__(self) -> str:
        lines = [
            f"rechunk {self.shape} {self.dtype} chunks {self.source_chunks} -> "
            f"{self.target_chunks}: {self.strategy}, {len(self.passes)} pass(es)"
        ]
        for p in self.passes:
            scatter = (
                f", through a raw scatter buffer {format_bytes(p.scatter_bytes)}"
                if p.scatter_bytes
                else ""
            )
            streamed = [
                k for k, on in (("read", p.stream_reads), ("written", p.stream_writes)) if on
            ]
            if p.copies_frames:
                scatter += " (the source chunks' zstd frames copied, none decoded)"
            elif streamed:
                scatter += f" (chunks {' and '.join(streamed)} as streams)"
            if p.frames:
                scatter += (
                    ", no buffer: each block's rows appended to the target chunks' files as"
                    f" zstd frames ({p.frames} block(s) held)"
                )
            if p.tiled:
                scatter += " (slots in piece order)"
            if p.direct_writes:
                scatter += " (chunk files written past the page cache)"
            lines.append(
                f"  {p.name}: blocks {p.block} on {p.workers} thread(s), read "
                f"{format_bytes(p.bytes_read)}, write {format_bytes(p.bytes_written)}{scatter}, "
                f"peak {format_bytes(p.peak_bytes)}"
            )
        lines.append(
            f"  total: read {format_bytes(self.bytes_read)}, write "
            f"{format_bytes(self.bytes_written)}, projected peak {format_bytes(self.peak_bytes)}"
        )
        return "\n".join(lines)


def normalize_chunks(
    chunks: Any, shape: tuple[int, ...], current: tuple[int, ...], itemsize: int
) -> tuple[int, ...]:
    """Target chunks from the user's form: a tuple per axis (int, -1 whole axis, None keep,
    "auto"), a dict {axis: size}, a single int for every axis, or "auto" for all axes."""
    ndim = len(shape)
    if isinstance(chunks, str):
        if chunks != "auto":
            raise ValueError(f"chunks={chunks!r}: give sizes per axis or 'auto'")
        chunks = ("auto",) * ndim
    elif isinstance(chunks, int):
        chunks = (chunks,) * ndim
    elif isinstance(chunks, dict):
        chunks = tuple(chunks.get(axis, chunks.get(axis - ndim)) for axis in range(ndim))
    chunks = tuple(chunks)
    if len(chunks) != ndim:
        raise ValueError(f"chunks {chunks} has {len(chunks)} entries for a {ndim}-d array")
    sizes: list[int | None] = []
    for axis, (c, n) in enumerate(zip(chunks, shape, strict=True)):
        if c is None:
            sizes.append(min(current[axis], max(n, 1)))
        elif c == "auto":
            sizes.append(None)
        elif isinstance(c, (int, np.integer)) and (c == -1 or c > 0):
            sizes.append(max(n, 1) if c == -1 else min(int(c), max(n, 1)))
        else:
            raise ValueError(f"chunks[{axis}]={c!r}: give a positive size, -1, None or 'auto'")
    auto = [axis for axis, s in enumerate(sizes) if s is None]
    if auto:
        fixed = math.prod(s for s in sizes if s is not None) * itemsize
        per_axis = max(1, int((AUTO_CHUNK_BYTES / max(fixed, 1)) ** (1 / len(auto))))
        for axis in auto:
            sizes[axis] = min(max(shape[axis], 1), per_axis)
    return tuple(int(s) for s in sizes if s is not None)


def make_plan(
    shape: tuple[int, ...],
    dtype: np.dtype[Any],
    source_chunks: tuple[int, ...],
    target_chunks: tuple[int, ...],
    budget: int,
    strategy: str | None = None,
    write_unit: tuple[int, ...] | None = None,
    streams: tuple[bool, bool] = (False, False),
    recompress: bool = False,
    direct_writes: bool = False,
) -> Plan:
    """The first of direct, scatter and two-pass whose peak fits ``budget`` (or the one
    ``strategy`` names), else :class:`MemoryBudgetError` naming the smallest budget that
    would do.  Direct and scatter read the source once and write each target chunk once;
    scatter also copies the data through its raw buffer, so direct comes first.
    ``write_unit`` is the output's shard shape, when it has shards; ``streams`` whether the
    source's chunks can be read, and the output's written, as streams; ``recompress`` whether
    every target chunk is encoded (else a direct pass may copy zstd frames); ``direct_writes``
    whether the output's chunk files are to be written past the page cache where the native
    writer writes them (on a thread more than the cores: see the module's notes)."""
    itemsize = dtype.itemsize
    # Threads of the passes that may write the output; the first of two passes writes the
    # intermediate store through the page cache.
    threads = cpu_workers() + (1 if direct_writes else 0)
    direct = direct_pass(
        shape,
        itemsize,
        source_chunks,
        target_chunks,
        budget,
        write_unit,
        streams,
        threads,
        recompress,
    )
    scatter = scatter_pass(
        shape, itemsize, source_chunks, target_chunks, budget, write_unit, streams, threads
    )
    if streams[1] and write_unit is None and not recompress:
        # Target chunks that can take appended frames: no buffer where that pass fits, the
        # buffered one kept to fall back on.  On the cores: its files go through the page
        # cache, so no thread waits for the disk.
        frames = frames_pass(
            shape, itemsize, source_chunks, target_chunks, budget, cpu_workers(), streams[0]
        )
        if frames is not None and frames.peak_bytes <= budget:
            scatter = replace(frames, fallback=scatter)
    candidates = [
        Plan(shape, dtype, source_chunks, target_chunks, "direct", (direct,), None),
        Plan(shape, dtype, source_chunks, target_chunks, "scatter", (scatter,), None),
    ]
    middle = grown_middle(shape, itemsize, source_chunks, target_chunks, budget)
    if middle != source_chunks and middle != target_chunks:
        first = block_pass(
            "pass 1 (source -> intermediate)",
            lcm_block(source_chunks, middle, shape),
            source_chunks,
            middle,
            shape,
            itemsize,
            budget,
            cpu_workers(),
        )
        second = block_pass(
            "pass 2 (intermediate -> target)",
            lcm_block(middle, target_chunks, shape),
            middle,
            target_chunks,
            shape,
            itemsize,
            budget,
            threads,
        )
        candidates.append(
            Plan(shape, dtype, source_chunks, target_chunks, "two-pass", (first, second), middle)
        )
    if strategy is not None:
        named = [p for p in candidates if p.strategy == strategy]
        if not named:
            raise ValueError(
                f"strategy={strategy!r}: choose one of {[p.strategy for p in candidates]}"
            )
        candidates = named
    fitting = [p for p in candidates if p.peak_bytes <= budget]
    if fitting and direct_writes:
        *first_passes, last = fitting[0].passes
        # Streamed chunks are written by Python, and appended frames a piece at a time:
        # through the page cache.
        if not last.stream_writes and not last.frames:
            passes = (*first_passes, replace(last, direct_writes=True))
            fitting[0] = replace(fitting[0], passes=passes)
    if not fitting:
        least = min(p.peak_bytes for p in candidates)
        raise MemoryBudgetError(
            f"rechunk from chunks {source_chunks} to {target_chunks} needs at least "
            f"{format_bytes(least)} at once, but the budget is {format_bytes(budget)}: give it "
            f"at least {format_bytes(least)}, or choose smaller target chunks"
        )
    return fitting[0]
