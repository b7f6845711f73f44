"""Scans of chunked arrays (to be built: cumsum, cumprod, cumulative_sum/prod, diff)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["FUNCTIONS"]

FUNCTIONS: dict[Any, Callable[..., Any]] = {}
