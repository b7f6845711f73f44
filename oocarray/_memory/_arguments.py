"""Checks of the arguments that the memory layer's functions and methods take."""

from __future__ import annotations

import numpy as np

__all__ = ["require_array"]


def require_array(arr: object, what: str) -> None:
    if not isinstance(arr, np.ndarray):
        raise TypeError(f"{what}() takes a numpy.ndarray, got {type(arr).__name__}")
