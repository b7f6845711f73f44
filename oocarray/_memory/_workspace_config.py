"""The policies of a workspace: :class:`WorkspaceConfig`, their names, and the native values
that the arena-full policies set."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from oocarray import _native
from oocarray._memory._policies import LOCATIONS
from oocarray._memory._units import parse_size

__all__ = ["FULL_POLICIES", "WorkspaceConfig"]

_ALLOCATION = ("strict", "overallocate")
_LEARNING = ("first_loop", "over_time", "none")
FULL_POLICIES = {
    "external": _native.WS_EXTERNAL,
    "reallocate": _native.WS_REALLOCATE,
    "fail": _native.WS_FAIL,
}
_ON_ESCAPE = ("raise", "pin")


def _choice(name: str, value: object, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class WorkspaceConfig:
    """The policies of a :class:`Workspace`.

    Parameters
    ----------
    initial_size
        Arena bytes before anything is learned (int or ``"64M"``-style string).
    max_size
        Largest arena, or ``None``.  Requests beyond it follow ``spill``.
    allocation
        ``"strict"`` sizes the arena to what was learned; ``"overallocate"`` adds
        ``overallocation`` (0.3 is 30%).
    overallocation
        Extra fraction for ``allocation="overallocate"``.
    learning
        ``"first_loop"`` sizes the arena from the first cycle; ``"over_time"`` grows it
        whenever a cycle needs more; ``"none"`` keeps ``initial_size``.
    spill
        When the arena is full: ``"external"`` allocates outside it (from this workspace's
        budget, like a plain manager); ``"reallocate"`` does the same and grows the arena for
        the next cycle; ``"fail"`` raises :class:`WorkspaceFullError`.
    location
        ``"ram"``, or ``"mmap"``: every cycle's arena is backed by a temporary file, and so
        are the workspace's allocations outside the arena (the first, learning cycle's
        included) of a page or more.  ``"zarr"``: the arena is compressed-spill memory, as
        arrays of a ``location="zarr"`` manager are: the pages a cycle touches come into RAM
        (1 MiB at a time) and count on the budget; over the budget, written ones are encoded
        (byte shuffle + zstd level 1) into a private unnamed file and dropped, and paged back
        on the next touch at the same address.  So an arena larger than the budget, or than
        RAM, works.  Only these resident pages count on the budget, never the arena's size
        (which :meth:`Workspace.stats` shows in ``memory.compressed_bytes``, next to the
        encoded bytes in ``memory.compressed_disk_bytes``).  When a cycle ends the arena's
        contents are dead: every page is dropped without being encoded, so the next cycle
        starts from zeros and nothing is written for data no one can read.  Allocations
        outside the arena of 1 MiB or more are placed the same way (smaller ones of a page
        or more in files, as with ``"mmap"``).  Where userfaultfd is not available this acts
        as ``"mmap"``, with one :class:`CompressedSpillFallbackWarning`.  ``None``
        (default): the parent manager's location.
    on_escape
        ``"raise"`` makes the cycle exit raise :class:`WorkspaceLeakError` naming arrays that
        outlive their cycle; ``"pin"`` only counts them.  Either way their memory is pinned.

    Raises
    ------
    ValueError
        A policy is not one of its choices, or ``initial_size`` exceeds ``max_size``.
    TypeError
        ``overallocation`` is not a number.

    Examples
    --------
    >>> import oocarray as oc
    >>> policies = oc.WorkspaceConfig(initial_size="1M", learning="over_time")
    >>> policies.initial_size
    1048576
    >>> with oc.Manager() as m:
    ...     oc.Workspace("step", policies).config.learning
    'over_time'
    """

    initial_size: int | str = 0
    max_size: int | str | None = None
    allocation: Literal["strict", "overallocate"] = "overallocate"
    overallocation: float = 0.3
    learning: Literal["first_loop", "over_time", "none"] = "first_loop"
    spill: Literal["external", "reallocate", "fail"] = "external"
    location: Literal["ram", "mmap", "zarr"] | None = None
    on_escape: Literal["raise", "pin"] = "raise"

    def __post_init__(self) -> None:
        object.__setattr__(self, "initial_size", parse_size(self.initial_size, "initial_size"))
        object.__setattr__(self, "max_size", parse_size(self.max_size, "max_size", allow_none=True))
        _choice("allocation", self.allocation, _ALLOCATION)
        _choice("learning", self.learning, _LEARNING)
        _choice("spill", self.spill, tuple(FULL_POLICIES))
        if self.location is not None:
            _choice("location", self.location, tuple(LOCATIONS))
        _choice("on_escape", self.on_escape, _ON_ESCAPE)
        if isinstance(self.overallocation, bool) or not isinstance(
            self.overallocation, (int, float)
        ):
            raise TypeError(f"overallocation must be a number, got {self.overallocation!r}")
        if not 0 <= self.overallocation <= 100:
            raise ValueError(
                f"overallocation must be between 0 and 100 (e.g. 0.3 for 30%), "
                f"got {self.overallocation!r}"
            )
        if self.max_size is not None and int(self.initial_size) > int(self.max_size):
            raise ValueError(
                f"initial_size ({self.initial_size}) must not exceed max_size ({self.max_size})"
            )
