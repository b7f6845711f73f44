"""The streaming extremes of chunked arrays and expressions, typed as the other reductions
(``_compute._reductions``): ``min``, ``max`` and their positions, ``argmin`` and ``argmax``.

:class:`ExtremeReductions` is a base class of :class:`~oocarray._compute._reductions.Reductions`;
each reads its input once, in one streaming pass over the chunks.
"""

from __future__ import annotations

from typing import Any, Literal, overload

from oocarray._compute._nodes import Node
from oocarray._compute._ops import LazyResult, reduce_lazy
from oocarray._compute._reduction_docs import documented
from oocarray._storage import StoredArray

__all__ = ["ExtremeReductions"]


class ExtremeReductions:
    """Streaming extremes and their positions; a subclass says what they read (:meth:`_tree`)."""

    def _tree(self) -> Node | StoredArray:
        """What the reductions read: an expression tree or a stored array."""
        raise NotImplementedError

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
    @documented(
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
    @documented(
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
    @documented(
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
    @documented(
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
