"""A manager taking arrays over: ``m.attach`` (from any manager) and ``m.keep`` (an intended
escape), as a mixin of :class:`~oocarray.Manager` (whose methods they are)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

from oocarray import _native
from oocarray._memory import _tracing
from oocarray._memory._arguments import require_array
from oocarray._memory._refusals import report_budget_refusal
from oocarray._memory._registry import open_owner
from oocarray.errors import MemoryBudgetError

__all__ = ["ManagerOwnership"]


class ManagerOwnership:
    """The transfers of :class:`~oocarray.Manager`: arrays it takes from other managers."""

    _node: _native.Node

    if TYPE_CHECKING:

        @property
        def name(self) -> str: ...

        def _check_open(self) -> None: ...

        def _subtree(self) -> Iterator[ManagerOwnership]: ...

    def _owns_in_subtree(self, node_id: int) -> bool:
        return any(m._node.id == node_id for m in self._subtree())

    def _transfer(self, arr: np.ndarray, *, kept: bool) -> None:
        refused = _native.transfer(arr, self._node, kept)
        if refused is not None:
            refused_id, limit, used = refused
            info = _native.block_info(arr)
            size = info[2] if info else arr.nbytes
            raise MemoryBudgetError(report_budget_refusal(size, self, refused_id, limit, used))
        info = _native.block_info(arr)
        if info is not None:
            _tracing.set_owner(info[1], self._node.id)

    def attach(self, arr: np.ndarray) -> np.ndarray:
        """Take ownership of a managed array (counted against this manager's budget).

        Parameters
        ----------
        arr
            An array whose memory oocarray manages (allocated under any manager).

        Returns
        -------
        numpy.ndarray
            ``arr`` itself, now owned by this manager.

        Raises
        ------
        ClosedError
            This manager is closed.
        ValueError
            ``arr`` was not allocated by oocarray; copy it in with :meth:`asarray`.
        MemoryBudgetError
            The array does not fit in this manager's budget.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> with oc.Manager("a") as a, oc.Manager("b") as b:
        ...     x = a.zeros(4)
        ...     (oc.owner(b.attach(x)) is b, b.stats().current_bytes)
        (True, 32)
        """
        require_array(arr, "attach")
        self._check_open()
        if _native.block_info(arr) is None:
            raise ValueError(
                "attach() takes arrays allocated by oocarray; this one was not, "
                "so copy it in with m.asarray(arr)"
            )
        self._transfer(arr, kept=False)
        return arr

    def keep(self, arr: np.ndarray) -> np.ndarray:
        """Mark ``arr`` as an intended escape: it is handed to the parent when this manager
        closes, without counting as a leak.

        Parameters
        ----------
        arr
            An array owned by this manager or one of its descendants.

        Returns
        -------
        numpy.ndarray
            ``arr`` itself.

        Raises
        ------
        ValueError
            ``arr`` is not owned by this manager or one of its descendants.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> with oc.Manager(on_close="raise") as m:
        ...     result = m.keep(np.ones(3))
        >>> oc.owner(result) is oc.system()
        True
        """
        require_array(arr, "keep")
        info = _native.block_info(arr)
        if info is None or not self._owns_in_subtree(info[0]):
            holder = None if info is None else open_owner(info[0])
            raise ValueError(
                f"keep() takes arrays owned by manager {self.name!r} or its children; this one "
                f"is owned by {holder.name if holder else 'no manager'!r}"
            )
        self._transfer(arr, kept=True)
        return arr
