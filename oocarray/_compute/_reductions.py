"""The reductions chunked arrays and expressions answer, typed: ``compute=False`` gives a
:class:`LazyResult` (for :func:`oocarray.compute`), anything else the value.

:class:`Reductions` is a base class of the compute layer's array types (``_compute._array``);
each reduction reads its input once, in one streaming pass over the chunks.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Literal, TypeVar, overload

from oocarray._compute._nodes import Node
from oocarray._compute._ops import LazyResult, reduce_lazy
from oocarray._storage import StoredArray

__all__ = ["Reductions"]

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


def _documented(summary: str, result: str, call: str, shown: str) -> Callable[[F], F]:
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


class Reductions:
    """Streaming reductions; a subclass says what they read (:meth:`_tree`)."""

    def _tree(self) -> Node | StoredArray:
        """What the reductions read: an expression tree or a stored array."""
        raise NotImplementedError

    @overload
    def sum(
        self,
        axis: Any = None,
        dtype: Any = None,
        keepdims: bool = False,
        compute: Literal[True] = True,
        progress: bool = True,
    ) -> Any: ...
    @overload
    def sum(
        self,
        axis: Any = None,
        dtype: Any = None,
        keepdims: bool = False,
        *,
        compute: Literal[False],
        progress: bool = True,
    ) -> LazyResult: ...
    @overload
    def sum(
        self,
        axis: Any = None,
        dtype: Any = None,
        keepdims: bool = False,
        compute: bool = True,
        progress: bool = True,
    ) -> Any: ...
    @_documented(
        "Sum in one streaming pass.",
        "The sum",
        "x.sum(axis=0, progress=False)",
        "array([3., 5., 7.])",
    )
    def sum(
        self,
        axis: Any = None,
        dtype: Any = None,
        keepdims: bool = False,
        compute: bool = True,
        progress: bool = True,
    ) -> Any:
        return reduce_lazy(
            "sum", self._tree(), axis, dtype, keepdims, compute=compute, progress=progress
        )

    @overload
    def prod(
        self,
        axis: Any = None,
        dtype: Any = None,
        keepdims: bool = False,
        compute: Literal[True] = True,
        progress: bool = True,
    ) -> Any: ...
    @overload
    def prod(
        self,
        axis: Any = None,
        dtype: Any = None,
        keepdims: bool = False,
        *,
        compute: Literal[False],
        progress: bool = True,
    ) -> LazyResult: ...
    @overload
    def prod(
        self,
        axis: Any = None,
        dtype: Any = None,
        keepdims: bool = False,
        compute: bool = True,
        progress: bool = True,
    ) -> Any: ...
    @_documented(
        "Product in one streaming pass.",
        "The product",
        "x.prod(axis=1, progress=False)",
        "array([ 0., 60.])",
    )
    def prod(
        self,
        axis: Any = None,
        dtype: Any = None,
        keepdims: bool = False,
        compute: bool = True,
        progress: bool = True,
    ) -> Any:
        return reduce_lazy(
            "prod", self._tree(), axis, dtype, keepdims, compute=compute, progress=progress
        )

    @overload
    def mean(
        self,
        axis: Any = None,
        dtype: Any = None,
        keepdims: bool = False,
        compute: Literal[True] = True,
        progress: bool = True,
    ) -> Any: ...
    @overload
    def mean(
        self,
        axis: Any = None,
        dtype: Any = None,
        keepdims: bool = False,
        *,
        compute: Literal[False],
        progress: bool = True,
    ) -> LazyResult: ...
    @overload
    def mean(
        self,
        axis: Any = None,
        dtype: Any = None,
        keepdims: bool = False,
        compute: bool = True,
        progress: bool = True,
    ) -> Any: ...
    @_documented(
        "Mean in one streaming pass.",
        "The mean",
        "x.mean(progress=False)",
        "np.float64(2.5)",
    )
    def mean(
        self,
        axis: Any = None,
        dtype: Any = None,
        keepdims: bool = False,
        compute: bool = True,
        progress: bool = True,
    ) -> Any:
        return reduce_lazy(
            "mean", self._tree(), axis, dtype, keepdims, compute=compute, progress=progress
        )

    @overload
    def var(
        self,
        axis: Any = None,
        dtype: Any = None,
        ddof: int = 0,
        keepdims: bool = False,
        compute: Literal[True] = True,
        progress: bool = True,
    ) -> Any: ...
    @overload
    def var(
        self,
        axis: Any = None,
        dtype: Any = None,
        ddof: int = 0,
        keepdims: bool = False,
        *,
        compute: Literal[False],
        progress: bool = True,
    ) -> LazyResult: ...
    @overload
    def var(
        self,
        axis: Any = None,
        dtype: Any = None,
        ddof: int = 0,
        keepdims: bool = False,
        compute: bool = True,
        progress: bool = True,
    ) -> Any: ...
    @_documented(
        "Variance in one streaming pass, merging chunk moments.",
        "The variance",
        "x.var(axis=0, progress=False)",
        "array([2.25, 2.25, 2.25])",
    )
    def var(
        self,
        axis: Any = None,
        dtype: Any = None,
        ddof: int = 0,
        keepdims: bool = False,
        compute: bool = True,
        progress: bool = True,
    ) -> Any:
        return reduce_lazy(
            "var", self._tree(), axis, dtype, keepdims, ddof, compute=compute, progress=progress
        )

    @overload
    def std(
        self,
        axis: Any = None,
        dtype: Any = None,
        ddof: int = 0,
        keepdims: bool = False,
        compute: Literal[True] = True,
        progress: bool = True,
    ) -> Any: ...
    @overload
    def std(
        self,
        axis: Any = None,
        dtype: Any = None,
        ddof: int = 0,
        keepdims: bool = False,
        *,
        compute: Literal[False],
        progress: bool = True,
    ) -> LazyResult: ...
    @overload
    def std(
        self,
        axis: Any = None,
        dtype: Any = None,
        ddof: int = 0,
        keepdims: bool = False,
        compute: bool = True,
        progress: bool = True,
    ) -> Any: ...
    @_documented(
        "Standard deviation in one streaming pass, merging chunk moments.",
        "The standard deviation",
        "x.std(ddof=1, progress=False)",
        "np.float64(1.8708286933869707)",
    )
    def std(
        self,
        axis: Any = None,
        dtype: Any = None,
        ddof: int = 0,
        keepdims: bool = False,
        compute: bool = True,
        progress: bool = True,
    ) -> Any:
        return reduce_lazy(
            "std", self._tree(), axis, dtype, keepdims, ddof, compute=compute, progress=progress
        )

    @overload
    def min(
        self,
        axis: Any = None,
        keepdims: bool = False,
        compute: Literal[True] = True,
        progress: bool = True,
    ) -> Any: ...
    @overload
    def min(
        self,
        axis: Any = None,
        keepdims: bool = False,
        *,
        compute: Literal[False],
        progress: bool = True,
    ) -> LazyResult: ...
    @overload
    def min(
        self, axis: Any = None, keepdims: bool = False, compute: bool = True, progress: bool = True
    ) -> Any: ...
    @_documented(
        "Minimum in one streaming pass.",
        "The minimum",
        "x.min(axis=1, progress=False)",
        "array([0., 3.])",
    )
    def min(
        self, axis: Any = None, keepdims: bool = False, compute: bool = True, progress: bool = True
    ) -> Any:
        return reduce_lazy(
            "min", self._tree(), axis, None, keepdims, compute=compute, progress=progress
        )

    @overload
    def max(
        self,
        axis: Any = None,
        keepdims: bool = False,
        compute: Literal[True] = True,
        progress: bool = True,
    ) -> Any: ...
    @overload
    def max(
        self,
        axis: Any = None,
        keepdims: bool = False,
        *,
        compute: Literal[False],
        progress: bool = True,
    ) -> LazyResult: ...
    @overload
    def max(
        self, axis: Any = None, keepdims: bool = False, compute: bool = True, progress: bool = True
    ) -> Any: ...
    @_documented(
        "Maximum in one streaming pass.",
        "The maximum",
        "x.max(axis=1, keepdims=True, progress=False)",
        "array([[2.],\n       [5.]])",
    )
    def max(
        self, axis: Any = None, keepdims: bool = False, compute: bool = True, progress: bool = True
    ) -> Any:
        return reduce_lazy(
            "max", self._tree(), axis, None, keepdims, compute=compute, progress=progress
        )

    @overload
    def any(
        self,
        axis: Any = None,
        keepdims: bool = False,
        compute: Literal[True] = True,
        progress: bool = True,
    ) -> Any: ...
    @overload
    def any(
        self,
        axis: Any = None,
        keepdims: bool = False,
        *,
        compute: Literal[False],
        progress: bool = True,
    ) -> LazyResult: ...
    @overload
    def any(
        self, axis: Any = None, keepdims: bool = False, compute: bool = True, progress: bool = True
    ) -> Any: ...
    @_documented(
        "Whether any element is true, in one streaming pass.",
        "Whether any is true",
        "(x > 4).any(axis=1, progress=False)",
        "array([False,  True])",
    )
    def any(
        self, axis: Any = None, keepdims: bool = False, compute: bool = True, progress: bool = True
    ) -> Any:
        return reduce_lazy(
            "any", self._tree(), axis, None, keepdims, compute=compute, progress=progress
        )

    @overload
    def all(
        self,
        axis: Any = None,
        keepdims: bool = False,
        compute: Literal[True] = True,
        progress: bool = True,
    ) -> Any: ...
    @overload
    def all(
        self,
        axis: Any = None,
        keepdims: bool = False,
        *,
        compute: Literal[False],
        progress: bool = True,
    ) -> LazyResult: ...
    @overload
    def all(
        self, axis: Any = None, keepdims: bool = False, compute: bool = True, progress: bool = True
    ) -> Any: ...
    @_documented(
        "Whether every element is true, in one streaming pass.",
        "Whether all are true",
        "(x >= 0).all(progress=False)",
        "np.True_",
    )
    def all(
        self, axis: Any = None, keepdims: bool = False, compute: bool = True, progress: bool = True
    ) -> Any:
        return reduce_lazy(
            "all", self._tree(), axis, None, keepdims, compute=compute, progress=progress
        )

    @overload
    def argmin(
        self,
        axis: Any = None,
        keepdims: bool = False,
        compute: Literal[True] = True,
        progress: bool = True,
    ) -> Any: ...
    @overload
    def argmin(
        self,
        axis: Any = None,
        keepdims: bool = False,
        *,
        compute: Literal[False],
        progress: bool = True,
    ) -> LazyResult: ...
    @overload
    def argmin(
        self, axis: Any = None, keepdims: bool = False, compute: bool = True, progress: bool = True
    ) -> Any: ...
    @_documented(
        "Position of the minimum, in one streaming pass.",
        "The index of the first minimum",
        "x.argmin(axis=1, progress=False)",
        "array([0, 0])",
    )
    def argmin(
        self, axis: Any = None, keepdims: bool = False, compute: bool = True, progress: bool = True
    ) -> Any:
        return reduce_lazy(
            "argmin", self._tree(), axis, None, keepdims, compute=compute, progress=progress
        )

    @overload
    def argmax(
        self,
        axis: Any = None,
        keepdims: bool = False,
        compute: Literal[True] = True,
        progress: bool = True,
    ) -> Any: ...
    @overload
    def argmax(
        self,
        axis: Any = None,
        keepdims: bool = False,
        *,
        compute: Literal[False],
        progress: bool = True,
    ) -> LazyResult: ...
    @overload
    def argmax(
        self, axis: Any = None, keepdims: bool = False, compute: bool = True, progress: bool = True
    ) -> Any: ...
    @_documented(
        "Position of the maximum, in one streaming pass.",
        "The flat index (or the index along ``axis``) of the first maximum",
        "x.argmax(progress=False)",
        "np.int64(5)",
    )
    def argmax(
        self, axis: Any = None, keepdims: bool = False, compute: bool = True, progress: bool = True
    ) -> Any:
        return reduce_lazy(
            "argmax", self._tree(), axis, None, keepdims, compute=compute, progress=progress
        )

    @overload
    def count_nonzero(
        self,
        axis: Any = None,
        keepdims: bool = False,
        compute: Literal[True] = True,
        progress: bool = True,
    ) -> Any: ...
    @overload
    def count_nonzero(
        self,
        axis: Any = None,
        keepdims: bool = False,
        *,
        compute: Literal[False],
        progress: bool = True,
    ) -> LazyResult: ...
    @overload
    def count_nonzero(
        self, axis: Any = None, keepdims: bool = False, compute: bool = True, progress: bool = True
    ) -> Any: ...
    @_documented(
        "Number of non-zero elements, in one streaming pass.",
        "The count",
        "x.count_nonzero(axis=0, progress=False)",
        "array([1, 2, 2])",
    )
    def count_nonzero(
        self, axis: Any = None, keepdims: bool = False, compute: bool = True, progress: bool = True
    ) -> Any:
        return reduce_lazy(
            "count_nonzero", self._tree(), axis, None, keepdims, compute=compute, progress=progress
        )
