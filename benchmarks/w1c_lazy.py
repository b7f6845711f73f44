"""W1c: W1's cyclic step as a lazy chunked expression, against W1's ``out=`` floor.

``x`` is float32 with 16M elements (64 MiB; ``--quick``: 4M), the same values as W1.  One
iteration of the floor is W1's hand-written step into preallocated buffers
(``np.multiply(x, 2, out=y); np.add(y, 1, out=y); np.subtract(y, x, out=z); z.sum()``, see
:mod:`benchmarks.w1_workspace`).  The lazy sides evaluate ``((x*2+1)-x).sum()`` over a chunked
``x`` (chunks of 1M elements, 4 MiB), block by block on every core, each block in slabs that
stay in the caches (``oocarray/_compute/_slabs.py``: x read once, one reused temporary):

- ``oc.from_numpy(x, codec="none")`` (oocarray's temporary store, uncompressed);
- an uncompressed zarr made by ``oc.create(..., codec="none")`` in a scratch directory;
- the peer, blosc2's lazy expression (when blosc2 is importable): the same expression over
  ``blosc2.asarray(x, chunks=(1M,), cparams={"clevel": 0})`` (in memory, uncompressed, as
  ``from_numpy``'s; blosc2 picks its blocks inside the chunks and evaluates them on its own
  threads, one per core).

Its files are read once before timing (warm page cache); the lazy sides therefore read their
input from the page cache while the floor reads it from RAM it already holds.  Targets
(PERFORMANCE.md, issue 27): the lazy expression <= 1.0x the floor, and ahead of blosc2
(<= 1.0x).  Every side's sum is checked.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile

import numpy as np

import oocarray as oc
from benchmarks import _compute_data as cd
from benchmarks._timing import Ratio, Result, Row, Table, clock, format_seconds, interleave
from benchmarks.w1_workspace import _floor

ELEMENTS = 16 << 20
QUICK_ELEMENTS = 4 << 20
CHUNK = 1 << 20
ITERATIONS = 10
TARGET = 1.0


def run(quick: bool = False) -> Result:
    directory = tempfile.mkdtemp(prefix="oocarray-w1c-")
    try:
        return _run_in(directory, quick)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _run_in(directory: str, quick: bool) -> Result:
    n = QUICK_ELEMENTS if quick else ELEMENTS
    x = np.random.default_rng(1).standard_normal(n, dtype=np.float32)
    y = np.empty_like(x)
    z = np.empty_like(x)
    mem = oc.from_numpy(x, chunks=(CHUNK,), codec="none")
    path = f"{directory}/x.zarr"
    disk = oc.create(path, x.shape, x.dtype, chunks=(CHUNK,), codec="none")
    disk[:] = x
    cd.warm(path)
    expected = float(np.sum(x.astype(np.float64) * 2 + 1 - x))

    def floor() -> float:
        start = clock()
        for _ in range(ITERATIONS):
            s = _floor(x, y, z)
        seconds = clock() - start
        _close(float(s), expected, "floor")
        return seconds

    def lazy(array: oc.ChunkedArray, name: str):  # type: ignore[no-untyped-def]
        def side() -> float:
            start = clock()
            for _ in range(ITERATIONS):
                s = ((array * 2 + 1) - array).sum(progress=False)
            seconds = clock() - start
            _close(float(s), expected, name)
            return seconds

        return side

    sides = {
        "floor": floor,
        "from_numpy": lazy(mem, "from_numpy"),
        "zarr": lazy(disk, "zarr"),
    }
    notes = []
    try:
        import blosc2
    except ImportError as error:
        notes.append(f"W1c: blosc2 is not installed ({error}): its side is missing.")
    else:
        b2 = blosc2.asarray(x, chunks=(CHUNK,), cparams={"clevel": 0})

        def blosc2_side() -> float:
            start = clock()
            for _ in range(ITERATIONS):
                s = ((b2 * 2 + 1) - b2).sum()
            seconds = clock() - start
            _close(float(s), expected, "blosc2")
            return seconds

        sides["blosc2"] = blosc2_side
    rounds = 3 if quick else 7
    times = interleave(sides, rounds=rounds, warmup=1)
    per = {k: statistics.median(v) / ITERATIONS for k, v in times.items()}
    what = f"`((x*2+1)-x).sum()` lazy, x f32 {n >> 20}M in {CHUNK >> 20}M-element chunks"
    rows = [
        Row(
            "W1c",
            f"{what}, `oc.from_numpy(codec='none')`: vs the W1 `out=` floor",
            per["from_numpy"],
            "`out=` buffers",
            per["floor"],
            Ratio.paired(times["from_numpy"], times["floor"]),
            TARGET,
        ),
        Row(
            "W1c",
            f"{what}, zarr codec none (page cache): vs the W1 `out=` floor",
            per["zarr"],
            "`out=` buffers",
            per["floor"],
            Ratio.paired(times["zarr"], times["floor"]),
            TARGET,
        ),
    ]
    if "blosc2" in sides:
        rows.append(
            Row(
                "W1c",
                f"{what}, `oc.from_numpy(codec='none')`: vs blosc2 {cd.version('blosc2')} "
                "lazy expression, in memory, uncompressed (ahead of it)",
                per["from_numpy"],
                "blosc2 lazy expr",
                per["blosc2"],
                Ratio.paired(times["from_numpy"], times["blosc2"]),
                TARGET,
            )
        )
    detail = Table(
        f"W1c per-iteration time by side ({rounds} rounds of {ITERATIONS} iterations)",
        ("side", "median", "min", "max"),
        [
            [
                k,
                format_seconds(per[k]),
                format_seconds(min(v) / ITERATIONS),
                format_seconds(max(v) / ITERATIONS),
            ]
            for k, v in times.items()
        ],
    )
    mem.close()
    disk.close()
    return Result(rows, [detail], notes)


def _close(got: float, expected: float, who: str) -> None:
    if not np.isclose(got, expected, rtol=1e-4, atol=1e-2 * np.sqrt(ELEMENTS)):
        raise RuntimeError(f"W1c {who}: sum {got}, expected {expected}")
