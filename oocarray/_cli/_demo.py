"""``oocarray demo``: the main job, on data several times larger than a RAM budget.

Under ``oc.Manager("demo", max_bytes=budget)`` it generates a regression table (1.5 GiB by
default, six times the 256 MiB budget), then

1. computes the mean, std, min and max of every column in one streaming pass (``oc.compute``),
2. writes a normalised copy with one fused expression (``to_zarr``, lz4),
3. trains a linear model by SGD on batches from ``oc.batches(shuffle="chunks")``, each step a
   cycle of an ``oc.Workspace``,
4. reports the time, the peak NumPy memory (the manager's count) and the peak resident memory
   of each step (sampled anonymous + shared memory, and the kernel's VmHWM) against the budget.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import textwrap
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

import oocarray as oc
from oocarray._cli._args import Parser, UsageError, size_argument
from oocarray._cli._demo_data import FEATURES, ROW_BYTES, DemoData
from oocarray._cli._output import format_bytes, format_number, table
from oocarray._cli._resident import ResidentSampler, reset_peak
from oocarray._compute._progress import progress_bar
from oocarray._memory._physical import ResidentMemory, resident_memory

__all__ = ["DemoPlan", "add_parser"]

_PROG = "oocarray demo"
MIN_BUDGET_BYTES = 16 << 20
MIN_SIZE_BYTES = 1 << 20
_CHUNK_ROWS_MAX = 32_768  # 4 MiB chunks
_BATCH_ROWS_MAX = 8_192  # 1 MiB batches
_CHECKPOINTS_PER_EPOCH = 5


def add_parser(commands: argparse._SubParsersAction[Parser]) -> None:
    """Register ``demo`` on the command line."""
    parser = commands.add_parser(
        "demo",
        help="the main job on data several times larger than a RAM budget (about a minute)",
        description="Generate a table several times larger than a RAM budget, then, under "
        "that budget: statistics of every column out of core, a normalised copy written by "
        "one fused expression, and a model trained on shuffled batches in a workspace; "
        "finishes with the time and the peak memory of each step against the budget.",
    )
    parser.add_argument(
        "--size",
        type=size_argument,
        default=size_argument("1.5G"),
        metavar="SIZE",
        help="size of the generated data (default 1.5G)",
    )
    parser.add_argument(
        "--max-ram",
        "--budget",
        dest="max_ram",
        type=size_argument,
        default=size_argument("256M"),
        metavar="SIZE",
        help="RAM budget of the manager everything runs in (default 256M)",
    )
    parser.add_argument(
        "--keep",
        metavar="DIR",
        help="write the data to DIR and keep it (default: a temporary directory, removed); "
        "raw.zarr and normalised.zarr of an earlier demo in DIR are replaced",
    )
    parser.add_argument(
        "--epochs", type=int, default=2, metavar="N", help="training epochs (default 2)"
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.set_defaults(run=run)


@dataclass(frozen=True)
class DemoPlan:
    """The demo's sizes for a budget and a data size.

    Chunks are a 64th of the budget (at most 4 MiB): the shuffle holds a window of 8
    chunks, an eighth of the budget.

    Examples
    --------
    >>> plan = DemoPlan.make(256 << 20, 3 << 29)
    >>> plan.chunk_rows, plan.batch_rows, plan.data.n_rows
    (32768, 8192, 12582912)
    """

    budget_bytes: int
    data: DemoData
    chunk_rows: int
    batch_rows: int

    @classmethod
    def make(cls, budget_bytes: int, size_bytes: int) -> DemoPlan:
        chunk_rows = 1 << max(0, (budget_bytes // 64 // ROW_BYTES).bit_length() - 1)
        chunk_rows = max(256, min(_CHUNK_ROWS_MAX, chunk_rows))
        data = DemoData(DemoData.rows_for(size_bytes, chunk_rows), chunk_rows)
        return cls(budget_bytes, data, chunk_rows, min(_BATCH_ROWS_MAX, chunk_rows))

    @property
    def disk_bytes(self) -> int:
        """What the two arrays may take on disk (lz4 keeps about 90% of these values)."""
        return 2 * self.data.nbytes + (64 << 20)


@dataclass
class StepRecord:
    name: str
    seconds: float
    managed_peak_bytes: int
    resident_peak_bytes: int


def run(args: argparse.Namespace) -> int:
    """Run the demo."""
    if args.max_ram < MIN_BUDGET_BYTES:
        raise UsageError(
            f"--max-ram must be at least {format_bytes(MIN_BUDGET_BYTES)} for the demo, got "
            f"{format_bytes(args.max_ram)}; try --max-ram 256M",
            _PROG,
        )
    if args.size < MIN_SIZE_BYTES:
        raise UsageError(f"--size must be at least {format_bytes(MIN_SIZE_BYTES)}", _PROG)
    if args.epochs < 1:
        raise UsageError(f"--epochs must be at least 1, got {args.epochs}", _PROG)
    plan = DemoPlan.make(args.max_ram, args.size)
    if args.keep is not None:
        os.makedirs(args.keep, exist_ok=True)
        workdir = args.keep
    else:
        workdir = tempfile.mkdtemp(prefix="oocarray-demo-")
    try:
        _check_disk(workdir, plan)
        return _run_demo(plan, workdir, args)
    finally:
        if args.keep is None:
            shutil.rmtree(workdir, ignore_errors=True)


def _check_disk(workdir: str, plan: DemoPlan) -> None:
    disk = os.statvfs(workdir)
    free = disk.f_bavail * disk.f_frsize
    if free < plan.disk_bytes:
        raise OSError(
            f"the demo writes up to {format_bytes(plan.disk_bytes)} to {workdir}, which has "
            f"{format_bytes(free)} free: give a smaller --size, or --keep DIR on a larger disk"
        )


def _run_demo(plan: DemoPlan, workdir: str, args: argparse.Namespace) -> int:
    progress = not args.no_progress
    data = plan.data
    budget = plan.budget_bytes
    raw_path = os.path.join(workdir, "raw.zarr")
    normalised_path = os.path.join(workdir, "normalised.zarr")
    ratio = data.nbytes / budget
    print(
        f"oocarray {oc.__version__} demo: {format_bytes(data.nbytes)} of data, {ratio:.1f}x "
        f"a RAM budget of {format_bytes(budget)}.\n"
        f'Everything runs in oc.Manager("demo", max_bytes="{_size_text(budget)}").'
    )
    where = "kept" if args.keep is not None else "a temporary directory, removed at the end"
    print(f"Data in {workdir} ({where}).\n", flush=True)
    records: list[StepRecord] = []
    peak_reset = reset_peak()
    at_start = resident_memory()
    start = time.perf_counter()
    with ResidentSampler() as sampler, oc.Manager("demo", max_bytes=budget) as demo:

        def step(name: str) -> _Step:
            return _Step(name, demo, sampler, records)

        # 1. Generate the data, block by block, in parallel.
        with step("generate") as generating:
            raw: Any = _generate(data, raw_path, generating, progress)  # with the lazy methods
            stored = raw.stored_bytes()
        print(
            f"1. generate    {data.n_rows:,} rows x {FEATURES + 1} float32 columns ({FEATURES} "
            f"features on different scales, a target)\n"
            f"               -> raw.zarr: {format_bytes(data.nbytes)}, {format_bytes(stored)} "
            f"stored (lz4, chunks of {plan.chunk_rows:,} rows){_took(records)}",
            flush=True,
        )

        # 2. Statistics of every column, in one pass.
        with step("statistics"):
            mean, std, low, high = oc.compute(
                raw.mean(axis=0, compute=False),
                raw.std(axis=0, compute=False),
                raw.min(axis=0, compute=False),
                raw.max(axis=0, compute=False),
                progress=progress,
            )
        print(
            "2. statistics  mean, std, min and max of every column in one pass (oc.compute)"
            f"{_took(records)}"
        )
        print(_stats_table(mean, std, low, high), flush=True)

        # 3. A normalised copy: one fused expression, evaluated chunk by chunk.
        with step("normalise"):
            normalised = ((raw - mean) / std).astype(np.float32)
            copy = normalised.to_zarr(
                normalised_path, codec="lz4", chunks=raw.chunks, mode="w", progress=progress
            )
        print(
            "3. normalise   ((x - mean) / std).astype(float32), one fused pass (to_zarr)\n"
            f"               -> normalised.zarr: {format_bytes(copy.stored_bytes())} stored (lz4)"
            f"{_took(records)}",
            flush=True,
        )

        # 4. Train a linear model by SGD on shuffled batches, a workspace cycle per step.
        with step("train") as training:
            losses, weights = _train(copy, plan, args.epochs, training, progress)
        truth = data.true_weights(mean, std)
        error = float(np.abs(weights - truth).max())
        print(
            f"4. train       linear regression by SGD on batches of {plan.batch_rows:,} rows "
            'from oc.batches(shuffle="chunks"),\n'
            f"               each step a cycle of an oc.Workspace{_took(records)}"
        )
        for epoch, row in enumerate(losses, 1):
            print(f"               epoch {epoch} loss " + "  ".join(f"{v:.4f}" for v in row))
        print(
            f"               R^2 {1 - losses[-1][-1]:.4f}; the weights are within {error:.2g} "
            "of the true ones\n",
            flush=True,
        )
        raw.close()
        copy.close()
        managed_peak = demo.stats().peak_bytes
        report = _memory_report()
    total = time.perf_counter() - start
    _report(records, total, managed_peak, at_start, peak_reset, sampler.peak_bytes, plan)
    if report:
        print("\noc.memory_report() at the end, inside the demo's manager:\n" + report)
    if args.keep is not None:
        print(f"\nKept in {workdir}: raw.zarr, normalised.zarr (try oocarray info {raw_path})")
    return 0


def _memory_report() -> str:
    """``oc.memory_report()`` as text, where this version of oocarray has it."""
    report = getattr(oc, "memory_report", None)
    if report is None:
        return ""
    try:
        return str(report()).rstrip()
    except Exception:  # a diagnostic must never fail the demo
        return ""


class _Step:
    """Times a step and records its peaks: NumPy memory in a sub-manager, resident memory
    from the sampler."""

    def __init__(
        self,
        name: str,
        parent: oc.Manager,
        sampler: ResidentSampler,
        records: list[StepRecord],
    ) -> None:
        self.name = name
        self.manager = parent.sub(name)
        self.sampler = sampler
        self.records = records
        self.start = 0.0

    def __enter__(self) -> oc.Manager:
        self.sampler.step()
        self.start = time.perf_counter()
        return self.manager.__enter__()

    def __exit__(self, *exc: object) -> None:
        self.manager.__exit__(*exc)  # type: ignore[arg-type]
        seconds = time.perf_counter() - self.start
        self.records.append(
            StepRecord(self.name, seconds, self.manager.stats().peak_bytes, self.sampler.step())
        )


def _size_text(n: int) -> str:
    """``n`` bytes as ``oc.parse_size`` reads it: ``"256M"``, ``"2G"``, or a plain number."""
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def _took(records: list[StepRecord]) -> str:
    return f"  [{records[-1].seconds:.1f} s]"


def _generate(data: DemoData, path: str, manager: oc.Manager, progress: bool) -> oc.ChunkedArray:
    """Write the demo table with ``oc.from_batches``, blocks made ahead by a thread pool."""
    workers = max(1, min(4, os.cpu_count() or 1))

    def make(index: int) -> np.ndarray:
        with manager.activate():  # the pool's threads count against the budget too
            return data.block(index)

    def blocks(bar: Any) -> Iterator[np.ndarray]:
        with ThreadPoolExecutor(workers, thread_name_prefix="oocarray-demo") as pool:
            ahead: list[Future[np.ndarray]] = []
            for index in range(data.n_blocks):
                ahead.append(pool.submit(make, index))
                if len(ahead) > workers:
                    yield ahead.pop(0).result()
                    bar.update()
            for future in ahead:
                yield future.result()
                bar.update()

    with progress_bar(
        total=data.n_blocks, desc="generate", nbytes=data.nbytes, disable=not progress
    ) as bar:
        return oc.from_batches(
            blocks(bar),
            path,
            chunks=(data.block_rows, data.block(0).shape[1]),
            codec="lz4",
            mode="w",  # --keep DIR again replaces the demo's own arrays there (zarr only)
        )


def _stats_table(mean: np.ndarray, std: np.ndarray, low: np.ndarray, high: np.ndarray) -> str:
    shown = [0, 1, 2, len(mean) - 1]
    rows = [
        [
            "target" if j == len(mean) - 1 else f"x{j}",
            *(format_number(v[j]) for v in (mean, std, low, high)),
        ]
        for j in shown
    ]
    rows.insert(3, [f"({len(mean) - 4} more)", "", "", "", ""])
    return table(["column", "mean", "std", "min", "max"], rows, indent=15)


def _sgd_step(batch: np.ndarray, weights: np.ndarray, bias: np.ndarray, rate: float) -> float:
    """One step of SGD on the mean squared error; returns the batch's loss.  Every array it
    makes lives in the workspace cycle and is gone when it returns."""
    features = batch[:, :FEATURES]
    error = features @ weights
    error += bias[0] - batch[:, FEATURES]
    scale = np.float32(2 * rate / len(error))
    weights -= scale * (error @ features)
    bias -= scale * error.sum()
    return float(error @ error) / len(error)


def _train(
    x: oc.ChunkedArray, plan: DemoPlan, epochs: int, manager: oc.Manager, progress: bool
) -> tuple[list[list[float]], np.ndarray]:
    """Train; returns the mean loss of each fifth of each epoch, and the weights."""
    weights = manager.zeros(FEATURES, np.float32)
    bias = manager.zeros(1, np.float32)
    feed = oc.batches(x, plan.batch_rows, shuffle="chunks", seed=0)
    per_epoch = len(feed)
    edges = np.linspace(0, per_epoch, _CHECKPOINTS_PER_EPOCH + 1).astype(int)[1:]
    # A step size that converges within the run on any size: 6 / steps, kept in [0.002, 0.05].
    rate = min(0.05, max(0.002, 6 / (per_epoch * epochs)))
    workspace = oc.Workspace("train-step")
    losses: list[list[float]] = []
    with progress_bar(
        total=per_epoch * epochs, desc="train", unit="batch", disable=not progress
    ) as bar:
        for _ in range(epochs):
            row: list[float] = []
            segment: list[float] = []
            for i, batch in enumerate(feed, 1):
                with workspace:
                    segment.append(_sgd_step(batch, weights, bias, rate))
                if i in edges:
                    row.append(sum(segment) / len(segment))
                    segment = []
                bar.update()
            losses.append(row)
    workspace.destroy()
    return losses, oc.detach(weights.astype(np.float64))


def _report(
    records: list[StepRecord],
    total: float,
    managed_peak: int,
    at_start: ResidentMemory,
    peak_reset: bool,
    resident_peak: int,
    plan: DemoPlan,
) -> None:
    budget = plan.budget_bytes
    rows = [
        [
            r.name,
            f"{r.seconds:.1f} s",
            format_bytes(r.managed_peak_bytes),
            format_bytes(r.resident_peak_bytes),
        ]
        for r in records
    ]
    rows.append(
        ["total", f"{total:.1f} s", format_bytes(managed_peak), format_bytes(resident_peak)]
    )
    print("5. memory      time and peaks of each step (NumPy: what the manager counted)")
    print(table(["step", "time", "NumPy peak", "resident peak"], rows, indent=15))
    now = resident_memory()
    hwm = now.peak_bytes
    verdict = "below" if max(resident_peak, hwm) <= budget else "above"
    text = (
        f"Peak resident memory {format_bytes(resident_peak)} (anonymous + shared, sampled every "
        f"20 ms) and {format_bytes(hwm)} (VmHWM, with {format_bytes(now.file_bytes)} of "
        f"libraries and page cache{'' if peak_reset else ', since the process started'}): "
        f"{verdict} the {format_bytes(budget)} budget, while {format_bytes(plan.data.nbytes)} of "
        f"data ({plan.data.nbytes / budget:.1f}x the budget) went through. Python, NumPy, zarr "
        f"and the libraries took {format_bytes(at_start.owned_bytes)} before the demo began."
    )
    print("\n" + textwrap.fill(text, width=96))
