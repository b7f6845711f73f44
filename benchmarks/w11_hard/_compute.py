"""W11-hard's computations, the same in the reference (outside the cgroup) and in the children:
the incremental PCA, the filter, the percentiles, and the reference itself."""

from __future__ import annotations

import hashlib
import time
from typing import Any

import numpy as np

from benchmarks.w11_hard._data import (
    CHUNK_ROWS,
    COLUMNS,
    COMPONENTS,
    FILTER_BATCH_ROWS,
    HALO,
    PCA_BATCH_ROWS,
    QUANTILES,
    REFERENCE_COLUMNS,
    ROW_BYTES,
    SIGMA,
    TRUNCATE,
    WRITE_CHUNKS,
    Data,
)

# ---- the incremental PCA ----


class NumpyIncrementalPCA:
    """The incremental PCA of :class:`sklearn.decomposition.IncrementalPCA` (Ross et al.,
    2008: an SVD of the previous components scaled by their singular values, the centred
    batch and a mean-correction row; means and variances combined exactly), written with
    NumPy for machines without scikit-learn.  Only what the benchmark compares:
    ``partial_fit``, ``components_``, ``singular_values_``, ``explained_variance_``,
    ``mean_``, ``var_``, ``n_samples_seen_``."""

    def __init__(self, n_components: int) -> None:
        self.n_components = n_components
        self.n_samples_seen_ = 0
        self.mean_ = np.zeros(0)
        self.var_ = np.zeros(0)
        self.components_: np.ndarray | None = None
        self.singular_values_ = np.zeros(0)
        self.explained_variance_ = np.zeros(0)

    def partial_fit(self, x: np.ndarray) -> NumpyIncrementalPCA:
        batch = np.array(x, dtype=x.dtype if x.dtype.kind == "f" else np.float64)
        n = batch.shape[0]
        batch_mean = batch.mean(axis=0, dtype=np.float64)
        batch_var = batch.var(axis=0, dtype=np.float64)
        seen = self.n_samples_seen_
        total = seen + n
        if seen == 0:
            mean, var = batch_mean, batch_var
        else:
            delta = batch_mean - self.mean_
            mean = self.mean_ + delta * (n / total)
            var = (self.var_ * seen + batch_var * n + delta**2 * (seen * n / total)) / total
        batch -= batch_mean.astype(batch.dtype)
        if seen:
            assert self.components_ is not None
            correction = np.sqrt(seen * n / total) * (self.mean_ - batch_mean)
            stacked = np.vstack(
                (
                    self.singular_values_[:, None] * self.components_,
                    batch,
                    correction.astype(batch.dtype),
                )
            )
        else:
            stacked = batch
        _, s, vt = np.linalg.svd(stacked, full_matrices=False)
        biggest = np.argmax(np.abs(vt), axis=1)
        vt *= np.sign(vt[np.arange(len(vt)), biggest])[:, None]
        k = self.n_components
        self.n_samples_seen_ = total
        self.mean_, self.var_ = mean, var
        self.components_ = vt[:k]
        self.singular_values_ = s[:k]
        self.explained_variance_ = s[:k] ** 2 / (total - 1)
        return self


def incremental_pca() -> tuple[Any, str]:
    """scikit-learn's IncrementalPCA where it is installed, else :class:`NumpyIncrementalPCA`;
    and which it is."""
    try:
        import sklearn
        from sklearn.decomposition import IncrementalPCA
    except ImportError:
        return NumpyIncrementalPCA(COMPONENTS), "NumPy IncrementalPCA (no scikit-learn here)"
    return IncrementalPCA(n_components=COMPONENTS), f"scikit-learn {sklearn.__version__}"


# ---- the computations, shared by the reference and the children ----


def pca_fit(a: np.ndarray) -> tuple[dict[str, Any], str]:
    """The partial_fit loop over row batches of ``a``; the fitted values and the PCA used."""
    pca, which = incremental_pca()
    for lo in range(0, a.shape[0], PCA_BATCH_ROWS):
        hi = min(a.shape[0], lo + PCA_BATCH_ROWS)
        if hi - lo >= COMPONENTS:
            pca.partial_fit(a[lo:hi])
    fitted = {
        "components": np.asarray(pca.components_).tolist(),
        "singular_values": np.asarray(pca.singular_values_).tolist(),
        "explained_variance": np.asarray(pca.explained_variance_).tolist(),
        "mean": np.asarray(pca.mean_).tolist(),
        "n_samples_seen": int(np.asarray(pca.n_samples_seen_).ravel()[0]),
    }
    return fitted, which


def filter_batch_rows(budget_bytes: int) -> int:
    """Rows per filter batch: a batch, its output and the output's transpose (and the
    chunks under the batch's halo) must fit the budget together, else every column of the
    batch faults its chunks in again (scipy filters one column at a time)."""
    rows = budget_bytes // (6 * ROW_BYTES) // CHUNK_ROWS * CHUNK_ROWS
    return max(CHUNK_ROWS, min(FILTER_BATCH_ROWS, rows))


def filter_digests(a: np.ndarray, batch_rows: int = FILTER_BATCH_ROWS) -> dict[str, Any]:
    """``gaussian_filter1d(a, SIGMA, axis=0)`` in row batches with a halo, digested per
    column: the SHA-256 of each column's float32 output and its float64 sum."""
    from scipy.ndimage import gaussian_filter1d

    rows = a.shape[0]
    digests = [hashlib.sha256() for _ in range(COLUMNS)]
    sums = np.zeros(COLUMNS)
    for r0 in range(0, rows, batch_rows):
        r1 = min(rows, r0 + batch_rows)
        lo, hi = max(0, r0 - HALO), min(rows, r1 + HALO)
        out = gaussian_filter1d(a[lo:hi], SIGMA, axis=0, truncate=TRUNCATE)[r0 - lo : r1 - lo]
        columns = np.ascontiguousarray(out.T)
        for j in range(COLUMNS):
            digests[j].update(columns[j])
        sums += out.sum(axis=0, dtype=np.float64)
    return {"sha256": [d.hexdigest() for d in digests], "sum": sums.tolist()}


def percentile_blocks(a: np.ndarray, width: int) -> list[list[float]]:
    """``np.percentile`` of ``a``'s column blocks of ``width`` columns, joined: (3, 64)."""
    parts = [
        np.percentile(a[:, j : j + width], QUANTILES, axis=0) for j in range(0, COLUMNS, width)
    ]
    return np.concatenate(parts, axis=1).tolist()


def have_scipy() -> bool:
    """Whether SciPy is installed (it is no dependency of oocarray's tests)."""
    import importlib.util

    return importlib.util.find_spec("scipy") is not None


def compute_reference(data: Data) -> dict[str, Any]:
    """The reference results from ``np.load(npy, mmap_mode="r")``, never holding the whole
    array: streaming means, then column blocks for percentiles and the whole-column filter
    (without SciPy, none), then the PCA loop.  Run outside any cgroup (``--reference``)."""
    m = np.load(data.npy, mmap_mode="r")
    rows = m.shape[0]
    seconds: dict[str, float] = {}
    start = time.perf_counter()
    mean32 = np.mean(m, axis=0)
    mean64_numpy = np.mean(m, axis=0, dtype=np.float64)
    total = np.zeros(COLUMNS)
    for lo in range(0, rows, CHUNK_ROWS * WRITE_CHUNKS):
        total += m[lo : lo + CHUNK_ROWS * WRITE_CHUNKS].sum(axis=0, dtype=np.float64)
    seconds["mean"] = time.perf_counter() - start
    start = time.perf_counter()
    percentiles = np.empty((len(QUANTILES), COLUMNS))
    digests: list[str] = []
    filtered_sums = np.empty(COLUMNS)
    for j in range(0, COLUMNS, REFERENCE_COLUMNS):
        columns = np.array(m[:, j : j + REFERENCE_COLUMNS])
        percentiles[:, j : j + REFERENCE_COLUMNS] = np.percentile(columns, QUANTILES, axis=0)
        if not have_scipy():
            continue
        from scipy.ndimage import gaussian_filter1d

        out = gaussian_filter1d(columns, SIGMA, axis=0, truncate=TRUNCATE)
        del columns
        for k in range(out.shape[1]):
            digests.append(hashlib.sha256(np.ascontiguousarray(out[:, k])).hexdigest())
        filtered_sums[j : j + REFERENCE_COLUMNS] = out.sum(axis=0, dtype=np.float64)
        del out
    seconds["percentile+filter"] = time.perf_counter() - start
    start = time.perf_counter()
    pca, which = pca_fit(m)
    seconds["pca"] = time.perf_counter() - start
    return {
        "rows": rows,
        "mean32": mean32.tolist(),
        "mean64_numpy": mean64_numpy.tolist(),
        "mean64": (total / rows).tolist(),
        "percentile": percentiles.tolist(),
        "filter": {"sha256": digests, "sum": filtered_sums.tolist()} if digests else None,
        "pca": pca,
        "pca_which": which,
        "seconds": seconds,
    }
