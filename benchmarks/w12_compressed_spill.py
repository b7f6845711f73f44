"""W12: compressed spill (``spill="zarr"``) of two live arrays vs W3's raw spill (``"mmap"``).

Both sides: inside ``oc.Manager(spill=...)`` two live arrays of 1 GiB each (128 MiB each with
``--quick``) are filled (untimed) with the same bytes: int64 ids (``np.arange``) and float32
measurements rounded to two decimals (``np.round(signal + noise, 2)``, a sine plus Gaussian
noise).  Timed: ``oc.spill(ids); oc.spill(floats)``.  ``"zarr"`` encodes 1 MiB units (byte
shuffle by 8 + zstd level 1) on every core into an unnamed file and ``fdatasync``s it; ``"mmap"``
writes the raw pages to a file, ``fdatasync``s it and maps it over the array.  Disk bytes are
the manager's ``compressed_disk_bytes`` (zarr) and the arrays' bytes (mmap: the files are the
arrays' size).  Afterwards (untimed) every byte is compared with the source (the pages come
back on touch) and the time of that full read-back is reported.

Target (PERFORMANCE.md): time <= 1.0x the raw spill; disk bytes <= 1/20 on the ids and <= 0.8x
on the floats; data identical after the pages come back.
"""

from __future__ import annotations

import statistics

import numpy as np

import oocarray as oc
from benchmarks._disk import fs_description, scratch_spill_dir
from benchmarks._harness import Peer, Sides
from benchmarks._timing import (
    Result,
    Row,
    TextRow,
    clock,
    format_bytes,
    format_mib,
    format_seconds,
)

MiB = 1 << 20
GiB = 1 << 30
FULL_BYTES = GiB
QUICK_BYTES = 128 * MiB
TARGET = 1.0


def make_sources(nbytes: int) -> tuple[np.ndarray, np.ndarray]:
    """The ids and the rounded float32 measurements, each ``nbytes`` (plain NumPy)."""
    ids = np.arange(nbytes // 8, dtype=np.int64)
    n = nbytes // 4
    floats = np.empty(n, np.float32)
    rng = np.random.default_rng(20261122)
    step = 16 * MiB
    for start in range(0, n, step):
        t = np.arange(start, min(start + step, n), dtype=np.float32) * np.float32(1e-5)
        part = 50 + 10 * np.sin(t) + rng.normal(0, 1, t.size).astype(np.float32)
        floats[start : start + t.size] = np.round(part, 2)
    return ids, floats


def run(quick: bool = False) -> Result:
    with scratch_spill_dir("oocarray-w12-") as directory:
        return _run_in(directory, quick)


def _run_in(directory: str, quick: bool) -> Result:
    nbytes = QUICK_BYTES if quick else FULL_BYTES
    rounds = 1 if quick else 3
    src_ids, src_floats = make_sources(nbytes)
    disk: dict[str, list[tuple[int, int]]] = {"zarr": [], "mmap": []}
    identical: dict[str, list[bool]] = {"zarr": [], "mmap": []}
    readback: dict[str, list[float]] = {"zarr": [], "mmap": []}
    notes: list[str] = []

    def side(policy: str) -> tuple[float, object]:
        with oc.Manager(f"w12-{policy}", spill=policy) as m:  # type: ignore[arg-type]
            ids = np.empty_like(src_ids)
            floats = np.empty_like(src_floats)
            ids[...] = src_ids
            floats[...] = src_floats
            start = clock()
            oc.spill(ids)
            d_ids = m.stats().compressed_disk_bytes
            oc.spill(floats)
            seconds = clock() - start
            d_floats = m.stats().compressed_disk_bytes - d_ids
            if policy == "mmap":
                d_ids, d_floats = ids.nbytes, floats.nbytes
            disk[policy].append((d_ids, d_floats))
            where = (oc.location(ids), oc.location(floats))
            start = clock()
            same = bool(np.array_equal(ids, src_ids)) and bool(
                np.array_equal(floats.view(np.uint32), src_floats.view(np.uint32))
            )
            readback[policy].append(clock() - start)
            identical[policy].append(same and where == (policy, policy))
            del ids, floats
        return seconds, None

    sides = Sides.discover(
        "W12",
        {
            "zarr": Peer('`spill="zarr"`', lambda: lambda: side("zarr")),
            "mmap": Peer('raw spill (`spill="mmap"`, W3)', lambda: lambda: side("mmap")),
        },
    )
    timings = sides.time(rounds)
    ids_ratio = statistics.median(d[0] for d in disk["zarr"]) / nbytes
    floats_ratio = statistics.median(d[1] for d in disk["zarr"]) / nbytes
    fs = fs_description(directory)
    size = format_bytes(nbytes)
    ok = all(identical["zarr"]) and all(identical["mmap"])
    rows: list[Row | TextRow] = [
        timings.row(
            f"`oc.spill` of two {size} live arrays (int64 ids, rounded float32), "
            f'with `spill="zarr"` to {fs}',
            "zarr",
            "mmap",
            TARGET,
        ),
        TextRow(
            "W12",
            "disk bytes, ids / floats, of the arrays' bytes",
            f"{ids_ratio:.4f} / {floats_ratio:.3f}",
            "1 / 1 (raw)",
            f"{1 / ids_ratio:.0f}x / {1 / floats_ratio:.2f}x smaller",
            "<= 1/20 / <= 0.8",
            "yes" if ids_ratio <= 1 / 20 and floats_ratio <= 0.8 else "**no**",
        ),
    ]

    def median_mib(policy: str, which: int) -> str:
        return format_mib(int(statistics.median(d[which] for d in disk[policy])))

    detail = timings.by_side(
        f"Compressed spill (W12): two {size} arrays, medians; spill directory on {fs}; "
        "GB/s of both arrays",
        2 * nbytes,
        {
            "disk ids": lambda p: median_mib(p, 0),
            "disk floats": lambda p: median_mib(p, 1),
            "read back every byte (untimed)": lambda p: format_seconds(
                statistics.median(readback[p])
            ),
            "data identical": lambda p: f"{sum(identical[p])}/{len(identical[p])}",
        },
    )
    if not ok:
        notes.append("W12: DATA MISMATCH after the pages came back")
    return Result(rows=rows, tables=[detail], notes=notes)


if __name__ == "__main__":
    import sys

    result = run("--quick" in sys.argv)
    for table in result.tables:
        print(table.render())
    for row in result.rows:
        print(row.cells())
    for note in result.notes:
        print(note)
