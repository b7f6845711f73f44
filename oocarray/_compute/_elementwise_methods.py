"""Python's operators and the elementwise methods (``astype``, ``clip``, ``round``,
``map_blocks``) of the compute layer's array types: each gives a lazy expression, computed
block by block.  A base class of ``LazyArray`` (``_compute._array``).

The expression type is defined above this module, in ``_compute._array``, with the array
types: the class is generic in it (``ExprT``) and asks the array type to make one
(:meth:`ElementwiseMethods._lazy`) and to convert between expressions and their trees
(:meth:`ElementwiseMethods._unwrapped`, :meth:`ElementwiseMethods._wrapped`).  The operators
call the ufuncs directly rather than through NumPy's ``NDArrayOperatorsMixin``, which would
differ: it adds in-place operators (``x += 1`` would ask for ``out=``, refused, instead of
rebinding ``x`` to an expression) and ``divmod``, and defers to operands whose
``__array_ufunc__`` is None.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

import numpy as np

from oocarray._compute import _build
from oocarray._compute._nodes import Node
from oocarray._compute._ops import apply_ufunc, array_ufunc, clip
from oocarray._storage import StoredArray

__all__ = ["ElementwiseMethods"]

# The expression type of the array types (``Expr``).
ExprT = TypeVar("ExprT")


class ElementwiseMethods(Generic[ExprT]):
    """Operators and elementwise methods, lazy; a subclass says what they compute on
    (:meth:`_tree`) and how an expression is made (:meth:`_lazy`, :meth:`_unwrapped`,
    :meth:`_wrapped`)."""

    def _tree(self) -> Node | StoredArray:
        """What the methods compute on: an expression tree or a stored array."""
        raise NotImplementedError

    def _lazy(self, node: Any) -> ExprT:
        """An expression over ``node``."""
        raise NotImplementedError

    @staticmethod
    def _unwrapped(value: Any) -> Any:
        """``value`` with each expression in it (in tuples and lists too) replaced by its tree,
        for ``_compute._ops`` and ``_build``."""
        raise NotImplementedError

    @staticmethod
    def _wrapped(value: Any) -> Any:
        """What ``_compute._ops`` returns, with each tree in it made an expression."""
        raise NotImplementedError

    def _elementwise(self, ufunc: np.ufunc, *inputs: Any) -> ExprT:
        """``ufunc(*inputs)``, lazily."""
        result: ExprT = self._wrapped(apply_ufunc(ufunc, *self._unwrapped(inputs)))
        return result

    # -- operators ------------------------------------------------------------------------
    def __add__(self, other: Any) -> ExprT:
        return self._elementwise(np.add, self, other)

    def __radd__(self, other: Any) -> ExprT:
        return self._elementwise(np.add, other, self)

    def __sub__(self, other: Any) -> ExprT:
        return self._elementwise(np.subtract, self, other)

    def __rsub__(self, other: Any) -> ExprT:
        return self._elementwise(np.subtract, other, self)

    def __mul__(self, other: Any) -> ExprT:
        return self._elementwise(np.multiply, self, other)

    def __rmul__(self, other: Any) -> ExprT:
        return self._elementwise(np.multiply, other, self)

    def __truediv__(self, other: Any) -> ExprT:
        return self._elementwise(np.true_divide, self, other)

    def __rtruediv__(self, other: Any) -> ExprT:
        return self._elementwise(np.true_divide, other, self)

    def __floordiv__(self, other: Any) -> ExprT:
        return self._elementwise(np.floor_divide, self, other)

    def __rfloordiv__(self, other: Any) -> ExprT:
        return self._elementwise(np.floor_divide, other, self)

    def __mod__(self, other: Any) -> ExprT:
        return self._elementwise(np.remainder, self, other)

    def __rmod__(self, other: Any) -> ExprT:
        return self._elementwise(np.remainder, other, self)

    def __pow__(self, other: Any) -> ExprT:
        return self._elementwise(np.power, self, other)

    def __rpow__(self, other: Any) -> ExprT:
        return self._elementwise(np.power, other, self)

    def __and__(self, other: Any) -> ExprT:
        return self._elementwise(np.bitwise_and, self, other)

    def __rand__(self, other: Any) -> ExprT:
        return self._elementwise(np.bitwise_and, other, self)

    def __or__(self, other: Any) -> ExprT:
        return self._elementwise(np.bitwise_or, self, other)

    def __ror__(self, other: Any) -> ExprT:
        return self._elementwise(np.bitwise_or, other, self)

    def __xor__(self, other: Any) -> ExprT:
        return self._elementwise(np.bitwise_xor, self, other)

    def __rxor__(self, other: Any) -> ExprT:
        return self._elementwise(np.bitwise_xor, other, self)

    def __lshift__(self, other: Any) -> ExprT:
        return self._elementwise(np.left_shift, self, other)

    def __rlshift__(self, other: Any) -> ExprT:
        return self._elementwise(np.left_shift, other, self)

    def __rshift__(self, other: Any) -> ExprT:
        return self._elementwise(np.right_shift, self, other)

    def __rrshift__(self, other: Any) -> ExprT:
        return self._elementwise(np.right_shift, other, self)

    def __lt__(self, other: Any) -> ExprT:
        return self._elementwise(np.less, self, other)

    def __le__(self, other: Any) -> ExprT:
        return self._elementwise(np.less_equal, self, other)

    def __gt__(self, other: Any) -> ExprT:
        return self._elementwise(np.greater, self, other)

    def __ge__(self, other: Any) -> ExprT:
        return self._elementwise(np.greater_equal, self, other)

    def __eq__(self, other: Any) -> ExprT:  # type: ignore[override]
        return self._elementwise(np.equal, self, other)

    def __ne__(self, other: Any) -> ExprT:  # type: ignore[override]
        return self._elementwise(np.not_equal, self, other)

    __hash__ = object.__hash__  # arrays stay usable as keys of weak sets and dicts

    def __neg__(self) -> ExprT:
        return self._elementwise(np.negative, self)

    def __pos__(self) -> ExprT:
        return self._elementwise(np.positive, self)

    def __abs__(self) -> ExprT:
        return self._elementwise(np.absolute, self)

    def __invert__(self) -> ExprT:
        return self._elementwise(np.invert, self)

    def __matmul__(self, other: Any) -> Any:
        return self._wrapped(array_ufunc(np.matmul, "__call__", *self._unwrapped((self, other))))

    def __rmatmul__(self, other: Any) -> Any:
        return self._wrapped(array_ufunc(np.matmul, "__call__", *self._unwrapped((other, self))))

    # -- elementwise methods --------------------------------------------------------------
    def astype(self, dtype: Any) -> ExprT:
        """A lazy copy of another dtype.

        Parameters
        ----------
        dtype
            The new data type (anything :class:`numpy.dtype` takes).

        Returns
        -------
        Expr
            The lazy converted array.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> oc.from_numpy(np.arange(3)).astype("float32")[...]
        array([0., 1., 2.], dtype=float32)
        """
        return self._lazy(_build.astype(self._tree(), dtype))

    def clip(self, min: Any = None, max: Any = None) -> ExprT:
        """Values limited to ``[min, max]``, lazily.

        Parameters
        ----------
        min, max : scalar or array, optional
            The lower and upper limits; ``None`` leaves that side open.

        Returns
        -------
        Expr
            The lazy clipped array.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> oc.from_numpy(np.arange(5)).clip(1, 3)[...]
        array([1, 1, 2, 3, 3])
        """
        return self._lazy(clip(self._tree(), self._unwrapped(min), self._unwrapped(max)))

    def round(self, decimals: int = 0) -> ExprT:
        """Values rounded to ``decimals`` decimals, lazily (``np.round``).

        Parameters
        ----------
        decimals
            Decimals to keep (default 0); negative rounds to tens, hundreds, ...

        Returns
        -------
        Expr
            The lazy rounded array.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> oc.from_numpy(np.array([0.123, 4.567])).round(1)[...]
        array([0.1, 4.6])
        """
        return self._lazy(
            _build.elementwise(np.round, self._tree(), name="round", decimals=decimals)
        )

    def map_blocks(self, function: Callable[..., Any], *others: Any, dtype: Any = None) -> ExprT:
        """``function`` applied to aligned blocks of this array (and ``others``), lazily; it
        must return a block of the same shape, of ``dtype``.

        Parameters
        ----------
        function : callable
            Called as ``function(block, *other_blocks)`` with NumPy arrays.
        *others
            Further arrays (chunked arrays, expressions or scalars), broadcast against this one.
        dtype
            The dtype of the blocks ``function`` returns (required).

        Returns
        -------
        Expr
            The lazy result.

        Raises
        ------
        TypeError
            ``dtype`` is not given.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> x = oc.from_numpy(np.arange(4.0), chunks=2)
        >>> x.map_blocks(np.sqrt, dtype="float64")[...]
        array([0.        , 1.        , 1.41421356, 1.73205081])
        """
        return self._lazy(
            _build.map_blocks(function, self._tree(), *self._unwrapped(others), dtype=dtype)
        )
