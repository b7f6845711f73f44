"""``astype``: a lazy cast, refusing what the standard leaves undefined (complex to real)."""

from __future__ import annotations

from typing import Any

import numpy as np

from oocarray._compute._array import Expr
from oocarray._compute._namespace._common import check_array, tree
from oocarray._compute._namespace._creation import check_device, store

__all__ = ["astype"]


def astype(x: Any, dtype: Any, /, *, copy: bool = True, device: Any = None) -> Any:
    """``x`` as ``dtype``, lazily (``copy=False`` and the same dtype: ``x`` itself).

    Examples
    --------
    >>> import numpy as np, oocarray as oc, oocarray.array_api as xp
    >>> x = oc.from_numpy(np.array([1.5, -2.5]), chunks=1)
    >>> np.asarray(xp.astype(x, xp.int8))
    array([ 1, -2], dtype=int8)
    """
    check_array(x, "astype")
    check_device(device, "astype")
    target = np.dtype(dtype)
    if x.dtype.kind == "c" and target.kind != "c":
        raise TypeError(
            f"astype from {x.dtype} to {target} is not defined by the standard: take real(x) or "
            "abs(x) first"
        )
    if target == x.dtype:
        return store(tree(x)) if copy else x
    return Expr(tree(x.astype(target)))
