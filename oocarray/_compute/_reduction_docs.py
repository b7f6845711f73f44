"""The docstrings of the streaming reductions (``_compute._reductions``,
``_compute._extreme_reductions``), in numpydoc's form: each parameter described from one text
for all of them, in the order of the reduction's signature, and an example on a small chunked
array.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["documented"]

F = TypeVar("F", bound=Callable[..., Any])

# What each reduction's parameters mean, one text for all of them (numpydoc's form).
_PARAMETERS = {
    "axis": ("axis : int or tuple of int, optional", "The axes to reduce; all of them by default."),
    "dtype": (
        "dtype : optional",
        "The accumulator's and result's dtype; by default NumPy's for this reduction.",
    ),
    "ddof": ("ddof", "Delta degrees of freedom: the divisor is ``N - ddof`` (default 0)."),
    "keepdims": ("keepdims", "Keep the reduced axes with length 1 (default ``False``)."),
    "compute": (
        "compute",
        "``True`` (default): compute now.  ``False``: return a\n"
        ":class:`~oocarray.LazyResult` to compute with others in one pass\n"
        "(:func:`oocarray.compute`).",
    ),
    "progress": ("progress", "Show a progress bar (default ``True``)."),
}


def documented(summary: str, result: str, call: str, shown: str) -> Callable[[F], F]:
    """The reduction's numpydoc docstring, its parameters described from ``_PARAMETERS`` in
    the order of its signature, and an example on a small chunked array."""

    def document(method: F) -> F:
        names = list(inspect.signature(method).parameters)[1:]  # after self
        parameters = "\n".join(
            _PARAMETERS[name][0] + "\n" + "\n".join("    " + line for line in text.split("\n"))
            for name in names
            for text in [_PARAMETERS[name][1]]
        )
        method.__doc__ = (
            f"{summary}\n\nParameters\n----------\n{parameters}\n\n"
            "Returns\n-------\nnumpy.ndarray, NumPy scalar or LazyResult\n"
            f"    {result}, as NumPy gives it for the same data;\n"
            "    a lazy result with ``compute=False``.\n\n"
            "Examples\n--------\n>>> import numpy as np, oocarray as oc\n"
            ">>> x = oc.from_numpy(np.arange(6.0).reshape(2, 3), chunks=(1, 3))\n"
            f">>> {call}\n{shown}\n"
        )
        return method

    return document
