"""W11-hard (issue 13): NumPy, SciPy and an incremental PCA on ``x.as_ndarray()`` of an
8 GiB zstd zarr store, in a process under a hard memory limit of 1 GiB (a memory cgroup).

``python -m benchmarks.w11_hard [--size 8G] [--limit 1G] [--budget 768M] [--dir DIR] [--keep]
[--spill mmap] [--only WORKLOAD,...] [--percentile-columns 4] [--timeout S] [--whole-timeout S]``
(also ``python -m benchmarks --large --only W11H``: the defaults).

Data (:func:`make_data`, under ``--dir``, default a temporary directory on the disk of
``tempfile.gettempdir()``, removed at the end unless ``--keep``): an ``(N, 64)`` float32
array, eight smooth latent signals (sines of periods from 4,000 to 2,000,000 rows, distinct
amplitudes, fixed orthonormal loadings) plus per-column offsets plus Gaussian noise, rounded
to two decimals; written once as a zstd zarr v3 array in row chunks of 16384 rows (4 MiB,
oocarray's writer) and once raw as ``x.npy``.

References (:func:`compute_reference`) are computed in a separate process *outside* the
cgroup, from ``np.load(npy, mmap_mode="r")``, without ever holding the array in RAM: means in
one streaming pass (NumPy's own ``np.mean(m, axis=0)`` on the memmap, the same call in
float64, and an independent float64 sum of row blocks), then column blocks of 8 columns
(``np.array(m[:, j:j+8])``, 1 GiB at 8 GiB) for ``np.percentile(block, [1, 50, 99], axis=0)``
and for ``scipy.ndimage.gaussian_filter1d(block, 2.0, axis=0)`` over each *whole* column,
digested per column (SHA-256 of the float32 output and its float64 sum), and the incremental
PCA over the same row batches as the children.

Workloads, each in a fresh child process put in a new memory cgroup of ``--limit`` (cgroup v1
``memory.limit_in_bytes`` or v2 ``memory.max``, by :func:`testkit.cgroup.memory_cgroup`;
page cache counted).  Side ``oc``: ``a = oc.open(store).as_ndarray()`` inside ``with
oc.Manager(max_bytes=budget, spill=spill)``; side ``numpy`` (the peer): ``a =
np.load(npy, mmap_mode="r")``, no manager.  Then the same plain NumPy/SciPy code on ``a``:

- ``mean``: ``np.mean(a, axis=0)`` (NumPy's float32 accumulation) and ``np.mean(a, axis=0,
  dtype=np.float64)``;
- ``percentile``: ``np.percentile(a[:, j:j+w], [1, 50, 99], axis=0)`` for column blocks of
  ``w`` columns (each call copies its block, ``N * 4 * w`` bytes, and partitions it);
- ``percentile-whole``: ``np.percentile(a, [1, 50, 99], axis=0)``: NumPy copies all of ``a``
  (8 GiB) and partitions each of the 64 columns in place, a strided pass over the whole copy
  per column;
- ``pca``: an ``IncrementalPCA(n_components=8).partial_fit(a[i:i+8192])`` loop over row
  batches (scikit-learn's where it is installed, else :class:`NumpyIncrementalPCA`, the
  same algorithm in NumPy);
- ``filter``: ``scipy.ndimage.gaussian_filter1d(a[lo:hi], 2.0, axis=0)`` over row batches
  (65536 rows, fewer where the budget is small: :func:`filter_batch_rows`) with a halo of the
  filter's radius (8 rows) on each side, the halo cut off: the output equals the filter of
  the whole columns bit for bit, and is digested per column (SciPy filters a column at a
  time, so one call on all of ``a`` would read the whole store once per column);
- ``load`` (peer only): ``np.load(npy)`` without ``mmap_mode``.

Recorded per child: wall time of each step, the cgroup's peak usage
(``memory.max_usage_in_bytes`` / ``memory.peak``), OOM kills, exit status, VmHWM, the bytes
it made the kernel write to storage (``/proc/PID/io`` ``write_bytes``, sampled by the parent
so that a child that is killed or stopped has a figure too: spill files' write-back), and on
the oc side the peak bytes its manager held in spill files (``stats()`` sampled every 20 ms)
and the chunk bytes the pager decoded.  Before each child the store's and the .npy's pages
are dropped from the page cache (``POSIX_FADV_DONTNEED``), so both sides read from disk.
The tests in ``tests/reliability/test_paged_hard_limit.py`` run the same children, small.
"""

# One module per part: _data (the data and the shared constants), _compute (the computations,
# shared by the reference and the children), _child (a child), _runner (children in a cgroup,
# the reference outside one), _checks (results against the reference), _report (the benchmark
# and its table), __main__ (the command line, and the entry of children and the reference).

from benchmarks.w11_hard._checks import check, check_outcome
from benchmarks.w11_hard._compute import NumpyIncrementalPCA, compute_reference
from benchmarks.w11_hard._data import STEPS, WORKLOADS, Data, make_data
from benchmarks.w11_hard._report import run, run_benchmark
from benchmarks.w11_hard._runner import Outcome, run_limited, run_reference
from testkit.cgroup import CgroupUnavailable, memory_cgroup

__all__ = [
    "STEPS",
    "WORKLOADS",
    "CgroupUnavailable",
    "Data",
    "NumpyIncrementalPCA",
    "Outcome",
    "check",
    "check_outcome",
    "compute_reference",
    "make_data",
    "memory_cgroup",
    "run",
    "run_benchmark",
    "run_limited",
    "run_reference",
]
