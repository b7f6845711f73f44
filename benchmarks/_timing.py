"""Shared timing helpers: interleaved rounds, robust summaries and markdown tables.

A *side* is a callable that does one repeat of a workload and returns the seconds its timed
part took, so each side can do its own untimed setup (entering a manager, setting the region
threshold) around the part that is measured.  :func:`interleave` runs all sides once per round,
rotating their order each round so that no side always runs first or last, and returns the
per-round times; ratios are then taken round by round (paired), which cancels most of the drift
of a shared, noisy machine.
"""

from __future__ import annotations

import gc
import math
import statistics
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

Side = Callable[[], float]


@contextmanager
def gc_paused() -> Iterator[None]:
    """Disable the cyclic garbage collector for the block (as :mod:`timeit` does)."""
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def clock() -> float:
    """The clock every side uses."""
    return time.perf_counter()


def interleave(
    sides: Mapping[str, Side],
    rounds: int,
    warmup: int = 1,
    before_each: Callable[[], object] | None = None,
) -> dict[str, list[float]]:
    """Run every side once per round, rotating the order; return seconds per round per side.

    ``before_each`` runs (untimed) before every timed run of a side: a cold-cache round evicts
    the workload's files there."""
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    names = list(sides)
    times: dict[str, list[float]] = {name: [] for name in names}
    with gc_paused():
        for _ in range(warmup):
            for name in names:
                sides[name]()
        for r in range(rounds):
            shift = r % len(names)
            for name in names[shift:] + names[:shift]:
                if before_each is not None:
                    before_each()
                times[name].append(sides[name]())
    return times


def quantile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile ``q`` in [0, 1] of a non-empty sequence."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lo = math.floor(pos)
    hi = math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@dataclass(frozen=True, slots=True)
class Ratio:
    """Per-round ratios of two sides: median with the interquartile range."""

    median: float
    q25: float
    q75: float

    @classmethod
    def paired(cls, numerator: Sequence[float], denominator: Sequence[float]) -> Ratio:
        ratios = [a / b for a, b in zip(numerator, denominator, strict=True)]
        return cls(statistics.median(ratios), quantile(ratios, 0.25), quantile(ratios, 0.75))

    def __str__(self) -> str:
        return f"{self.median:.2f}x [{self.q25:.2f}-{self.q75:.2f}]"


def per_op(times: Sequence[float], ops: int) -> float:
    """Median seconds per operation."""
    return statistics.median(times) / ops


def format_seconds(seconds: float) -> str:
    """A time with a unit that keeps three significant digits readable."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def format_bytes(nbytes: int) -> str:
    """Sizes of the sweep: ``16 KiB``, ``4 MiB``."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def format_mib(nbytes: int) -> str:
    """A resident-memory figure: ``272.0 MiB`` (``1.02 GiB`` from 1 GiB)."""
    if nbytes >= 1 << 30:
        return f"{nbytes / (1 << 30):.2f} GiB"
    return f"{nbytes / (1 << 20):.1f} MiB"


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub markdown table."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class Row:
    """One line of the main table; times are seconds per operation, the ratio oocarray/peer."""

    id: str
    workload: str
    oocarray_s: float
    peer: str
    peer_s: float | None
    ratio: Ratio | None
    target: float | None = None

    def cells(self) -> list[str]:
        peer = "missing" if self.peer_s is None else f"{format_seconds(self.peer_s)} ({self.peer})"
        ratio = "—" if self.ratio is None else str(self.ratio)
        if self.target is None or self.ratio is None:
            target, met = "—", "n/a"
        else:
            target = f"<= {self.target:.2f}x"
            met = "yes" if self.ratio.median <= self.target else "**no**"
        return [self.id, self.workload, format_seconds(self.oocarray_s), peer, ratio, target, met]


@dataclass(frozen=True, slots=True)
class TextRow:
    """A line of the main table whose cells are not times (W4 reports resident memory)."""

    id: str
    workload: str
    oocarray: str
    peer: str
    ratio: str
    target: str
    met: str

    def cells(self) -> list[str]:
        return [self.id, self.workload, self.oocarray, self.peer, self.ratio, self.target, self.met]


ROW_HEADERS = ("id", "workload", "oocarray", "peer", "ratio", "target", "met?")


@dataclass(frozen=True, slots=True)
class Table:
    """An extra table a benchmark prints after the main one."""

    title: str
    headers: tuple[str, ...]
    rows: list[list[str]]

    def render(self) -> str:
        return f"{self.title}\n\n{markdown_table(self.headers, self.rows)}"


@dataclass(frozen=True, slots=True)
class Result:
    """What one benchmark contributes: rows of the main table and extra tables."""

    rows: Sequence[Row | TextRow]
    tables: list[Table]
    notes: Sequence[str] = ()

    def render(self) -> str:
        """The main table's rows, the extra tables and the notes, as Markdown."""
        sections = []
        if self.rows:
            sections.append(markdown_table(ROW_HEADERS, [row.cells() for row in self.rows]))
        sections += [table.render() for table in self.tables]
        if self.notes:
            sections.append("\n".join(f"- {note}" for note in self.notes))
        return "\n\n".join(sections)
