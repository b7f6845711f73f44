"""The reductions chunked arrays and expressions answer, typed: ``compute=False`` gives a
:class:`LazyResult` (for :func:`oocarray.compute`), anything else the value.

:class:`Reductions` is a base class of the compute layer's array types (``_compute._array``);
each reduction reads its input once, in one streaming pass over the chunks.  The extremes
(``min``, ``max``, ``argmin``, ``argmax``) are its base class's, in
``_compute._extreme_reductions``; the docstrings are written by ``_compute._reduction_docs``.
"""

from __future__ import annotations

from typing import Any, Literal, overload

from oocarray._compute._extreme_reductions import ExtremeReductions
from oocarray._compute._nodes import Node
from oocarray._compute._ops import LazyResult, reduce_lazy
from oocarray._compute._reduction_docs import documented
from oocarray._storage import StoredArray

__all__ = ["Reductions"]


class Reductions(ExtremeReductions):
    """Streaming reductions (the extremes inherited from :class:`ExtremeReductions`); a subclass
    says what they read (:meth:`_tree`)."""

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
    @documented(
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
    @documented(
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
    @documented(
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
    @documented(
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
    @documented(
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
    @documented(
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
    @documented(
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
    @documented(
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
