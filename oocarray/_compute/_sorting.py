"""Sorting and selection of chunked arrays out of core (to be built: sort, argsort,
partition, quantiles, searchsorted)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["FUNCTIONS"]

FUNCTIONS: dict[Any, Callable[..., Any]] = {}
