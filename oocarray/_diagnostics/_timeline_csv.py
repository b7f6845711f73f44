"""A memory timeline as flat rows (a column per byte count and per named manager) and as a
CSV file: what :meth:`MemoryMonitor.to_csv <oocarray.MemoryMonitor.to_csv>` writes and
:meth:`MemoryMonitor.from_csv <oocarray.MemoryMonitor.from_csv>` reads back."""

from __future__ import annotations

import csv
import os
from collections.abc import Sequence
from types import MappingProxyType

from oocarray._diagnostics._samples import MemorySample

__all__ = ["FIXED_COLUMNS", "read_samples", "timeline_rows", "write_rows"]

FIXED_COLUMNS = (
    "time_s",
    "rss_anon_bytes",
    "rss_shmem_bytes",
    "rss_file_bytes",
    "managed_bytes",
    "ram_bytes",
    "mmap_bytes",
    "spilled_bytes",
    "spill_file_bytes",
)
_MANAGER_COLUMN = "ram_bytes[{}]"


def timeline_rows(
    samples: Sequence[MemorySample], names: Sequence[str]
) -> list[dict[str, float | int | None]]:
    """One row per sample: ``time_s``, the byte counts, and ``ram_bytes[<name>]`` for each of
    ``names`` (``None`` where that manager was not open at the sample)."""
    out = []
    for s in samples:
        row: dict[str, float | int | None] = {k: getattr(s, k) for k in FIXED_COLUMNS}
        for name in names:
            row[_MANAGER_COLUMN.format(name)] = s.managers.get(name)
        out.append(row)
    return out


def write_rows(rows: list[dict[str, float | int | None]], path: str | os.PathLike[str]) -> None:
    """Write ``rows`` (of :func:`timeline_rows`) to a CSV file: a header, then one line per
    row; with no rows, the header of the fixed columns alone."""
    columns = list(rows[0]) if rows else list(FIXED_COLUMNS)
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)


def read_samples(path: str | os.PathLike[str]) -> list[MemorySample]:
    """The samples of a CSV file that :func:`write_rows` wrote; ValueError when the file lacks
    the fixed columns."""
    samples = []
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        missing = set(FIXED_COLUMNS) - set(reader.fieldnames or ())
        if missing:
            raise ValueError(
                f"{os.fspath(path)!r} is not a MemoryMonitor CSV file: columns "
                f"{sorted(missing)} are missing"
            )
        for row in reader:
            managers = {
                key[len("ram_bytes[") : -1]: int(value)
                for key, value in row.items()
                if key.startswith("ram_bytes[") and key.endswith("]") and value != ""
            }
            samples.append(
                MemorySample(
                    time_s=float(row["time_s"]),
                    **{k: int(row[k]) for k in FIXED_COLUMNS[1:]},
                    managers=MappingProxyType(managers),
                )
            )
    return samples
