"""Set functions of chunked arrays out of core (to be built: unique and its variants, isin)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["FUNCTIONS"]

FUNCTIONS: dict[Any, Callable[..., Any]] = {}
