"""What the Array API standard asks of an array object beyond NumPy's protocols: its
namespace, its device, DLPack (refused: nothing is in memory to share) and the conversions of
0-d arrays to Python numbers.  A base class of the compute layer's array types.

The public namespace (``oocarray.array_api``, a higher layer) registers its module object
here when imported, so ``__array_namespace__`` returns it without this layer importing it.
"""

from __future__ import annotations

import types
from typing import Any

import numpy as np

from oocarray._compute._nodes import Node
from oocarray._storage import StoredArray

__all__ = ["StandardArray", "use_namespace"]

_NAMESPACE: list[types.ModuleType] = []
_API_VERSIONS = ("2021.12", "2022.12", "2023.12", "2024.12")


def use_namespace(module: types.ModuleType) -> None:
    """Make ``x.__array_namespace__()`` return ``module`` (``oocarray.array_api`` passes itself)."""
    _NAMESPACE[:] = [module]


class StandardArray:
    """The standard's array attributes; a subclass says what it computes (:meth:`_tree`)."""

    def _tree(self) -> Node | StoredArray:
        raise NotImplementedError

    def __array_namespace__(self, *, api_version: str | None = None) -> types.ModuleType:
        """The Array API namespace of chunked arrays: the module ``oocarray.array_api``."""
        if api_version is not None and api_version not in _API_VERSIONS:
            raise ValueError(
                f"api_version {api_version!r} is not supported; oocarray.array_api implements "
                f"the {_API_VERSIONS[-1]} standard (and takes {', '.join(_API_VERSIONS)})"
            )
        if not _NAMESPACE:
            raise RuntimeError("import oocarray (or oocarray.array_api) to use the namespace")
        return _NAMESPACE[0]

    @property
    def device(self) -> str:
        """Where the array's values are computed: always ``"cpu"``.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> oc.from_numpy(np.arange(3)).device
        'cpu'
        """
        return "cpu"

    def to_device(self, device: Any, /, *, stream: Any = None) -> StandardArray:
        """The array itself on ``"cpu"``, its only device.

        Parameters
        ----------
        device
            ``"cpu"``.
        stream
            ``None`` (no streams on the CPU).

        Returns
        -------
        ChunkedArray or Expr
            The array itself.

        Raises
        ------
        ValueError
            Another device, or a stream.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> x = oc.from_numpy(np.arange(3))
        >>> x.to_device("cpu") is x
        True
        """
        if device != "cpu" or stream is not None:
            raise ValueError(f"oocarray arrays live on 'cpu' only, got device={device!r}")
        return self

    def __dlpack__(self, **kwargs: Any) -> Any:
        raise TypeError(
            "chunked arrays and expressions have no memory to share through DLPack (the values "
            "are on disk or not computed yet): compute() a part, or np.asarray(x) to load it"
        )

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)  # DLPack's kDLCPU, device 0

    def _python_scalar(self, kind: type) -> Any:
        """The value of a 0-d array as a Python ``kind`` (the standard's ``float(x)``...)."""
        if self._tree().shape != ():
            raise TypeError(
                f"only 0-d arrays convert to a Python {kind.__name__}; index one element first"
            )
        return kind(np.asarray(self).item())

    def __float__(self) -> float:
        return float(self._python_scalar(float))

    def __int__(self) -> int:
        return int(self._python_scalar(int))

    def __complex__(self) -> complex:
        return complex(self._python_scalar(complex))

    def __index__(self) -> int:
        if not np.issubdtype(self._tree().dtype, np.integer):
            raise TypeError("only integer arrays are indices (__index__)")
        return int(self._python_scalar(int))
