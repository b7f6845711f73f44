"""The ``engine="oocarray"`` xarray backend (being built)."""

from __future__ import annotations

from typing import Any

from xarray.backends import BackendEntrypoint


class OOCArrayBackendEntrypoint(BackendEntrypoint):
    description = "Open zarr, HDF5 and netCDF4 datasets through oocarray's chunk reader"
    url = "https://github.com/oocarray/oocarray"

    def open_dataset(self, filename_or_obj: Any, *, drop_variables: Any = None) -> Any:
        raise NotImplementedError("engine='oocarray' is not built yet")

    def guess_can_open(self, filename_or_obj: Any) -> bool:
        return False
