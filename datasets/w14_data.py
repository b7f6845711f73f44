"""W14 data: a daily (time, lat, lon) float32 air-temperature cube ``t2m`` in a zstd zarr group.

The cube looks like a reanalysis field: a temperature that falls with latitude, a seasonal
cycle of opposite sign in each hemisphere, a weak warming trend and Gaussian weather noise,
rounded to 0.01 K.  Coordinates and attributes follow CF (``time`` in ``days since
2000-01-01``, ``lat``/``lon`` in degrees, ``t2m`` in K with a ``standard_name``), so xarray
decodes ``time`` into datetimes and ``groupby("time.month")`` works.  The noise of each time
chunk comes from its own generator seeded by ``(SEED, chunk)``: any chunk can be made alone
and nothing is generated whole (memory stays at one time chunk of the full grid).

The group is zarr v3 with consolidated metadata, written with zarr-python, so every reader
(``engine="zarr"``, ``engine="oocarray"``, dask, Cubed) opens the same bytes.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

DTYPE = np.dtype(np.float32)
SEED = 14_014
TIME_CHUNK = 30
TIME_UNITS = "days since 2000-01-01"


@dataclass(frozen=True, slots=True)
class CubeShape:
    """Days, latitudes and longitudes of a cube, and its zarr chunks."""

    days: int
    lat: int
    lon: int

    @property
    def chunks(self) -> tuple[int, int, int]:
        """About 30 days by a tile of at most 90 x 180 points (1.9 MiB of float32)."""
        return (TIME_CHUNK, min(self.lat, 90), min(self.lon, 180))

    @property
    def nbytes(self) -> int:
        return self.days * self.lat * self.lon * DTYPE.itemsize


def cube_shape(nbytes: int) -> CubeShape:
    """A cube of about ``nbytes``: a 0.5 degree grid from 1 GiB, a coarse one below.

    The small grid (64 x 128) keeps several years of days at smoke-test sizes (64 MiB is
    2,048 days), so a monthly climatology averages more than one year.
    """
    lat, lon = (360, 720) if nbytes >= 1 << 30 else (64, 128)
    days = max(TIME_CHUNK, nbytes // (lat * lon * DTYPE.itemsize))
    return CubeShape(int(days), lat, lon)


def coordinates(shape: CubeShape) -> dict[str, np.ndarray]:
    """``time`` (days since 2000-01-01), ``lat`` (north to south) and ``lon``, cell centres."""
    return {
        "time": np.arange(shape.days, dtype=np.int64),
        "lat": (90 - (np.arange(shape.lat) + 0.5) * 180 / shape.lat).astype(np.float32),
        "lon": ((np.arange(shape.lon) + 0.5) * 360 / shape.lon).astype(np.float32),
    }


def t2m_block(shape: CubeShape, chunk: int) -> np.ndarray:
    """Time chunk ``chunk`` of ``t2m`` over the whole grid, the same on every call."""
    start = chunk * TIME_CHUNK
    stop = min(shape.days, start + TIME_CHUNK)
    coords = coordinates(shape)
    day = np.arange(start, stop, dtype=np.float64)[:, None, None]
    lat = np.deg2rad(coords["lat"].astype(np.float64))[None, :, None]
    lon = np.deg2rad(coords["lon"].astype(np.float64))[None, None, :]
    season = np.cos(2 * np.pi * (day - 196) / 365.25) * np.sin(lat)
    field = 258 + 42 * np.cos(lat) + 14 * season + 2 * np.sin(2 * lon) + day * 1e-4
    rng = np.random.default_rng((SEED, chunk))
    field = field + rng.standard_normal(field.shape) * 3
    rounded: np.ndarray = np.round(field, 2).astype(DTYPE)
    return rounded


def write_cube(path: str, nbytes: int) -> CubeShape:
    """Write the cube of about ``nbytes`` as a zstd zarr v3 group at ``path``; its shape."""
    import zarr
    from zarr.codecs import ZstdCodec

    shape = cube_shape(nbytes)
    group = zarr.open_group(path, mode="w", zarr_format=3)
    group.attrs.update({"Conventions": "CF-1.8", "title": "synthetic daily 2 m temperature"})
    coords = coordinates(shape)
    coord_attrs: dict[str, dict[str, Any]] = {
        "time": {"units": TIME_UNITS, "calendar": "standard", "standard_name": "time"},
        "lat": {"units": "degrees_north", "standard_name": "latitude"},
        "lon": {"units": "degrees_east", "standard_name": "longitude"},
    }
    for name, values in coords.items():
        array = group.create_array(
            name,
            shape=values.shape,
            dtype=values.dtype,
            chunks=values.shape,
            dimension_names=[name],
            attributes=coord_attrs[name],
        )
        array[...] = values
    t2m = group.create_array(
        "t2m",
        shape=(shape.days, shape.lat, shape.lon),
        dtype=DTYPE,
        chunks=shape.chunks,
        compressors=ZstdCodec(level=3),
        fill_value=np.nan,
        dimension_names=["time", "lat", "lon"],
        attributes={
            "units": "K",
            "standard_name": "air_temperature",
            "long_name": "2 metre temperature",
        },
    )
    for chunk in range(-(-shape.days // TIME_CHUNK)):
        block = t2m_block(shape, chunk)
        t2m[chunk * TIME_CHUNK : chunk * TIME_CHUNK + len(block)] = block
    with warnings.catch_warnings():
        # zarr warns that consolidated metadata is not yet part of the v3 specification;
        # xarray reads it and would otherwise list the group on every open.
        warnings.simplefilter("ignore", UserWarning)
        zarr.consolidate_metadata(path)
    return shape
