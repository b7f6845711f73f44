"""The error the chunk manager raises for an operation oocarray cannot run out of core."""

from __future__ import annotations

__all__ = ["missing"]


def missing(operation: str) -> NotImplementedError:
    """``NotImplementedError`` naming ``operation`` and what to do instead."""
    return NotImplementedError(
        f"{operation} is not supported by chunked_array_type='oocarray' yet: .compute() the "
        "data first or use chunked_array_type='dask'"
    )
