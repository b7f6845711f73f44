"""A manager's policies: where arrays are placed, what an over-budget allocation does, what
closing does with arrays still referenced; their names, and the native values they set."""

from __future__ import annotations

from typing import Literal

from oocarray import _native

__all__ = [
    "LOCATIONS",
    "ON_CLOSE",
    "SPILL_POLICIES",
    "Location",
    "OnClose",
    "SpillPolicy",
    "check_policies",
]

OnClose = Literal["keep", "spill", "raise"]
SpillPolicy = Literal["mmap", "evict", "zarr", "fail"]
Location = Literal["ram", "mmap", "zarr"]

ON_CLOSE: tuple[str, ...] = ("keep", "spill", "raise")
SPILL_POLICIES = {
    "mmap": _native.SPILL_MMAP,
    "evict": _native.SPILL_EVICT,
    "zarr": _native.SPILL_ZARR,
    "fail": _native.SPILL_FAIL,
}
LOCATIONS = {
    "ram": _native.LOCATION_RAM,
    "mmap": _native.LOCATION_MMAP,
    "zarr": _native.LOCATION_ZARR,
}


def check_policies(on_close: object, location: object, spill: object) -> None:
    """Raise ValueError for a policy that is not one of the names above (``None`` for
    ``location`` and ``spill`` means the parent's)."""
    if not isinstance(on_close, str) or on_close not in ON_CLOSE:
        raise ValueError(f"on_close must be one of {ON_CLOSE}, got {on_close!r}")
    if location is not None and (not isinstance(location, str) or location not in LOCATIONS):
        raise ValueError(
            f"location must be one of {tuple(LOCATIONS)} or None (the parent's), got {location!r}"
        )
    if spill is not None and (not isinstance(spill, str) or spill not in SPILL_POLICIES):
        raise ValueError(
            f"spill must be one of {tuple(SPILL_POLICIES)} or None (the parent's), got {spill!r}"
        )
