"""Data stores for ``engine="oocarray"``: xarray's own zarr and h5netcdf stores read the
metadata (dimensions, attributes, encodings, CF conventions), and each numeric variable's
data is swapped for a lazy :class:`OOCArrayBackendArray` over oocarray's native chunk reader."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from xarray.backends.common import AbstractDataStore, BackendArray
from xarray.core import indexing
from xarray.core.variable import Variable

from oocarray._compute._array import ChunkedArray
from oocarray._compute._constructors import open as open_chunked

# Kinds oocarray's chunk reader handles; strings and objects stay with zarr-python / h5py,
# which decode their variable-length encodings.
_NATIVE_KINDS = frozenset("biufc")

#: Finds a variable's array for oocarray: (its location, its dataset path) or None.  The
#: locators below are classes, not closures, so that opened datasets pickle (dask workers).
Locator = Callable[[str], "tuple[Any, str] | None"]


class OOCArrayBackendArray(BackendArray):
    """A variable's data, read lazily through oocarray's chunk reader.

    Parameters
    ----------
    chunked
        The oocarray array holding the variable; the ``chunked_array_type="oocarray"``
        chunk manager takes it from here to compute on it directly.

    Examples
    --------
    >>> ds = xr.open_dataset("cube.zarr", engine="oocarray")  # doctest: +SKIP
    >>> ds.t2m.variable._data.array.array.chunked  # doctest: +SKIP
    <oocarray.ChunkedArray shape=(365, 90, 180) ...>
    """

    def __init__(self, chunked: ChunkedArray) -> None:
        self.chunked = chunked
        self.shape = tuple(chunked.shape)
        self.dtype = np.dtype(chunked.dtype)

    def __getitem__(self, key: indexing.ExplicitIndexer) -> Any:
        # oocarray reads slices and integers on every axis and an integer array on one.
        return indexing.explicit_indexing_adapter(
            key, self.shape, indexing.IndexingSupport.OUTER_1VECTOR, self._read
        )

    def _read(self, key: tuple[Any, ...]) -> np.ndarray:
        return np.asarray(self.chunked[key])


class OOCArrayStore(AbstractDataStore):
    """xarray's store ``inner`` with its numeric variables read through oocarray.

    Parameters
    ----------
    inner
        An opened ``ZarrStore`` or ``H5NetCDFStore``: the source of metadata.
    locate
        Where oocarray finds a variable's array, given the variable's name.
    storage_options
        The object store's settings, for URLs.
    """

    def __init__(
        self,
        inner: AbstractDataStore,
        locate: Locator,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.inner: Any = inner  # xarray's stores are untyped
        self._locate = locate
        self._storage_options = storage_options
        self._opened: list[ChunkedArray] = []

    def load(self) -> tuple[dict[str, Variable], dict[str, Any]]:
        variables, attributes = self.inner.load()
        swapped = {name: self._through_oocarray(name, var) for name, var in variables.items()}
        return swapped, dict(attributes)

    def _through_oocarray(self, name: str, var: Variable) -> Variable:
        if var.dtype.kind not in _NATIVE_KINDS or var.ndim == 0:
            return var
        where = self._locate(name)
        if where is None:
            return var
        location, dataset = where
        chunked = open_chunked(location, dataset=dataset, storage_options=self._storage_options)
        if chunked.dtype != var.dtype or tuple(chunked.shape) != var.shape:
            # Byte order or a layout oocarray reads differently: keep xarray's reader.
            chunked.close()
            return var
        self._opened.append(chunked)
        data = indexing.LazilyIndexedArray(OOCArrayBackendArray(chunked))
        return Variable(var.dims, data, var.attrs, var.encoding)

    def get_dimensions(self) -> Any:
        return self.inner.get_dimensions()

    def get_attrs(self) -> Any:
        return self.inner.get_attrs()

    def get_variables(self) -> Any:
        return self.load()[0]

    def get_encoding(self) -> dict[str, Any]:
        return dict(self.inner.get_encoding())

    def close(self, **kwargs: Any) -> None:
        for chunked in self._opened:
            chunked.close()
        self._opened.clear()
        self.inner.close(**kwargs)


class ZarrLocator:
    """Locate variables of the zarr ``ZarrStore`` ``inner`` inside ``root``."""

    def __init__(self, root: Any, inner: Any) -> None:
        self.root = root
        self.inner = inner

    def __call__(self, name: str) -> tuple[Any, str] | None:
        member = self.inner.members.get(name)
        return None if member is None else (self.root, member.path)


class HDF5Locator:
    """Locate variables of the ``H5NetCDFStore`` ``inner`` inside the HDF5 file ``path``."""

    def __init__(self, path: Any, inner: Any) -> None:
        self.path = path
        self.inner = inner

    def __call__(self, name: str) -> tuple[Any, str] | None:
        var = self.inner.ds.variables.get(name)
        return None if var is None else (self.path, var._h5ds.name.lstrip("/"))
