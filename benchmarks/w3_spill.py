"""W3: spill a 2 GiB live array to disk and release its RAM.

oocarray side: inside ``oc.Manager()`` a 2 GiB ``uint64`` array is allocated and filled with
non-trivial data (a random 16 MiB pattern, XOR-ed with a different key for every 16 MiB
chunk); only ``oc.spill(a)`` is timed.  That call writes the data to a fresh temporary file,
waits for it with ``fdatasync``, maps the file over the same addresses and drops the anonymous
pages.  Afterwards (untimed) ``oc.unspill(a)`` brings it back and a CRC-32 of the bytes is
compared with the one taken before the spill.

Peer: the same bytes, in a plain NumPy array filled the same way, written to a fresh file in
the same directory with ``os.open`` + ``os.write`` (looped) + ``os.fdatasync`` + ``os.close``;
all four are timed.  The file is deleted afterwards (untimed).

Both sides write a fresh file every repeat, so neither reads back nor rewrites pages that are
already in the page cache.  The spill directory is a fresh temporary directory on the same
file system (``oc.configure(spill_dir=...)``).  Target (PERFORMANCE.md): at most 1.25x.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import zlib
from dataclasses import dataclass

import numpy as np

import oocarray as oc
from benchmarks._disk import COMFORTABLE_FREE_BYTES, free_bytes, fs_description, scratch_spill_dir
from benchmarks._timing import (
    Ratio,
    Result,
    Row,
    Table,
    clock,
    format_bytes,
    format_mib,
    format_seconds,
    interleave,
)
from oocarray import _native
from oocarray._memory._physical import ResidentMemory, resident_memory

TARGET = 1.25
MiB = 1 << 20
GiB = 1 << 30
FULL_BYTES = 2 * GiB
QUICK_BYTES = 256 * MiB
MIN_BYTES = 64 * MiB
CHUNK_ELEMENTS = 2 * MiB  # 16 MiB of uint64 per chunk of the fill pattern
GOLDEN = 0x9E3779B97F4A7C15


def _pattern() -> np.ndarray:
    return np.random.default_rng(20261122).integers(
        0, np.iinfo(np.uint64).max, CHUNK_ELEMENTS, dtype=np.uint64, endpoint=True
    )


def _fill(a: np.ndarray, pattern: np.ndarray) -> None:
    """Chunk ``j`` of ``a`` becomes ``pattern ^ (j * GOLDEN)``: no temporaries, no repeats."""
    for j, start in enumerate(range(0, a.size, CHUNK_ELEMENTS)):
        part = a[start : start + CHUNK_ELEMENTS]
        np.bitwise_xor(pattern[: part.size], np.uint64((j * GOLDEN) % (1 << 64)), out=part)


def _crc(a: np.ndarray) -> int:
    return zlib.crc32(a.data.cast("B"))


def _size_for(directory: str) -> tuple[int, str]:
    """The array size, scaled down (with a note) when the disk or RAM is short."""
    free = free_bytes(directory)
    available = _mem_available()
    size = FULL_BYTES
    reasons = []
    if free < COMFORTABLE_FREE_BYTES:
        size = min(size, free // 8)
        reasons.append(f"only {format_mib(free)} free disk")
    if available is not None and available < 4 * size:
        size = min(size, available // 4)
        reasons.append(f"only {format_mib(available)} MemAvailable")
    size = size // MiB * MiB
    if size < MIN_BYTES:
        raise RuntimeError(f"W3: not enough room for a {format_bytes(MIN_BYTES)} spill: {reasons}")
    if size < FULL_BYTES:
        size = 1 << (size.bit_length() - 1)  # a power of two, so the sizes stay comparable
        return size, f"scaled down from 2 GiB to {format_bytes(size)}: {'; '.join(reasons)}"
    return size, ""


def _mem_available() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


@dataclass(frozen=True, slots=True)
class _SpillRecord:
    seconds: float
    unspill_seconds: float
    before: ResidentMemory
    after: ResidentMemory
    back: ResidentMemory
    identical: bool


def _write_file(path: str, data: memoryview) -> float:
    """Seconds to create ``path`` and write ``data`` with os.write + os.fdatasync."""
    start = clock()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        done = 0
        while done < len(data):
            done += os.write(fd, data[done:])
        os.fdatasync(fd)
    finally:
        os.close(fd)
    return clock() - start


def run(quick: bool = False) -> Result:
    with scratch_spill_dir("oocarray-w3-") as directory:
        return _run_in(directory, quick)


def _run_in(directory: str, quick: bool) -> Result:
    size, note = _size_for(directory)
    if quick:
        size = min(size, QUICK_BYTES)
    elements = size // 8
    rounds = 1 if quick else 7
    warmup = 0 if quick else 1
    pattern = _pattern()
    reference = np.empty(elements, np.uint64)
    _fill(reference, pattern)
    expected_crc = _crc(reference)
    del reference

    records: list[_SpillRecord] = []
    peer_ok: list[bool] = []
    counter = [0]

    def spilled() -> float:
        with oc.Manager("w3"):
            a = np.empty(elements, np.uint64)
            info = _native.block_info(a)
            if info is None or not info[3] & _native.FLAG_REGION:
                raise RuntimeError("W3: the managed array is not a region; spill would not move it")
            _fill(a, pattern)
            crc_before = _crc(a)
            before = resident_memory()
            start = clock()
            moved = oc.spill(a)
            seconds = clock() - start
            after = resident_memory()
            on_disk = oc.location(a) == "mmap"
            start = clock()
            oc.unspill(a)
            unspill_seconds = clock() - start
            back = resident_memory()
            identical = moved == size and on_disk and crc_before == expected_crc == _crc(a)
            records.append(_SpillRecord(seconds, unspill_seconds, before, after, back, identical))
            del a
        return seconds

    def written() -> float:
        src = np.empty(elements, np.uint64)
        if _native.block_info(src) is not None:
            raise RuntimeError("W3: the peer's array came from oocarray; a manager is active")
        _fill(src, pattern)
        peer_ok.append(_crc(src) == expected_crc)
        counter[0] += 1
        path = os.path.join(directory, f"peer-{counter[0]}.bin")
        try:
            seconds = _write_file(path, src.data.cast("B"))
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        del src
        return seconds

    times = interleave({"oocarray": spilled, "peer": written}, rounds=rounds, warmup=warmup)
    records = records[warmup:]
    peer_ok = peer_ok[warmup:]
    spill_s = statistics.median(times["oocarray"])
    peer_s = statistics.median(times["peer"])
    identical = sum(r.identical for r in records)
    fs = fs_description(directory)

    def med(values: list[int]) -> str:
        return format_mib(int(statistics.median(values)))

    row = Row(
        id="W3",
        workload=(
            f"`oc.spill(a)` of a {format_bytes(size)} live array from `Manager()` to {fs}, "
            "RAM released"
        ),
        oocarray_s=spill_s,
        peer="`os.write` + `fdatasync`",
        peer_s=peer_s,
        ratio=Ratio.paired(times["oocarray"], times["peer"]),
        target=TARGET,
    )
    detail = Table(
        title=(
            f"Spill (W3): {format_bytes(size)} `uint64`, {len(records)} repeats per side after "
            f"{warmup} warm-up, medians; spill directory on {fs}"
        ),
        headers=(
            "oc.spill",
            "os.write + fdatasync",
            "spill GiB/s",
            "write GiB/s",
            "oc.unspill (not compared)",
            "RssAnon before spill",
            "RssAnon after spill",
            "RssAnon after unspill",
            "RssFile after spill",
            "data identical after unspill",
        ),
        rows=[
            [
                format_seconds(spill_s),
                format_seconds(peer_s),
                f"{size / GiB / spill_s:.2f}",
                f"{size / GiB / peer_s:.2f}",
                format_seconds(statistics.median(r.unspill_seconds for r in records)),
                med([r.before.anon_bytes for r in records]),
                med([r.after.anon_bytes for r in records]),
                med([r.back.anon_bytes for r in records]),
                med([r.after.file_bytes for r in records]),
                f"{identical}/{len(records)} (CRC-32; peer bytes same: "
                f"{sum(peer_ok)}/{len(peer_ok)})",
            ]
        ],
    )
    notes = [f"W3 {note}"] if note else []
    if identical != len(records):
        notes.append(f"W3: DATA MISMATCH after unspill in {len(records) - identical} repeat(s)")
    return Result(rows=[row], tables=[detail], notes=notes)
