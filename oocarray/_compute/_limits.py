"""What chunked arrays refuse, said clearly: NumPy calls they do not answer (nothing silently
loads a whole array) and plans whose memory does not fit the active budget.

An out-of-core algorithm plans before it reads: it projects the peak of the blocks it holds at
once (as Cubed projects a task's memory) and calls :func:`require_memory`, which compares it
with what the active manager's budget leaves and refuses with the smallest budget that would
do, so a plan that cannot fit fails before any work rather than part way through.
"""

from __future__ import annotations

from oocarray._memory import active_manager, budget_left, system
from oocarray._memory._physical import available_memory
from oocarray._memory._units import format_bytes
from oocarray.errors import MemoryBudgetError

__all__ = [
    "PAGE_CACHE_SHARE",
    "UNBUDGETED_WORKING_BYTES",
    "outgrows_page_cache",
    "require_memory",
    "unsupported",
    "working_bytes",
]

# Without a budget, algorithms still work in bounded pieces of this size (their runs, tables
# and blocks), so an unbudgeted call on an array larger than RAM does not load it.
UNBUDGETED_WORKING_BYTES = 256 << 20

# File data larger than this share of the memory available would push much of the page
# cache out (see outgrows_page_cache).
PAGE_CACHE_SHARE = 16


def unsupported(what: str) -> TypeError:
    return TypeError(
        f"{what} is not supported on chunked arrays (it would load the whole array): index a "
        "part with x[...] to get an ndarray, or use x.as_ndarray() / np.asarray(x) to load it "
        "deliberately"
    )


def working_bytes() -> int:
    """The memory an algorithm may plan to hold at once: what the active manager's budget
    leaves, else :data:`UNBUDGETED_WORKING_BYTES`."""
    left = budget_left(active_manager() or system())
    return UNBUDGETED_WORKING_BYTES if left is None else left


def outgrows_page_cache(nbytes: int) -> bool:
    """Whether ``nbytes`` of file data take more than ``1/PAGE_CACHE_SHARE`` of the memory
    available: data a pass writes once and reads once at most, of that size, is better kept
    out of the page cache (see the rechunk's scatter buffer and output)."""
    return nbytes > available_memory() // PAGE_CACHE_SHARE


def require_memory(function: str, peak_bytes: int, *, smallest_bytes: int, hint: str = "") -> None:
    """Refuse a plan for ``function`` whose projected ``peak_bytes`` exceeds the budget left.

    ``smallest_bytes`` is the least budget any plan of this call needs (named in the error,
    with ``hint``: what else would make it fit, such as smaller chunks)."""
    left = budget_left(active_manager() or system())
    if left is None or peak_bytes <= left:
        return
    advice = f"; {hint}" if hint else ""
    raise MemoryBudgetError(
        f"{function} needs {format_bytes(peak_bytes)} at once for this array, but the active "
        f"manager's budget leaves {format_bytes(left)}: give it at least "
        f"{format_bytes(smallest_bytes)}{advice}"
    )
