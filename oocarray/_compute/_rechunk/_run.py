"""The passes of a rechunk: each reads blocks of whole chunks and writes them whole, on as
many threads as the plan counted."""

from __future__ import annotations

import itertools
import math
import os
import shutil
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import numpy as np

from oocarray._compute._limits import outgrows_page_cache, working_bytes
from oocarray._compute._rechunk._direct_stream import stream_copy
from oocarray._compute._rechunk._frames import append_frames, remove_partials
from oocarray._compute._rechunk._passes import Pass
from oocarray._compute._rechunk._plan import Plan, make_plan, normalize_chunks
from oocarray._compute._rechunk._resume import Marker, units
from oocarray._compute._rechunk._scatter import scatter
from oocarray._compute._rechunk._threads import Outcome, run_blocks
from oocarray._compute._rechunk._zstd_stream import streamable
from oocarray._compute._temporaries import _ARRAY_TYPE, temporary
from oocarray._memory._units import parse_size
from oocarray._storage import StoredArray, create
from oocarray.errors import StoreExistsError

__all__ = ["rechunk"]

# The temporary store between the passes of a two-pass plan is written once and read once:
# uncompressed, it costs no codec time (and disk space the size of the data).
INTERMEDIATE_CODEC = "none"
# Where a resumable two-pass rechunk keeps that store: inside the output array's directory.
INTERMEDIATE_NAME = ".oocarray-rechunk-middle"


def _regions(shape: tuple[int, ...], block: tuple[int, ...]) -> Iterator[tuple[slice, ...]]:
    starts = [range(0, max(n, 1), b) for n, b in zip(shape, block, strict=True)]
    for corner in itertools.product(*starts):
        yield tuple(slice(c, min(n, c + b)) for c, n, b in zip(corner, shape, block, strict=True))


def _copy(source: Any, out: Any, work: Pass, progress: bool, marker: Marker | None = None) -> None:
    regions = list(_regions(tuple(source.shape), work.block))
    done = marker.done if marker is not None else set()

    def copy(index: int) -> Outcome[int]:
        region = regions[index]
        out[region] = source[region]
        if marker is not None:
            marker.record(index)  # only once the block is whole on disk
        return [], 1

    run_blocks(
        (i for i in range(len(regions)) if i not in done),
        copy,
        work.workers,
        total=len(regions),
        initial=len(done),
        desc=f"rechunk {work.name}",
        progress=progress,
    )


def rechunk(
    x: Any,
    chunks: Any,
    out: Any = None,
    *,
    shards: Any = None,
    codec: str | None = None,
    max_mem: int | str | None = None,
    resume: bool = True,
    dry_run: bool = False,
    strategy: str | None = None,
    dataset: str | None = None,
    out_dataset: str | None = None,
    dimension_names: Any = None,
    mode: str = "w-",
    storage_options: Any = None,
    progress: bool = True,
    recompress: bool = False,
) -> Any:
    """Rechunk ``x`` into a zarr array of ``chunks``, in a memory budget.

    Parameters
    ----------
    x : ChunkedArray or path
        Any array oocarray opens (zarr, HDF5, .npy); a path or URL is opened read-only, with
        ``dataset`` (the array inside an HDF5 file or zarr group) and ``storage_options``.
    chunks : tuple, dict, int or "auto"
        Per axis: a size, ``-1`` for the whole axis, ``None`` to keep, ``"auto"`` sized for
        about 8 MiB per chunk; a dict ``{axis: size}`` keeps the axes it omits.
    out : path or URL, optional
        The output zarr array; a temporary one when omitted.
    shards, codec : optional
        As for :func:`oocarray.create` (``codec`` defaults to zstd).
    max_mem : int or str, optional
        The memory the rechunk may hold at once; the active manager's budget by default.
    resume : bool
        Continue an unfinished rechunk of the same source and chunks found at ``out``.
    dry_run : bool
        Return the :class:`~oocarray._compute._rechunk._plan.Plan` instead of running it
        (``print()`` it to see its passes, bytes read and written, and projected peak).
    dataset : str, optional
        When ``x`` is a path: the array inside its HDF5 file or zarr group.
    strategy : {"direct", "scatter", "two-pass"}, optional
        Force a strategy; by default the first of these that fits the budget.
    out_dataset, dimension_names : optional
        Write the output as the array ``out_dataset`` inside the zarr group ``out``, with
        these dimension names (what xarray's ``open_zarr`` shows).
    mode : {"w-", "w"}
        ``"w-"`` refuses an existing output (:class:`~oocarray.StoreExistsError`) unless it is
        an unfinished rechunk to resume; ``"w"`` replaces a zarr array oocarray wrote.
    storage_options : dict, optional
        For URLs: the object store's settings (see :func:`oocarray.open`).
    progress : bool
        Show a progress bar (default ``True``).
    recompress : bool
        Encode every target chunk as one zstd frame.  By default, where each target chunk is
        made of whole source chunks one after the other (merging chunks along the first
        axis, say) and both arrays are zstd, its file is their stored frames one after the
        other, none decoded or encoded again, each checked as it is copied; and where each
        target chunk is runs of rows that strips of source chunks supply in order (time
        series to time steps), each run is encoded as a frame and appended to its file, with
        no scatter buffer.  zstd decodes concatenated frames as one, as zarr-python
        (numcodecs 0.16.4 or later), zarrs and tensorstore do; readers with an older
        numcodecs need ``recompress=True``.

    Returns
    -------
    ChunkedArray or Plan
        The rechunked array (temporary when ``out`` is omitted), or with ``dry_run`` the plan
        of its passes.

    Raises
    ------
    StoreExistsError
        Something is at ``out`` that ``mode`` may not replace.

    Examples
    --------
    >>> import os, tempfile, numpy as np, oocarray as oc
    >>> x = oc.from_numpy(np.arange(1000.0).reshape(100, 10), chunks=(1, 10))
    >>> out = os.path.join(tempfile.mkdtemp(), "y.zarr")
    >>> y = oc.rechunk(x, (-1, 1), out, max_mem="1M", progress=False)
    >>> (y.chunks, y[:3, 2])
    ((100, 1), array([ 2., 12., 22.]))
    """
    if not isinstance(x, StoredArray):
        from oocarray._storage import open as open_stored

        x = open_stored(x, "r", dataset, storage_options=storage_options, array_type=_ARRAY_TYPE[0])
    shape = tuple(x.shape)
    dtype = np.dtype(x.dtype)
    source_chunks = tuple(min(c, max(n, 1)) for c, n in zip(x.chunks, shape, strict=True))
    target = normalize_chunks(chunks, shape, source_chunks, dtype.itemsize)
    budget = (
        working_bytes()
        if max_mem is None
        else min(parse_size(max_mem, "max_mem") or 0, working_bytes())
    )
    unit = tuple(int(s) for s in shards) if isinstance(shards, (tuple, list)) else None
    codec = codec or "zstd"
    # The output's chunks can be written as streams when they will be local zstd chunk files
    # (checked again on the store made: see _scatter.scatter).
    local_out = out is None or (isinstance(out, (str, os.PathLike)) and "://" not in str(out))
    streams = (streamable(x._store), codec == "zstd" and shards is None and local_out)
    # A large output given a place is seldom read back at once: its chunk files go past the
    # page cache (a temporary output is what the caller reads next).
    direct_writes = (
        out is not None and streams[1] and outgrows_page_cache(math.prod(shape) * dtype.itemsize)
    )
    plan = make_plan(
        shape,
        dtype,
        source_chunks,
        target,
        budget,
        strategy,
        unit,
        streams,
        recompress,
        direct_writes,
    )
    if dry_run:
        return plan
    naming = {"dataset": out_dataset, "dimension_names": dimension_names}
    return _execute(x, plan, out, shards, codec, resume, mode, storage_options, progress, naming)


def _execute(
    x: StoredArray,
    plan: Plan,
    out: Any,
    shards: Any,
    codec: str,
    resume: bool,
    mode: str,
    storage_options: Any,
    progress: bool,
    naming: dict[str, Any],
) -> Any:
    if out is None:
        result = temporary(plan.shape, plan.dtype, plan.target_chunks, codec)
        _run_plan(x, plan, result, progress, None)
        return result
    last = plan.passes[-1]
    identity = {
        "source": str(getattr(x, "path", "")),
        "chunks": list(plan.target_chunks),
        "strategy": plan.strategy,
        # The units the marker counts: a scatter's are target blocks whatever groups of
        # source chunks it reads (those follow the budget, which a rerun may change).
        "block": list(last.source_chunks if plan.strategy == "scatter" else last.block),
    }
    local = isinstance(out, (str, os.PathLike)) and "://" not in str(out)
    array_path = os.path.join(os.fspath(out), naming["dataset"] or "") if local else ""
    found = Marker.found(array_path) if local else None
    done: set[int] = set()
    if found is not None and resume and all(found.get(k) == v for k, v in identity.items()):
        result = _reopen(out, naming["dataset"])
        done = units(found.get("done"))
    else:
        if found is not None and mode == "w-":
            raise StoreExistsError(
                f"{out} holds an unfinished rechunk of another source or chunks: pass "
                "mode='w' to replace it"
            )
        result = create(
            out,
            plan.shape,
            plan.dtype,
            plan.target_chunks,
            codec,
            "w" if found is not None else mode,
            shards,
            storage_options=storage_options,
            array_type=_ARRAY_TYPE[0],
            **naming,
        )
    marker = Marker(array_path, identity) if local else None
    if marker is not None:
        marker.start(done)
    try:
        _run_plan(x, plan, result, progress, marker)
    finally:
        if marker is not None:
            marker.save()  # what is whole on disk, also when interrupted
    if marker is not None:
        marker.finish()
        if found is not None:
            # A killed frames pass left its unfinished chunks' files, which a rerun through
            # another pass (another budget, recompress=True) would not replace.
            remove_partials(array_path)
    return result


def _reopen(out: Any, dataset: str | None) -> Any:
    from oocarray._storage import open as open_stored

    return open_stored(out, "r+", dataset, array_type=_ARRAY_TYPE[0])


def _run_plan(x: Any, plan: Plan, result: Any, progress: bool, marker: Marker | None) -> None:
    # Only the rechunk's own writes: the array returned writes through the page cache.
    result._store.write_direct(plan.passes[-1].direct_writes)
    try:
        _run_passes(x, plan, result, progress, marker)
    finally:
        result._store.write_direct(False)


def _run_passes(x: Any, plan: Plan, result: Any, progress: bool, marker: Marker | None) -> None:
    if plan.strategy == "scatter":
        work = plan.passes[0]
        if work.frames and append_frames(x, result, work, progress, marker):
            return
        scatter(x, result, work.fallback or work, progress, marker)
        return
    if plan.intermediate_chunks is None:
        work = plan.passes[0]
        if work.stream_writes:
            recompress = not work.copies_frames
            if stream_copy(x, result, work.block, work.workers, progress, marker, recompress):
                return
            # A store the plan could not see cannot stream: the least memory, one thread.
            work = replace(work, workers=1, stream_reads=False, stream_writes=False)
        _copy(x, result, work, progress, marker)
        return
    if marker is None:  # nothing to resume: the middle is the manager's temporary array
        middle = temporary(plan.shape, plan.dtype, plan.intermediate_chunks, INTERMEDIATE_CODEC)
        _copy(x, middle, plan.passes[0], progress)
        _copy(middle, result, plan.passes[1], progress, marker)
        return
    # Resumable: the middle is kept inside the output array's directory (readers of the output
    # look only at its metadata and chunk keys) with a marker of its own, so a rerun continues
    # pass 1 where it stopped; it is removed once pass 2 is whole.
    middle_path = os.path.join(marker.path, INTERMEDIATE_NAME)
    identity = {
        "source": marker.identity["source"],
        "chunks": list(plan.intermediate_chunks),
        "block": list(plan.passes[0].block),
    }
    found = Marker.found(middle_path)
    if found is not None and all(found.get(k) == v for k, v in identity.items()):
        middle = _reopen(middle_path, None)
        done = units(found.get("done"))
    else:
        middle = create(
            middle_path,
            plan.shape,
            plan.dtype,
            plan.intermediate_chunks,
            INTERMEDIATE_CODEC,
            "w",
            array_type=_ARRAY_TYPE[0],
        )
        done = set()
    middle_marker = Marker(middle_path, identity)
    middle_marker.start(done)
    try:
        _copy(x, middle, plan.passes[0], progress, middle_marker)
    finally:
        middle_marker.save()
    _copy(middle, result, plan.passes[1], progress, marker)
    del middle
    shutil.rmtree(middle_path, ignore_errors=True)
