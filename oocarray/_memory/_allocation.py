"""A manager's explicit allocation: ``m.empty``, ``m.zeros``, ``m.full`` and ``m.asarray``,
as a mixin of :class:`~oocarray.Manager` (whose methods they are)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from oocarray import _native
from oocarray._memory._activation import Activation
from oocarray._memory._shapes import parse_shape

__all__ = ["ManagerAllocation"]


class ManagerAllocation:
    """The constructors of :class:`~oocarray.Manager`: new arrays owned by the manager."""

    _node: _native.Node

    if TYPE_CHECKING:

        def _check_open(self) -> None: ...

        def activate(self) -> Activation: ...

    def empty(self, shape: object, dtype: npt.DTypeLike = float, *, order: str = "C") -> np.ndarray:
        """A new uninitialised array owned by this manager (like :func:`numpy.empty`).

        Parameters
        ----------
        shape
            An int or a tuple of ints.
        dtype
            The data type (default ``float``).
        order
            ``"C"`` (default) or ``"F"`` memory layout.

        Returns
        -------
        numpy.ndarray
            The array, counted against this manager's budget.

        Raises
        ------
        ClosedError
            This manager is closed.
        MemoryBudgetError
            The array does not fit and the spill policy is ``"fail"``.

        Examples
        --------
        >>> import oocarray as oc
        >>> with oc.Manager() as m:
        ...     a = m.empty((10, 10))
        ...     (a.shape, oc.owner(a) is m)
        ((10, 10), True)
        """
        dims = parse_shape(shape)
        self._check_open()
        with self.activate():
            return np.empty(dims, dtype=dtype, order=order)  # type: ignore[call-overload,no-any-return]

    def zeros(self, shape: object, dtype: npt.DTypeLike = float, *, order: str = "C") -> np.ndarray:
        """A new zero-filled array owned by this manager (like :func:`numpy.zeros`).

        Parameters
        ----------
        shape
            An int or a tuple of ints.
        dtype
            The data type (default ``float``).
        order
            ``"C"`` (default) or ``"F"`` memory layout.

        Returns
        -------
        numpy.ndarray
            The array, counted against this manager's budget.

        Raises
        ------
        ClosedError
            This manager is closed.
        MemoryBudgetError
            The array does not fit and the spill policy is ``"fail"``.

        Examples
        --------
        >>> import oocarray as oc
        >>> with oc.Manager() as m:
        ...     m.zeros(3, dtype="int8")
        array([0, 0, 0], dtype=int8)
        """
        dims = parse_shape(shape)
        self._check_open()
        with self.activate():
            return np.zeros(dims, dtype=dtype, order=order)  # type: ignore[call-overload,no-any-return]

    def full(
        self,
        shape: object,
        fill_value: object,
        dtype: npt.DTypeLike | None = None,
        *,
        order: str = "C",
    ) -> np.ndarray:
        """A new array filled with ``fill_value``, owned by this manager (like
        :func:`numpy.full`).

        Parameters
        ----------
        shape
            An int or a tuple of ints.
        fill_value
            The value of every element.
        dtype
            The data type; by default that of ``fill_value``.
        order
            ``"C"`` (default) or ``"F"`` memory layout.

        Returns
        -------
        numpy.ndarray
            The array, counted against this manager's budget.

        Raises
        ------
        ClosedError
            This manager is closed.
        MemoryBudgetError
            The array does not fit and the spill policy is ``"fail"``.

        Examples
        --------
        >>> import oocarray as oc
        >>> with oc.Manager() as m:
        ...     m.full(3, 7)
        array([7, 7, 7])
        """
        dims = parse_shape(shape)
        self._check_open()
        with self.activate():
            return np.full(dims, fill_value, dtype=dtype, order=order)  # type: ignore[call-overload,no-any-return]

    def asarray(self, obj: object, dtype: npt.DTypeLike | None = None) -> np.ndarray:
        """``obj`` as an array owned by this manager: the array itself if it already is one,
        else a copy made in this manager.

        Parameters
        ----------
        obj
            An array or anything :func:`numpy.array` takes.
        dtype
            The data type; by default that of ``obj``.

        Returns
        -------
        numpy.ndarray
            ``obj`` itself when this manager owns it with that dtype, else a copy it owns.

        Raises
        ------
        ClosedError
            This manager is closed.
        MemoryBudgetError
            The copy does not fit and the spill policy is ``"fail"``.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> outside = np.arange(3)
        >>> with oc.Manager() as m:
        ...     inside = m.asarray(outside)
        ...     (oc.owner(inside) is m, m.asarray(inside) is inside)
        (True, True)
        """
        self._check_open()
        if isinstance(obj, np.ndarray) and (dtype is None or obj.dtype == np.dtype(dtype)):
            info = _native.block_info(obj)
            if info is not None and info[0] == self._node.id:
                return obj
        with self.activate():
            return np.array(obj, dtype=dtype, copy=True)
