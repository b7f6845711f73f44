"""The ``engine="oocarray"`` xarray backend: zarr (v2, v3, groups, consolidated or not),
netCDF4/HDF5 files and zarr stores in object stores, opened with xarray's own metadata
readers and CF decoding, their numeric variables read lazily through oocarray's chunk reader."""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterable
from typing import Any

from xarray.backends import BackendEntrypoint
from xarray.backends.common import _iter_nc_groups
from xarray.backends.h5netcdf_ import H5NetCDFStore
from xarray.backends.store import StoreBackendEntrypoint
from xarray.backends.zarr import ZarrStore
from xarray.core.dataset import Dataset
from xarray.core.datatree import DataTree
from xarray.core.utils import close_on_error

from oocarray._xarray._backend_stores import HDF5Locator, OOCArrayStore, ZarrLocator

__all__ = ["OOCArrayBackendEntrypoint"]

_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
_HDF5_SUFFIXES = (".h5", ".hdf5", ".hdf", ".nc", ".nc4", ".he5")
_URL_SCHEMES = ("s3://", "gs://", "gcs://", "az://", "abfs://", "http://", "https://")


def _is_url(path: str) -> bool:
    return path.startswith(_URL_SCHEMES)


def _is_hdf5(path: str) -> bool:
    """Whether the local file ``path`` starts with HDF5's signature (a user block may put it
    at 512, 1024, ... bytes; those files carry one of the HDF5 suffixes and are read too)."""
    try:
        with open(path, "rb") as f:
            return f.read(len(_HDF5_SIGNATURE)) == _HDF5_SIGNATURE
    except OSError:
        return False


def _absolute(group: str | None) -> str:
    """``group`` as an absolute path in the hierarchy ("/" for the root)."""
    return posixpath.normpath("/" + (group or "").strip("/"))


def _normalize(filename_or_obj: Any) -> str:
    """The local path or URL to open, checked to exist when local."""
    if isinstance(filename_or_obj, os.PathLike):
        filename_or_obj = os.fspath(filename_or_obj)
    if not isinstance(filename_or_obj, str):
        raise TypeError(
            "engine='oocarray' opens paths and URLs (str or os.PathLike), not "
            f"{type(filename_or_obj).__name__}; for file objects use engine='h5netcdf'"
        )
    if filename_or_obj.startswith("file://"):
        filename_or_obj = filename_or_obj[len("file://") :]
    if not _is_url(filename_or_obj):
        filename_or_obj = os.path.expanduser(filename_or_obj)
        if not os.path.exists(filename_or_obj):
            raise FileNotFoundError(f"no such file or directory: {filename_or_obj!r}")
    path: str = filename_or_obj
    return path


# obstore's S3 names (as ``oc.open`` takes them) -> s3fs's, for the metadata that xarray reads
# through zarr-python's fsspec store; oocarray's reader takes either spelling.
_S3FS_NAMES = {"access_key_id": "key", "secret_access_key": "secret", "token": "token"}


def _fsspec_options(options: dict[str, Any] | None) -> dict[str, Any] | None:
    """``options`` spelled as s3fs takes them."""
    if not options:
        return options
    translated: dict[str, Any] = {}
    client_kwargs = dict(options.get("client_kwargs") or {})
    for name, value in options.items():
        if name in _S3FS_NAMES:
            translated[_S3FS_NAMES[name]] = value
        elif name == "endpoint":
            translated["endpoint_url"] = value
        elif name == "region":
            client_kwargs["region_name"] = value
        elif name == "skip_signature":
            translated["anon"] = bool(value)
        elif name not in ("client_options", "retry_config", "client_kwargs"):
            translated[name] = value
    if client_kwargs:
        translated["client_kwargs"] = client_kwargs
    return translated


def _zarr_stores(
    path: str,
    group: str | None,
    consolidated: bool | None,
    storage_options: dict[str, Any] | None,
    all_groups: bool,
) -> dict[str, OOCArrayStore]:
    """The zarr group(s) at ``path``, by path in the hierarchy."""
    options = storage_options if _is_url(path) else None
    metadata_options = _fsspec_options(options)
    if all_groups:
        parent = _absolute(group)
        inner_stores = ZarrStore.open_store(
            path,
            group=parent,
            mode="r",
            consolidated=consolidated,
            consolidate_on_close=False,
            storage_options=metadata_options,
        )
    else:
        inner_stores = {
            group or "/": ZarrStore.open_group(
                path,
                group=group,
                mode="r",
                consolidated=consolidated,
                consolidate_on_close=False,
                storage_options=metadata_options,
            )
        }
    return {
        name: OOCArrayStore(inner, ZarrLocator(path, inner), options)
        for name, inner in inner_stores.items()
    }


def _hdf5_stores(path: str, group: str | None, all_groups: bool) -> dict[str, OOCArrayStore]:
    """The netCDF4/HDF5 group(s) in the file ``path``, by path in the hierarchy."""
    try:
        root = H5NetCDFStore.open(path, group=group, phony_dims="access")
    except OSError as error:
        # h5py's messages ("truncated file: eof = ...") do not say which file.
        raise OSError(f"cannot read {path!r} as netCDF4/HDF5 (damaged?): {error}") from error
    if not all_groups:
        return {group or "/": OOCArrayStore(root, HDF5Locator(path, root))}
    stores = {}
    iter_groups: Any = _iter_nc_groups  # untyped in xarray
    for path_group in iter_groups(root.ds, parent=_absolute(group)):
        inner = H5NetCDFStore(root._manager, group=path_group)
        stores[str(path_group)] = OOCArrayStore(inner, HDF5Locator(path, inner))
    return stores


def _stores(
    filename_or_obj: Any,
    group: str | None,
    consolidated: bool | None,
    storage_options: dict[str, Any] | None,
    all_groups: bool,
) -> dict[str, OOCArrayStore]:
    path = _normalize(filename_or_obj)
    if not _is_url(path) and os.path.isfile(path):
        if not _is_hdf5(path):
            raise ValueError(
                f"{path!r} is neither an HDF5/netCDF4 file nor a zarr store; "
                "engine='oocarray' opens zarr v2/v3 and netCDF4/HDF5"
            )
        return _hdf5_stores(path, group, all_groups)
    return _zarr_stores(path, group, consolidated, storage_options, all_groups)


class OOCArrayBackendEntrypoint(BackendEntrypoint):
    """Open zarr (v2/v3) and netCDF4/HDF5 datasets with oocarray's chunk reader.

    Metadata, dimension names, attributes, encodings and CF decoding are exactly what
    ``engine="zarr"`` / ``engine="h5netcdf"`` give; numeric variables are read lazily through
    oocarray (strings and objects through zarr-python / h5py).  With ``chunks={}`` the stored
    chunks are used, and ``chunked_array_type="oocarray"`` computes on them within budget.

    Examples
    --------
    >>> import xarray as xr
    >>> ds = xr.open_dataset("cube.zarr", engine="oocarray")  # doctest: +SKIP
    >>> ds = xr.open_dataset("s3://bucket/cube.zarr", engine="oocarray",
    ...                      storage_options={"anon": True})  # doctest: +SKIP
    >>> tree = xr.open_datatree("model.nc", engine="oocarray")  # doctest: +SKIP
    """

    description = "Open zarr, HDF5 and netCDF4 datasets through oocarray's chunk reader"
    url = "https://github.com/oocarray/oocarray"
    open_dataset_parameters = (
        "filename_or_obj",
        "drop_variables",
        "mask_and_scale",
        "decode_times",
        "concat_characters",
        "decode_coords",
        "use_cftime",
        "decode_timedelta",
        "group",
        "consolidated",
        "storage_options",
    )

    def guess_can_open(self, filename_or_obj: Any) -> bool:
        """Whether ``filename_or_obj`` is a zarr store (directory or URL ending ``.zarr``) or
        a local HDF5/netCDF4 file (checked by its signature bytes)."""
        if isinstance(filename_or_obj, os.PathLike):
            filename_or_obj = os.fspath(filename_or_obj)
        if not isinstance(filename_or_obj, str):
            return False
        path = filename_or_obj.rstrip("/")
        if _is_url(path):
            return path.endswith(".zarr")
        if os.path.isdir(path):
            return any(
                os.path.exists(os.path.join(path, name))
                for name in ("zarr.json", ".zgroup", ".zarray")
            )
        if os.path.isfile(path):
            return _is_hdf5(path)
        return path.endswith(".zarr")

    def open_dataset(
        self,
        filename_or_obj: Any,
        *,
        drop_variables: str | Iterable[str] | None = None,
        mask_and_scale: bool = True,
        decode_times: bool = True,
        concat_characters: bool = True,
        decode_coords: bool = True,
        use_cftime: bool | None = None,
        decode_timedelta: bool | None = None,
        group: str | None = None,
        consolidated: bool | None = None,
        storage_options: dict[str, Any] | None = None,
    ) -> Dataset:
        """Open one group of a zarr store or netCDF4/HDF5 file as a lazy Dataset.

        Raises
        ------
        FileNotFoundError
            Nothing is at the local path (the message names it).
        ValueError
            The file is neither zarr nor HDF5.
        """
        (store,) = _stores(
            filename_or_obj, group, consolidated, storage_options, all_groups=False
        ).values()
        return _decode(store, locals())

    def open_groups_as_dict(
        self,
        filename_or_obj: Any,
        *,
        drop_variables: str | Iterable[str] | None = None,
        mask_and_scale: bool = True,
        decode_times: bool = True,
        concat_characters: bool = True,
        decode_coords: bool = True,
        use_cftime: bool | None = None,
        decode_timedelta: bool | None = None,
        group: str | None = None,
        consolidated: bool | None = None,
        storage_options: dict[str, Any] | None = None,
    ) -> dict[str, Dataset]:
        """Every group at or below ``group``, as Datasets keyed by their path relative to it."""
        stores = _stores(filename_or_obj, group, consolidated, storage_options, all_groups=True)
        parent = _absolute(group)
        result = {}
        for path_group, store in stores.items():
            # Named as xarray's own backends name them: relative to ``group`` ("." for it).
            name = posixpath.relpath(path_group, parent) if group else path_group
            result[name] = _decode(store, locals())
        return result

    def open_datatree(self, filename_or_obj: Any, **kwargs: Any) -> DataTree:
        """The store's groups as a DataTree (the keywords are :meth:`open_dataset`'s)."""
        from xarray.backends.common import datatree_from_dict_with_io_cleanup

        return datatree_from_dict_with_io_cleanup(
            self.open_groups_as_dict(filename_or_obj, **kwargs)
        )


_DECODE_KEYS = (
    "drop_variables",
    "mask_and_scale",
    "decode_times",
    "concat_characters",
    "decode_coords",
    "use_cftime",
    "decode_timedelta",
)


def _decode(store: OOCArrayStore, options: dict[str, Any]) -> Dataset:
    """xarray's own CF decoding of ``store``'s variables."""
    with close_on_error(store):
        return StoreBackendEntrypoint().open_dataset(
            store, **{key: options[key] for key in _DECODE_KEYS}
        )
