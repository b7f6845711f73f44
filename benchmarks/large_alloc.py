"""Large allocations and the small/large threshold.

L1: allocate and first-touch 64 MiB (``np.empty(8Mi)`` float64, then ``a.fill(1)``, then free)
inside a manager, against plain NumPy.  At the default threshold this is a region: an anonymous
mapping oocarray maps itself (2 MiB aligned, advised for transparent huge pages).

L2: the sweep behind the threshold.  For each size, the same allocate + touch + free loop with
the manager forced onto the malloc path (threshold above the size), forced onto the region path
(threshold equal to the size), and with plain NumPy.  The threshold is global; it is restored
afterwards.  Sizes from 8 MiB to 32 MiB are added to show where the region path stops
costing more than malloc.

Freed regions go to a free-region cache (native/regions.c) and are handed out again for
requests of about the same size, so in this loop the region path normally reuses one mapping.
The sweep reports whether a size is served from the cache, and runs a second pass with the
cache switched off (``_native.region_cache(0)``, restored afterwards): the cost of a request
that misses it.
"""

from __future__ import annotations

import contextlib
import resource

import numpy as np

import oocarray as oc
from benchmarks._timing import (
    Ratio,
    Result,
    Row,
    Side,
    Table,
    clock,
    format_bytes,
    format_seconds,
    interleave,
    per_op,
)
from oocarray import _native

KiB = 1 << 10
MiB = 1 << 20
LARGE_BYTES = 64 * MiB
SWEEP_SIZES = (16 * KiB, 64 * KiB, 128 * KiB, 256 * KiB, 512 * KiB, 1 * MiB, 4 * MiB)
# Beyond the threshold candidates: where the region path stops costing more than malloc.
# (glibc reuses freed heap blocks up to its dynamic mmap threshold, at most 32 MiB on 64-bit.)
SWEEP_SIZES_BEYOND = (8 * MiB, 16 * MiB, 32 * MiB)
# Each repeat of a sweep side allocates and touches about this many bytes in all.
SWEEP_BYTES_PER_REPEAT = 32 * MiB


def _touch_loop(elements: int, ops: int) -> float:
    """Seconds for ``ops`` rounds of allocate, first touch and free of ``elements`` float64."""
    empty = np.empty
    start = clock()
    for _ in range(ops):
        a = empty(elements)
        a.fill(1.0)
        del a
    return clock() - start


def _is_region(elements: int) -> bool | None:
    """Whether an array allocated now is a region (None: not oocarray's)."""
    info = _native.block_info(np.empty(elements))
    return None if info is None else bool(info[3] & _native.FLAG_REGION)


def _managed(elements: int, ops: int, threshold: int | None) -> Side:
    def side() -> float:
        if threshold is not None:
            _native.set_large_threshold(threshold)
        with oc.Manager("bench-large"):
            return _touch_loop(elements, ops)

    return side


def _faults_per_op(elements: int, threshold: int | None, ops: int = 8) -> float:
    """Minor page faults per allocate + touch + free, after a warm-up (untimed).

    ``threshold`` None: plain NumPy; otherwise a manager with the region threshold set to it.
    """
    scope: contextlib.AbstractContextManager[object] = contextlib.nullcontext()
    if threshold is not None:
        _native.set_large_threshold(threshold)
        scope = oc.Manager("bench-faults")
    with scope:
        _touch_loop(elements, 2)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        _touch_loop(elements, ops)
        after = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    return (after - before) / ops


def _plain(elements: int, ops: int) -> Side:
    def side() -> float:
        return _touch_loop(elements, ops)

    return side


def _path_at(threshold: int, elements: int) -> bool | None:
    """Whether ``elements`` float64 become a region in a manager at this threshold."""
    _native.set_large_threshold(threshold)
    with oc.Manager("bench-check"):
        return _is_region(elements)


def _reused_after_free(threshold: int, elements: int) -> bool:
    """Whether a region freed in a manager at this threshold goes into the free-region cache
    (native/regions.c) and the next request of the same size is served from it.

    Judged from the cache's byte count, not from addresses: the kernel often maps a fresh
    region at the address just unmapped.
    """
    _native.set_large_threshold(threshold)
    with oc.Manager("bench-reuse"):
        a = np.empty(elements)
        after_alloc = _native.region_cache()[0]
        del a
        after_free = _native.region_cache()[0]
        b = np.empty(elements)
        after_realloc = _native.region_cache()[0]
        del b
    return after_free > after_alloc and after_realloc < after_free


def run_large(quick: bool = False) -> Result:
    elements = LARGE_BYTES // 8
    ops = 2
    rounds = 5 if quick else 31
    saved = _native.get_large_threshold()
    try:
        if _path_at(saved, elements) is not True:
            raise RuntimeError("L1: a 64 MiB array in a manager is not a region")
        times = interleave(
            {"oocarray": _managed(elements, ops, None), "numpy": _plain(elements, ops)},
            rounds=rounds,
        )
        faults = (_faults_per_op(elements, saved), _faults_per_op(elements, None))
    finally:
        _native.set_large_threshold(saved)
    row = Row(
        id="L1",
        workload=f"allocate + `fill(1)` + free, {format_bytes(LARGE_BYTES)} float64, per op",
        oocarray_s=per_op(times["oocarray"], ops),
        peer="plain NumPy",
        peer_s=per_op(times["numpy"], ops),
        ratio=Ratio.paired(times["oocarray"], times["numpy"]),
    )
    note = f"L1 minor page faults per operation: oocarray {faults[0]:g}, plain NumPy {faults[1]:g}"
    return Result(rows=[row], tables=[], notes=[note])


def run_sweep(quick: bool = False) -> Result:
    rounds = 5 if quick else 21
    saved = _native.get_large_threshold()
    cache_limit = _native.region_cache()[1]
    rows: list[list[str]] = []
    try:
        for size in SWEEP_SIZES + SWEEP_SIZES_BEYOND:
            elements = size // 8
            ops = max(4, SWEEP_BYTES_PER_REPEAT // size)
            if _path_at(size + 1, elements) is not False:
                raise RuntimeError(f"L2: threshold above {size} did not give a malloc block")
            if _path_at(size, elements) is not True:
                raise RuntimeError(f"L2: threshold at {size} did not give a region")
            times = interleave(
                {
                    "numpy": _plain(elements, ops),
                    "malloc": _managed(elements, ops, size + 1),
                    "region": _managed(elements, ops, size),
                },
                rounds=rounds,
            )
            faults = [
                _faults_per_op(elements, None),
                _faults_per_op(elements, size + 1),
                _faults_per_op(elements, size),
            ]
            reused = _reused_after_free(size, elements)
            # A second pass with the free-region cache off: what a request that misses the
            # cache (first use of a size, or more sizes in turn than the cache holds) costs.
            _native.region_cache(0)
            try:
                cold = interleave(
                    {"numpy": _plain(elements, ops), "region": _managed(elements, ops, size)},
                    rounds=rounds,
                )
                cold_faults = _faults_per_op(elements, size)
            finally:
                _native.region_cache(cache_limit)
            default_path = "region" if size >= saved else "malloc"
            rows.append(
                [
                    format_bytes(size),
                    format_seconds(per_op(times["numpy"], ops)),
                    format_seconds(per_op(times["malloc"], ops)),
                    format_seconds(per_op(times["region"], ops)),
                    str(Ratio.paired(times["malloc"], times["numpy"])),
                    str(Ratio.paired(times["region"], times["numpy"])),
                    str(Ratio.paired(times["region"], times["malloc"])),
                    " / ".join(f"{f:g}" for f in faults),
                    "yes" if reused else "no",
                    f"{Ratio.paired(cold['region'], cold['numpy'])} ({cold_faults:g} faults)",
                    default_path,
                ]
            )
    finally:
        _native.set_large_threshold(saved)
        _native.region_cache(cache_limit)
    table = Table(
        title=(
            "Threshold sweep (L2): allocate + `fill(1)` + free per op, float64; "
            "ratios are medians of per-round ratios [interquartile range]; free-region cache "
            f"limit {format_bytes(cache_limit)}"
        ),
        headers=(
            "size",
            "plain NumPy",
            "malloc path",
            "region path",
            "malloc / NumPy",
            "region / NumPy",
            "region / malloc",
            "minor faults/op (NumPy / malloc / region)",
            "region reused from cache",
            "cache off: region / NumPy (faults/op)",
            f"path at default ({format_bytes(saved)})",
        ),
        rows=rows,
    )
    return Result(rows=[], tables=[table])
