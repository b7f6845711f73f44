"""FUSE: which evaluates a chunk's expression faster, numexpr or NumPy in a cyclic workspace.

The compute engine can run a block's expression as one numexpr program (cache-sized pieces, no
block-sized temporaries) or as NumPy ufuncs whose temporaries come from the worker's cyclic
workspace (the same arena every block, so no page faults).  This benchmark measures both on the
expressions the other workloads use, as sum reductions over an uncompressed
``oc.from_numpy`` array (16M elements in 1M-element chunks; ``--quick``: 4M) so that
evaluation, not decoding, dominates:

- W1c's ``(x*2+1)-x`` in float32;
- W6's ``(x - m) / s`` with per-column float32 ``m`` and ``s`` over (N, 64);
- ``tanh(x)*2`` in float32 (a transcendental function);
- a float64 polynomial ``((x*1.5+0.5)*x-2)*x``.

The engine's default is whichever wins (``oocarray._compute._fuse.ENABLED``).  The ratio is
numexpr / NumPy: above 1, NumPy is faster.  The slab path (``oocarray._compute._slabs``), which
takes such reductions before either, is off while this runs: it compares the two block paths.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

import numpy as np

import oocarray as oc
from benchmarks._timing import Ratio, Result, Row, Table, clock, format_seconds, interleave
from oocarray._compute import _fuse, _slabs

ELEMENTS = 16 << 20
QUICK_ELEMENTS = 4 << 20
CHUNK = 1 << 20
ITERATIONS = 5


def _expressions(n: int) -> dict[str, tuple[oc.ChunkedArray, Callable[[Any], Any]]]:
    rng = np.random.default_rng(3)
    flat = oc.from_numpy(rng.standard_normal(n, dtype=np.float32), chunks=(CHUNK,), codec="none")
    table = rng.standard_normal((n // 64, 64), dtype=np.float32)
    wide = oc.from_numpy(table, chunks=(CHUNK // 64, 64), codec="none")
    m = table[:4096].mean(axis=0)
    s = table[:4096].std(axis=0)
    doubles = oc.from_numpy(rng.standard_normal(n // 2), chunks=(CHUNK // 2,), codec="none")
    return {
        "W1c `(x*2+1)-x`, f32": (flat, lambda x: (x * 2 + 1) - x),
        "W6 `(x - m) / s`, f32 (N, 64)": (wide, lambda x: (x - m) / s),
        "`tanh(x)*2`, f32": (flat, lambda x: np.tanh(x) * 2),
        "`((x*1.5+0.5)*x-2)*x`, f64": (doubles, lambda x: ((x * 1.5 + 0.5) * x - 2) * x),
    }


def _choose(fused: bool) -> None:
    """Fuse every expression numexpr can compute (not only where it is chosen), or none."""
    _fuse.ENABLED = fused
    _fuse._worth_fusing = (lambda expr, min_operations: True) if fused else _CHOSEN


_CHOSEN = _fuse._worth_fusing


def _side(array: oc.ChunkedArray, build: Callable[[Any], Any], fused: bool) -> Callable[[], float]:
    def side() -> float:
        _choose(fused)
        with oc.Manager(max_bytes="1G"):
            start = clock()
            for _ in range(ITERATIONS):
                build(array).sum(progress=False)
            return clock() - start

    return side


def run(quick: bool = False) -> Result:
    default, slabs = _fuse.ENABLED, _slabs.ENABLED
    _slabs.ENABLED = False
    expressions = _expressions(QUICK_ELEMENTS if quick else ELEMENTS)
    rows = []
    detail = []
    try:
        for name, (array, build) in expressions.items():
            sides = {"numexpr": _side(array, build, True), "numpy": _side(array, build, False)}
            with oc.Manager(max_bytes="1G"):
                _choose(True)
                if _fuse.kernel_for(build(array)) is None:
                    raise RuntimeError(f"FUSE {name}: numexpr cannot compute it")
                fused = float(build(array).sum(progress=False))
                _choose(False)
                plain = float(build(array).sum(progress=False))
            if not np.isclose(fused, plain, rtol=1e-4, atol=1e-3 * np.sqrt(array.size)):
                raise RuntimeError(f"FUSE {name}: numexpr gives {fused}, NumPy {plain}")
            times = interleave(sides, rounds=3 if quick else 5, warmup=1)
            per = {k: statistics.median(v) / ITERATIONS for k, v in times.items()}
            rows.append(
                Row(
                    "FUSE",
                    f"{name}, sum of {array.size >> 20}M elements: numexpr vs NumPy in a workspace",
                    per["numexpr"],
                    "NumPy ufuncs, cyclic workspace",
                    per["numpy"],
                    Ratio.paired(times["numexpr"], times["numpy"]),
                )
            )
            detail.append([name, format_seconds(per["numexpr"]), format_seconds(per["numpy"])])
    finally:
        _fuse.ENABLED, _slabs.ENABLED = default, slabs
        _fuse._worth_fusing = _CHOSEN
        for array, _ in expressions.values():
            array.close()
    table = Table(
        "FUSE per-pass time (median of the rounds)", ("expression", "numexpr", "NumPy"), detail
    )
    return Result(rows, [table], [])
