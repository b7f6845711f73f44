"""The registry of ``python -m benchmarks``: every benchmark's id, title and entry point."""

from __future__ import annotations

from collections.abc import Callable

from benchmarks import (
    fork_cost,
    fusion_choice,
    l3_huge_pages,
    large_alloc,
    w1_workspace,
    w1c_lazy,
    w2_disk,
    w2_small_alloc,
    w3_spill,
    w4_hard,
    w4_over_budget,
    w5_reduce,
    w6_fused,
    w7_random_rows,
    w7_sharded,
    w7_spread_rows,
    w8_feed,
    w9_large,
    w11_hard,
    w11_paged,
    w12_compressed_spill,
    w13_object_store,
    w14_xarray,
    w15_rechunk,
    w16_gram,
    w16_sort_quantiles,
    w16_unique,
)
from benchmarks._timing import Result

BENCHMARKS: dict[str, tuple[str, Callable[[bool], Result]]] = {
    "W1": ("workspace cycle vs plain NumPy and the out= floor", w1_workspace.run),
    "W1C": ("W1's step as a lazy chunked expression vs the out= floor", w1c_lazy.run),
    "W2": ("small-allocation overhead inside a manager", w2_small_alloc.run),
    "W2-DISK": ("small arrays on disk (a full budget) vs the same in RAM", w2_disk.run),
    "W3": ("spill a 2 GiB live array to disk vs os.write + fdatasync", w3_spill.run),
    "W4": (
        "4x the budget in 32 MiB arrays in Manager(max_bytes=256M): peak RSS",
        w4_over_budget.run,
    ),
    "W4H": (
        "W4, a reduction and a training epoch in a 320 MiB cgroup where plain NumPy is killed",
        w4_hard.run,
    ),
    "W5": (
        "mean+std over axis 0 of a (N, 64) f32 zstd zarr vs dask and the codec floor",
        w5_reduce.run,
    ),
    "W6": ("((x - m) / s).astype(f4) zarr -> zarr vs dask and blosc2", w6_fused.run),
    "FUSE": ("a chunk's expression as one numexpr program vs NumPy ufuncs", fusion_choice.run),
    "W7": ("random-row reads from an (N, 1024) float32 array", w7_random_rows.run),
    "W7S": ("random-row reads from a sharded zstd zarr array vs zarr-python", w7_sharded.run),
    "W7R": (
        "x[rows] spread over every chunk of a zstd zarr vs tensorstore and zarr-python",
        w7_spread_rows.run,
    ),
    "W8": ("training feed: shuffled batches of a zstd zarr vs torch DataLoaders", w8_feed.run),
    "W11": (
        "plain NumPy on x.as_ndarray() of W5's zstd store vs streaming, dask, memmap",
        w11_paged.run,
    ),
    "W12": (
        'spill="zarr" of two 1 GiB live arrays vs the raw spill (spill="mmap")',
        w12_compressed_spill.run,
    ),
    "W13": (
        "object store (moto S3 + 20 ms per request): reduce, scan, random rows, epochs vs "
        "zarr-python (obstore, s3fs, zarrs), dask, tensorstore, torch",
        w13_object_store.run,
    ),
    "W14": (
        'xarray groupby("time.month").mean() and an anomaly to_zarr of a daily cube in '
        'Manager(max_bytes="512M") vs xarray with dask and with Cubed',
        w14_xarray.run,
    ),
    "W15": (
        "rechunk in a 256 MiB budget, four shapes, vs dask (tasks, p2p), Cubed, rechunker and "
        "xarray-beam, without a memory limit and under one of the budget + 64 MiB",
        w15_rechunk.run,
    ),
    "W16S": (
        "external sort and exact percentiles vs np.sort in RAM, dask and paged NumPy",
        w16_sort_quantiles.run,
    ),
    "W16U": ("np.unique(return_counts) of int64 ids vs dask and NumPy in RAM", w16_unique.run),
    "W16G": ("X.T @ X of an (N, 512) float32 zstd store vs NumPy in RAM and dask", w16_gram.run),
    "F1": ("fork with 1 GiB of arrays on disk vs 1 GiB in RAM", fork_cost.run),
    "L1": ("64 MiB allocate + first touch inside a manager", large_alloc.run_large),
    "L2": ("small/large threshold sweep, 16 KiB to 32 MiB", large_alloc.run_sweep),
    "L3": ("workspace arenas with and without transparent huge pages", l3_huge_pages.run),
}

# The read workloads that can also start every side from a cold page cache (``--cold``).
COLD = {
    "W5": w5_reduce.run,
    "W7": w7_random_rows.run,
    "W7R": w7_spread_rows.run,
    "W8": w8_feed.run,
    "W11": w11_paged.run,
}

# Run by hand only (``--large``): they need tens of GiB of disk and most of an hour.
LARGE: dict[str, tuple[str, Callable[[bool], Result]]] = {
    "W9": ("W5 and W6 on a 32 GiB array in Manager(max_bytes=2G) vs dask", w9_large.run),
    "W11H": (
        "NumPy/SciPy/PCA on as_ndarray() of an 8 GiB zstd store in a 1 GiB cgroup",
        w11_hard.run,
    ),
}
