"""The methods of the compute layer's array types that change the shape or the order of the
axes, lazily: ``T``, ``mT``, ``transpose``, ``swapaxes``, ``reshape``, ``squeeze``, ``ravel``
and ``flatten``.  A base class of ``LazyArray`` (``_compute._array``).

The class is generic in the expression type (``ExprT``), which is defined above this module
with the array types; they make one from a tree (:meth:`ShapeMethods._lazy`).
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from oocarray._compute._nodes import Node
from oocarray._compute._rearrange import permute_dims, swapaxes
from oocarray._compute._reshape import ravel, reshape, squeeze
from oocarray._storage import StoredArray

__all__ = ["ShapeMethods"]

# The expression type of the array types (``Expr``).
ExprT = TypeVar("ExprT")


class ShapeMethods(Generic[ExprT]):
    """Reshaping and axis permutations, lazy; a subclass says what they rearrange
    (:meth:`_tree`) and how an expression is made (:meth:`_lazy`)."""

    def _tree(self) -> Node | StoredArray:
        """What the methods rearrange: an expression tree or a stored array."""
        raise NotImplementedError

    def _lazy(self, node: Any) -> ExprT:
        """An expression over ``node``."""
        raise NotImplementedError

    @property
    def T(self) -> ExprT:
        """The axes reversed, lazily (``np.transpose``).

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> x = oc.from_numpy(np.arange(6).reshape(2, 3))
        >>> x.T.shape, x.T[2]
        ((3, 2), array([2, 5]))
        """
        return self._lazy(permute_dims(self._tree()))

    @property
    def mT(self) -> ExprT:
        """The last two axes swapped, lazily (a stack of matrices transposed).

        Raises
        ------
        ValueError
            The array has fewer than 2 dimensions.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> x = oc.from_numpy(np.zeros((5, 2, 3)))
        >>> x.mT.shape
        (5, 3, 2)
        """
        ndim = self._tree().ndim
        if ndim < 2:
            raise ValueError("mT needs an array of at least 2 dimensions")
        order = [*range(ndim - 2), ndim - 1, ndim - 2]
        return self._lazy(permute_dims(self._tree(), order))

    def transpose(self, *axes: Any) -> ExprT:
        """The axes permuted (reversed by default), lazily.

        Parameters
        ----------
        *axes : int or tuple of int
            The new order of the axes, as separate ints or one tuple; none reverses them.

        Returns
        -------
        Expr
            The lazy, permuted array.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> x = oc.from_numpy(np.zeros((2, 3, 4)))
        >>> (x.transpose().shape, x.transpose(1, 0, 2).shape)
        ((4, 3, 2), (3, 2, 4))
        """
        order = axes[0] if len(axes) == 1 and not isinstance(axes[0], int) else axes
        return self._lazy(permute_dims(self._tree(), order or None))

    def swapaxes(self, axis1: int, axis2: int) -> ExprT:
        """Two axes interchanged, lazily (``np.swapaxes``).

        Parameters
        ----------
        axis1, axis2 : int
            The axes to interchange.

        Returns
        -------
        Expr
            The lazy array with those axes swapped.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> oc.from_numpy(np.zeros((2, 3, 4))).swapaxes(0, 2).shape
        (4, 3, 2)
        """
        return self._lazy(swapaxes(self._tree(), axis1, axis2))

    def reshape(self, *shape: Any, order: str = "C") -> ExprT:
        """The elements in a new shape, in C order (``-1``: the length that fits).

        Lazy when blocks of the result line up with bands of the input's chunks; otherwise
        the result is streamed once into a temporary chunked array (never loaded whole).

        Parameters
        ----------
        *shape : int or tuple of int
            The new shape, as separate ints or one tuple; one length may be ``-1``.
        order
            ``"C"`` (the only order supported).

        Returns
        -------
        Expr
            The reshaped array.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> x = oc.from_numpy(np.arange(12).reshape(4, 3), chunks=(2, 3))
        >>> x.reshape(2, -1)[1]
        array([ 6,  7,  8,  9, 10, 11])
        """
        wanted = shape[0] if len(shape) == 1 and not isinstance(shape[0], int) else shape
        return self._lazy(reshape(self._tree(), wanted, order))

    def squeeze(self, axis: Any = None) -> ExprT:
        """Axes of length 1 removed (all of them, or ``axis``), lazily.

        Parameters
        ----------
        axis : int or tuple of int, optional
            The axes to remove; each must have length 1.  Default: every axis of length 1.

        Returns
        -------
        Expr
            The lazy array without those axes.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> oc.from_numpy(np.zeros((1, 3, 1))).squeeze().shape
        (3,)
        """
        return self._lazy(squeeze(self._tree(), axis))

    def ravel(self, order: str = "C") -> ExprT:
        """The elements along one axis in C order (as :meth:`reshape` of ``-1``).

        Parameters
        ----------
        order
            ``"C"`` (the only order supported).

        Returns
        -------
        Expr
            The 1-d array.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> oc.from_numpy(np.arange(6).reshape(2, 3)).ravel()[...]
        array([0, 1, 2, 3, 4, 5])
        """
        return self._lazy(ravel(self._tree(), order))

    def flatten(self, order: str = "C") -> ExprT:
        """The elements along one axis in C order (as :meth:`ravel`).

        Parameters
        ----------
        order
            ``"C"`` (the only order supported).

        Returns
        -------
        Expr
            The 1-d array.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> oc.from_numpy(np.arange(6).reshape(2, 3)).flatten().shape
        (6,)
        """
        return self._lazy(ravel(self._tree(), order))
