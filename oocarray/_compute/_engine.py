"""The chunk loop: evaluate expressions and reductions block by block, on every core.

A pass covers one shape.  Its blocks follow the chunks of the arrays it reads (or the write
grid of the array it writes, so output chunks are written whole), grown along the first axis
until a block is worth a thread's time.  Worker threads take blocks in order; each evaluates
its block in a cyclic workspace of its own (the same arena every block: no allocator churn),
with every leaf region read once for all the targets of the pass, and hands back a small
partial per reduction, merged on the calling thread in block order so results never depend on
timing.  Memory stays bounded: a worker holds one block's data at a time, and the number of
workers shrinks to what the active manager's budget leaves room for.

Ctrl-C on the calling thread stops the pass: blocks not started are dropped, blocks being
written finish (a chunk is written whole or not at all), and KeyboardInterrupt is raised (by
the loop that hands out blocks, where it waits: see _interrupt.py).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import math
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from oocarray._compute._blas import one_blas_thread
from oocarray._compute._fuse import Kernel, kernel_for
from oocarray._compute._interrupt import DeferredInterrupt
from oocarray._compute._nodes import BlockReads, Node, input_identity
from oocarray._compute._progress import progress_bar
from oocarray._compute._reduce import Reduction
from oocarray._compute._slabs import SlabPlan, plan_slabs
from oocarray._memory import (
    Manager,
    Workspace,
    active_manager,
    budget_left,
    detach,
    scratch_step,
    system,
)
from oocarray._storage._pool import reads_on_this_thread
from oocarray._storage._pool import workers as reads_workers

__all__ = ["Pass", "StoreTarget", "budget_left", "evaluate", "run_pass"]

Region = tuple[slice, ...]

# A block should hold about this much input: large enough to amortise per-block work, small
# enough that every core gets blocks and memory stays low.
TARGET_BLOCK_BYTES = 16 << 20
MAX_WORKERS = 8


@dataclass(frozen=True, slots=True)
class StoreTarget:
    """Write ``expr`` block by block through ``write(region, block)``."""

    expr: Node
    write: Callable[[Region, np.ndarray], None]
    grid: tuple[int, ...] | None = None  # blocks must be made of whole cells of this grid


@dataclass(slots=True)
class Pass:
    """Everything evaluated in one sweep over one shape."""

    shape: tuple[int, ...]
    reductions: list[Reduction]
    stores: list[StoreTarget]
    kernels: dict[int, Kernel | None] | None = None
    slabs: SlabPlan | None = None

    def exprs(self) -> list[Node]:
        return [r.expr for r in self.reductions] + [s.expr for s in self.stores]

    def calls_blas(self) -> bool:
        """Whether any block of the pass calls BLAS (a product, lazy or reduced)."""
        if any(r.calls_blas for r in self.reductions):
            return True
        stack = self.exprs()
        while stack:
            node = stack.pop()
            if node.calls_blas:
                return True
            stack.extend(node.children())
        return False

    def fuse(self) -> None:
        """Plan the reductions that stream in cache-sized slabs, and compile each other
        expression into a numexpr kernel where it can be (once per pass)."""
        self.slabs = plan_slabs(self.reductions, self.shape)
        streamed = self.slabs.reductions if self.slabs else {}
        exprs = [r.expr for i, r in enumerate(self.reductions) if i not in streamed]
        self.kernels = {id(e): kernel_for(e) for e in [*exprs, *(s.expr for s in self.stores)]}

    def value(self, expr: Node, region: Region, reads: BlockReads) -> np.ndarray:
        kernel = self.kernels.get(id(expr)) if self.kernels else None
        return kernel.evaluate(region, reads) if kernel else expr.evaluate(region, reads)


def _workers() -> int:
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - platforms without affinity
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, MAX_WORKERS))


def _base_grid(work: Pass) -> tuple[int, ...]:
    """The grid blocks are made of: the output's write grid, else the chunks of the first
    expression read in chunks, else the whole array along every axis but the first."""
    for store in work.stores:
        if store.grid is not None:
            return store.grid
    for expr in work.exprs():
        chunks = expr.chunks()
        if chunks is not None:
            return tuple(max(1, min(c, n)) for c, n in zip(chunks, work.shape, strict=True))
    shape = work.shape
    return (1, *shape[1:]) if shape else ()


def plan_blocks(work: Pass, budget_bytes: int | None) -> tuple[list[Region], int]:
    """The blocks of a pass, in C order, and how many workers may run at once."""
    shape = work.shape
    if not shape:
        return [()], 1
    if 0 in shape:
        return [], 1
    grid = list(_base_grid(work))
    # Each expression and each source once: the mean and std of x share one block of x.
    exprs = list({input_identity(e): e for e in work.exprs()}.values())
    sources = {id(s): s for e in exprs for s in e.sources()}.values()
    item_bytes = sum(max(1, e.dtype.itemsize) for e in exprs)
    item_bytes += sum(s.dtype.itemsize for s in sources)
    cell_bytes = math.prod(grid) * item_bytes
    workers = _workers()
    target = TARGET_BLOCK_BYTES
    if budget_bytes is not None:
        # A worker holds a block's inputs, temporaries and output: keep four per budget share.
        workers = max(1, min(workers, budget_bytes // max(1, 4 * cell_bytes)))
        target = max(cell_bytes, min(target, budget_bytes // (4 * workers)))
    grow = max(1, target // max(1, cell_bytes))
    grid[0] = min(shape[0], grid[0] * grow)
    counts = [math.ceil(n / g) for n, g in zip(shape, grid, strict=True)]
    blocks = []
    for index in np.ndindex(*counts):
        blocks.append(
            tuple(
                slice(i * g, min((i + 1) * g, n))
                for i, g, n in zip(index, grid, shape, strict=True)
            )
        )
    return blocks, workers


class _Workers:
    """One cyclic workspace per worker thread, under the caller's manager; ``alone``: each
    worker reads and writes on its own thread (the workers fill every core already)."""

    def __init__(self, manager: Manager, alone: bool = False) -> None:
        self.manager = manager
        self.alone = alone
        self.local = threading.local()
        self.workspaces: list[Workspace] = []
        self.lock = threading.Lock()

    def workspace(self) -> Workspace:
        ws = getattr(self.local, "workspace", None)
        if ws is None:
            with self.manager.activate():
                # "pin": what a library keeps from a block (zarr-python caches arrays it makes
                # while writing a shard) stays valid and is left alone, never reused.
                ws = Workspace("compute", learning="over_time", on_escape="pin")
            self.local.workspace = ws
            with self.lock:
                self.workspaces.append(ws)
        return ws

    def slab_buffers(self, plan: SlabPlan, region: Region) -> dict[int, np.ndarray]:
        """This worker's slab buffers for ``region``: made once under the caller's manager,
        outside the cyclic workspace, and kept from block to block (fresh buffers each block
        ran the slab loop at half speed)."""
        buffers: dict[int, np.ndarray] | None = getattr(self.local, "slab_buffers", None)
        if buffers is None or not plan.fits(buffers, region):
            with self.manager.activate():
                buffers = self.local.slab_buffers = plan.buffers(region)
        return buffers

    def close(self) -> None:
        for ws in self.workspaces:
            ws.destroy()


def _evaluate_block(work: Pass, region: Region, workers: _Workers) -> list[Any]:
    """Runs on a worker: the partial of every reduction for one block, stores written."""
    ws = workers.workspace()
    alone = reads_on_this_thread() if workers.alone else contextlib.nullcontext()
    with workers.manager.activate(), ws, alone:
        reads = BlockReads()
        shape = tuple(s.stop - s.start for s in region)
        partials: list[Any] = [None] * len(work.reductions)
        streamed = (
            work.slabs.partials(region, reads, workers.slab_buffers(work.slabs, region))
            if work.slabs
            else {}
        )
        for i, partial in streamed.items():
            partials[i] = _detached(partial)
        shared: dict[Any, Any] = {}
        block = None
        # The reduction of highest sharing rank first: its partial serves the others of its key.
        for i in sorted(range(len(partials)), key=lambda i: -work.reductions[i].sharing_rank):
            if i in streamed:
                continue
            reduction = work.reductions[i]
            key = reduction.sharing_key()
            if key is not None and key in shared:
                partials[i] = shared[key]
                continue
            block = np.broadcast_to(work.value(reduction.expr, region, reads), shape)
            partials[i] = _detached(reduction.partial(block, region))
            if key is not None:
                shared[key] = partials[i]
        for store in work.stores:
            block = work.value(store.expr, region, reads)
            store.write(region, np.broadcast_to(block, shape).astype(store.expr.dtype, copy=False))
        reads.clear()
        del block
    return partials


def _detached(value: Any) -> Any:
    """A partial copied out of the worker's arena (it outlives the cycle)."""
    if isinstance(value, tuple):
        return tuple(_detached(v) for v in value)
    if isinstance(value, np.ndarray):
        return detach(value)
    return value


def run_pass(work: Pass, progress: bool = True, name: str = "compute") -> None:
    """Evaluates a pass: merges every reduction's partials and writes every store.  Its
    decode and encode scratch is given back when it ends."""
    with scratch_step():
        _run_pass(work, progress, name)


def _run_pass(work: Pass, progress: bool, name: str) -> None:
    manager = active_manager() or system()
    blocks, worker_count = plan_blocks(work, budget_left(manager))
    work.fuse()
    # One block to reduce is evaluated here, without starting threads for it: its reads
    # spread over the cores.
    single = len(blocks) == 1 and not work.stores
    workers = _Workers(manager, alone=not single and worker_count >= reads_workers())
    if single:
        try:
            partials = _evaluate_block(work, blocks[0], workers)
        finally:
            workers.close()
        for reduction, partial in zip(work.reductions, partials, strict=True):
            reduction.merge(partial, blocks[0])
        return
    bar = _progress(len(blocks), progress, name, _bytes_read(work))
    reading_ahead = _read_ahead(work, blocks)
    pending: dict[int, list[Any]] = {}
    next_merge = 0
    # Ctrl-C is raised where the loop waits, never inside submit() (see _interrupt.py).
    with (
        DeferredInterrupt() as interrupt,
        one_blas_thread(worker_count if work.calls_blas() else 1),
    ):
        try:
            with concurrent.futures.ThreadPoolExecutor(worker_count, "oocarray-compute") as pool:
                in_flight: dict[concurrent.futures.Future[list[Any]], int] = {}
                queue = iter(enumerate(blocks))
                try:
                    for number, region in _take(queue, 2 * worker_count):
                        in_flight[pool.submit(_evaluate_block, work, region, workers)] = number
                    while in_flight:
                        interrupt.check()
                        done, _ = concurrent.futures.wait(
                            in_flight, timeout=0.1, return_when=concurrent.futures.FIRST_COMPLETED
                        )
                        for future in done:
                            pending[in_flight.pop(future)] = future.result()
                            bar.update(1)
                            for number, region in _take(queue, 1):
                                future = pool.submit(_evaluate_block, work, region, workers)
                                in_flight[future] = number
                        while next_merge in pending:
                            for reduction, partial in zip(
                                work.reductions, pending.pop(next_merge), strict=True
                            ):
                                reduction.merge(partial, blocks[next_merge])
                            next_merge += 1
                except BaseException:
                    for future in in_flight:
                        future.cancel()
                    raise
        finally:
            reading_ahead.close()
            bar.close()
            workers.close()


def _read_ahead(work: Pass, blocks: list[Region]) -> contextlib.ExitStack:
    """Tell each array the pass reads block by block (one of the pass's shape) the order of
    its reads: an array in an object store fetches ahead of them."""
    stack = contextlib.ExitStack()
    seen: set[int] = set()
    for expr in work.exprs():
        for source in expr.sources():
            if id(source) not in seen and tuple(source.shape) == tuple(work.shape):
                seen.add(id(source))
                stack.enter_context(source.read_ahead(blocks))
    return stack


def _take(queue: Any, n: int) -> list[tuple[int, Region]]:
    out = []
    for _ in range(n):
        item = next(queue, None)
        if item is None:
            break
        out.append(item)
    return out


def _progress(total: int, enabled: bool, name: str, nbytes: int) -> Any:
    """The pass's progress: a bar once it has run about two seconds, or a summary line where
    stderr is a log (see :mod:`._progress`)."""
    return progress_bar(total=total, desc=name, nbytes=nbytes, disable=not enabled or total < 2)


def _bytes_read(work: Pass) -> int:
    """The bytes of the chunked arrays the pass reads (or, reading none, computes)."""
    seen: dict[int, int] = {}
    for expr in work.exprs():
        for source in expr.sources():
            seen[id(source)] = source.nbytes
    return sum(seen.values()) or sum(e.nbytes for e in work.exprs())


def evaluate(
    reductions: Sequence[Reduction],
    stores: Sequence[StoreTarget],
    progress: bool,
    name: str = "compute",
) -> None:
    """Runs every reduction and store, one pass per shape, sharing reads within a pass;
    ``name`` is the step's name in progress reports."""
    passes: dict[tuple[int, ...], Pass] = {}
    for reduction in reductions:
        passes.setdefault(
            reduction.expr.shape, Pass(reduction.expr.shape, [], [])
        ).reductions.append(reduction)
    for store in stores:
        passes.setdefault(store.expr.shape, Pass(store.expr.shape, [], [])).stores.append(store)
    for work in passes.values():
        run_pass(work, progress, name)
