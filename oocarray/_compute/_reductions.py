"""The reductions chunked arrays and expressions answer, typed: ``compute=False`` gives a
:class:`LazyResult` (for :func:`oocarray.compute`), anything else the value.

:class:`Reductions` is a base class of the compute layer's array types (``_compute._array``);
each reduction reads its input once, in one streaming pass over the chunks.
"""

from __future__ import annotations

from typing import Any, Literal, overload

from oocarray._compute._nodes import Node
from oocarray._compute._ops import LazyResult, reduce_lazy
from oocarray._storage import StoredArray

__all__ = ["Reductions"]


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
    def sum(
        self,
        axis: Any = None,
        dtype: Any = None,
        keepdims: bool = False,
        compute: bool = True,
        progress: bool = True,
    ) -> Any:
        """Sum in one streaming pass.

        Parameters
        ----------
        axis : int or tuple of int, optional
            The axes to reduce; all of them by default.
        dtype : optional
            The accumulator's and result's dtype; by default NumPy's for this reduction.
        keepdims
            Keep the reduced axes with length 1 (default ``False``).
        compute
            ``True`` (default): compute now.  ``False``: return a
            :class:`~oocarray.LazyResult` to compute with others in one pass
            (:func:`oocarray.compute`).
        progress
            Show a progress bar (default ``True``).

        Returns
        -------
        numpy.ndarray, NumPy scalar or LazyResult
            The sum, as NumPy gives it for the same data;
            a lazy result with ``compute=False``.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> x = oc.from_numpy(np.arange(6.0).reshape(2, 3), chunks=(1, 3))
        >>> x.sum(axis=0, progress=False)
        array([3., 5., 7.])
        """
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
    def prod(
        self,
        axis: Any = None,
        dtype: Any = None,
        keepdims: bool = False,
        compute: bool = True,
        progress: bool = True,
    ) -> Any:
        """Product in one streaming pass.

        Parameters
        ----------
        axis : int or tuple of int, optional
            The axes to reduce; all of them by default.
        dtype : optional
            The accumulator's and result's dtype; by default NumPy's for this reduction.
        keepdims
            Keep the reduced axes with length 1 (default ``False``).
        compute
            ``True`` (default): compute now.  ``False``: return a
            :class:`~oocarray.LazyResult` to compute with others in one pass
            (:func:`oocarray.compute`).
        progress
            Show a progress bar (default ``True``).

        Returns
        -------
        numpy.ndarray, NumPy scalar or LazyResult
            The product, as NumPy gives it for the same data;
            a lazy result with ``compute=False``.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> x = oc.from_numpy(np.arange(6.0).reshape(2, 3), chunks=(1, 3))
        >>> x.prod(axis=1, progress=False)
        array([ 0., 60.])
        """
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
    def mean(
        self,
        axis: Any = None,
        dtype: Any = None,
        keepdims: bool = False,
        compute: bool = True,
        progress: bool = True,
    ) -> Any:
        """Mean in one streaming pass.

        Parameters
        ----------
        axis : int or tuple of int, optional
            The axes to reduce; all of them by default.
        dtype : optional
            The accumulator's and result's dtype; by default NumPy's for this reduction.
        keepdims
            Keep the reduced axes with length 1 (default ``False``).
        compute
            ``True`` (default): compute now.  ``False``: return a
            :class:`~oocarray.LazyResult` to compute with others in one pass
            (:func:`oocarray.compute`).
        progress
            Show a progress bar (default ``True``).

        Returns
        -------
        numpy.ndarray, NumPy scalar or LazyResult
            The mean, as NumPy gives it for the same data;
            a lazy result with ``compute=False``.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> x = oc.from_numpy(np.arange(6.0).reshape(2, 3), chunks=(1, 3))
        >>> x.mean(progress=False)
        np.float64(2.5)
        """
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
    def var(
        self,
        axis: Any = None,
        dtype: Any = None,
        ddof: int = 0,
        keepdims: bool = False,
        compute: bool = True,
        progress: bool = True,
    ) -> Any:
        """Variance in one streaming pass, merging chunk moments.

        Parameters
        ----------
        axis : int or tuple of int, optional
            The axes to reduce; all of them by default.
        dtype : optional
            The accumulator's and result's dtype; by default NumPy's for this reduction.
        ddof
            Delta degrees of freedom: the divisor is ``N - ddof`` (default 0).
        keepdims
            Keep the reduced axes with length 1 (default ``False``).
        compute
            ``True`` (default): compute now.  ``False``: return a
            :class:`~oocarray.LazyResult` to compute with others in one pass
            (:func:`oocarray.compute`).
        progress
            Show a progress bar (default ``True``).

        Returns
        -------
        numpy.ndarray, NumPy scalar or LazyResult
            The variance, as NumPy gives it for the same data;
            a lazy result with ``compute=False``.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> x = oc.from_numpy(np.arange(6.0).reshape(2, 3), chunks=(1, 3))
        >>> x.var(axis=0, progress=False)
        array([2.25, 2.25, 2.25])
        """
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
    def std(
        self,
        axis: Any = None,
        dtype: Any = None,
        ddof: int = 0,
        keepdims: bool = False,
        compute: bool = True,
        progress: bool = True,
    ) -> Any:
        """Standard deviation in one streaming pass, merging chunk moments.

        Parameters
        ----------
        axis : int or tuple of int, optional
            The axes to reduce; all of them by default.
        dtype : optional
            The accumulator's and result's dtype; by default NumPy's for this reduction.
        ddof
            Delta degrees of freedom: the divisor is ``N - ddof`` (default 0).
        keepdims
            Keep the reduced axes with length 1 (default ``False``).
        compute
            ``True`` (default): compute now.  ``False``: return a
            :class:`~oocarray.LazyResult` to compute with others in one pass
            (:func:`oocarray.compute`).
        progress
            Show a progress bar (default ``True``).

        Returns
        -------
        numpy.ndarray, NumPy scalar or LazyResult
            The standard deviation, as NumPy gives it for the same data;
            a lazy result with ``compute=False``.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> x = oc.from_numpy(np.arange(6.0).reshape(2, 3), chunks=(1, 3))
        >>> x.std(ddof=1, progress=False)
        np.float64(1.8708286933869707)
        """
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
    def min(
        self, axis: Any = None, keepdims: bool = False, compute: bool = True, progress: bool = True
    ) -> Any:
        """Minimum in one streaming pass.

        Parameters
        ----------
        axis : int or tuple of int, optional
            The axes to reduce; all of them by default.
        keepdims
            Keep the reduced axes with length 1 (default ``False``).
        compute
            ``True`` (default): compute now.  ``False``: return a
            :class:`~oocarray.LazyResult` to compute with others in one pass
            (:func:`oocarray.compute`).
        progress
            Show a progress bar (default ``True``).

        Returns
        -------
        numpy.ndarray, NumPy scalar or LazyResult
            The minimum, as NumPy gives it for the same data;
            a lazy result with ``compute=False``.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> x = oc.from_numpy(np.arange(6.0).reshape(2, 3), chunks=(1, 3))
        >>> x.min(axis=1, progress=False)
        array([0., 3.])
        """
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
    def max(
        self, axis: Any = None, keepdims: bool = False, compute: bool = True, progress: bool = True
    ) -> Any:
        """Maximum in one streaming pass.

        Parameters
        ----------
        axis : int or tuple of int, optional
            The axes to reduce; all of them by default.
        keepdims
            Keep the reduced axes with length 1 (default ``False``).
        compute
            ``True`` (default): compute now.  ``False``: return a
            :class:`~oocarray.LazyResult` to compute with others in one pass
            (:func:`oocarray.compute`).
        progress
            Show a progress bar (default ``True``).

        Returns
        -------
        numpy.ndarray, NumPy scalar or LazyResult
            The maximum, as NumPy gives it for the same data;
            a lazy result with ``compute=False``.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> x = oc.from_numpy(np.arange(6.0).reshape(2, 3), chunks=(1, 3))
        >>> x.max(axis=1, keepdims=True, progress=False)
        array([[2.],
               [5.]])
        """
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
    def any(
        self, axis: Any = None, keepdims: bool = False, compute: bool = True, progress: bool = True
    ) -> Any:
        """Whether any element is true, in one streaming pass.

        Parameters
        ----------
        axis : int or tuple of int, optional
            The axes to reduce; all of them by default.
        keepdims
            Keep the reduced axes with length 1 (default ``False``).
        compute
            ``True`` (default): compute now.  ``False``: return a
            :class:`~oocarray.LazyResult` to compute with others in one pass
            (:func:`oocarray.compute`).
        progress
            Show a progress bar (default ``True``).

        Returns
        -------
        numpy.ndarray, NumPy scalar or LazyResult
            Whether any is true, as NumPy gives it for the same data;
            a lazy result with ``compute=False``.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> x = oc.from_numpy(np.arange(6.0).reshape(2, 3), chunks=(1, 3))
        >>> (x > 4).any(axis=1, progress=False)
        array([False,  True])
        """
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
    def all(
        self, axis: Any = None, keepdims: bool = False, compute: bool = True, progress: bool = True
    ) -> Any:
        """Whether every element is true, in one streaming pass.

        Parameters
        ----------
        axis : int or tuple of int, optional
            The axes to reduce; all of them by default.
        keepdims
            Keep the reduced axes with length 1 (default ``False``).
        compute
            ``True`` (default): compute now.  ``False``: return a
            :class:`~oocarray.LazyResult` to compute with others in one pass
            (:func:`oocarray.compute`).
        progress
            Show a progress bar (default ``True``).

        Returns
        -------
        numpy.ndarray, NumPy scalar or LazyResult
            Whether all are true, as NumPy gives it for the same data;
            a lazy result with ``compute=False``.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> x = oc.from_numpy(np.arange(6.0).reshape(2, 3), chunks=(1, 3))
        >>> (x >= 0).all(progress=False)
        np.True_
        """
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
    def argmin(
        self, axis: Any = None, keepdims: bool = False, compute: bool = True, progress: bool = True
    ) -> Any:
        """Position of the minimum, in one streaming pass.

        Parameters
        ----------
        axis : int or tuple of int, optional
            The axes to reduce; all of them by default.
        keepdims
            Keep the reduced axes with length 1 (default ``False``).
        compute
            ``True`` (default): compute now.  ``False``: return a
            :class:`~oocarray.LazyResult` to compute with others in one pass
            (:func:`oocarray.compute`).
        progress
            Show a progress bar (default ``True``).

        Returns
        -------
        numpy.ndarray, NumPy scalar or LazyResult
            The index of the first minimum, as NumPy gives it for the same data;
            a lazy result with ``compute=False``.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> x = oc.from_numpy(np.arange(6.0).reshape(2, 3), chunks=(1, 3))
        >>> x.argmin(axis=1, progress=False)
        array([0, 0])
        """
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
    def argmax(
        self, axis: Any = None, keepdims: bool = False, compute: bool = True, progress: bool = True
    ) -> Any:
        """Position of the maximum, in one streaming pass.

        Parameters
        ----------
        axis : int or tuple of int, optional
            The axes to reduce; all of them by default.
        keepdims
            Keep the reduced axes with length 1 (default ``False``).
        compute
            ``True`` (default): compute now.  ``False``: return a
            :class:`~oocarray.LazyResult` to compute with others in one pass
            (:func:`oocarray.compute`).
        progress
            Show a progress bar (default ``True``).

        Returns
        -------
        numpy.ndarray, NumPy scalar or LazyResult
            The flat index (or the index along ``axis``) of the first maximum, as NumPy
            gives it for the same data;
            a lazy result with ``compute=False``.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> x = oc.from_numpy(np.arange(6.0).reshape(2, 3), chunks=(1, 3))
        >>> x.argmax(progress=False)
        np.int64(5)
        """
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
    def count_nonzero(
        self, axis: Any = None, keepdims: bool = False, compute: bool = True, progress: bool = True
    ) -> Any:
        """Number of non-zero elements, in one streaming pass.

        Parameters
        ----------
        axis : int or tuple of int, optional
            The axes to reduce; all of them by default.
        keepdims
            Keep the reduced axes with length 1 (default ``False``).
        compute
            ``True`` (default): compute now.  ``False``: return a
            :class:`~oocarray.LazyResult` to compute with others in one pass
            (:func:`oocarray.compute`).
        progress
            Show a progress bar (default ``True``).

        Returns
        -------
        numpy.ndarray, NumPy scalar or LazyResult
            The count, as NumPy gives it for the same data;
            a lazy result with ``compute=False``.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> x = oc.from_numpy(np.arange(6.0).reshape(2, 3), chunks=(1, 3))
        >>> x.count_nonzero(axis=0, progress=False)
        array([1, 2, 2])
        """
        return reduce_lazy(
            "count_nonzero", self._tree(), axis, None, keepdims, compute=compute, progress=progress
        )
