"""W11-hard's checks: each step's result against the reference, exactly or to a stated
tolerance."""

from __future__ import annotations

from typing import Any

import numpy as np

from benchmarks.w11_hard._data import COLUMNS
from benchmarks.w11_hard._runner import Outcome


def _exact(got: Any, want: Any) -> bool:
    return bool(np.array_equal(np.asarray(got, np.float64), np.asarray(want, np.float64)))


def _max_rel(got: Any, want: Any) -> float:
    g, w = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.max(np.abs(g - w) / np.maximum(np.abs(w), 1e-30)))


def check(step: str, got: Any, ref: dict[str, Any]) -> tuple[bool, str]:
    """Whether one step's result is the reference's (exactly, or to the stated tolerance),
    and a line saying how it compares."""
    if step == "mean":
        exact = _exact(got, ref["mean32"])
        drift = _max_rel(got, ref["mean64"])
        return exact, (
            f"{'==' if exact else '!='} np.mean of the raw .npy bit for bit; NumPy's float32 "
            f"accumulation is {drift:.2g} (max rel.) off the float64 mean on both"
        )
    if step == "mean64":
        exact = _exact(got, ref["mean64_numpy"])
        rel = _max_rel(got, ref["mean64"])
        ok = exact and rel <= 1e-7
        return ok, (
            f"{'==' if exact else '!='} the same call on the raw .npy; {rel:.2g} max rel. off "
            "an independent float64 sum of row blocks (tolerance 1e-7)"
        )
    if step in ("percentile", "percentile-whole", "load"):
        want = ref["percentile"] if step != "load" else ref["mean32"]
        exact = _exact(got, want)
        what = "np.percentile of the raw .npy's column blocks" if step != "load" else "mean"
        return exact, f"{'==' if exact else '!='} {what}, exactly"
    if step == "pca":
        want = ref["pca"]
        c, w = np.asarray(got["components"]), np.asarray(want["components"])
        signs = np.sign(np.sum(c * w, axis=1))[:, None]
        comp = float(np.max(np.abs(c * signs - w)))
        var = _max_rel(got["explained_variance"], want["explained_variance"])
        mean = _max_rel(got["mean"], want["mean"])
        same_n = got["n_samples_seen"] == want["n_samples_seen"]
        exact = comp == 0 and var == 0 and mean == 0
        ok = same_n and comp <= 1e-4 and var <= 1e-5 and mean <= 1e-9
        return ok, (
            f"components up to sign max abs diff {comp:.2g} (tol. 1e-4), explained variance "
            f"{var:.2g} rel. (1e-5), mean {mean:.2g} rel. (1e-9)"
            + ("; bit-identical" if exact else "")
        )
    if step == "filter":
        if ref["filter"] is None:
            return False, "no reference: SciPy was not installed when it was computed"
        same = sum(g == w for g, w in zip(got["sha256"], ref["filter"]["sha256"], strict=True))
        rel = _max_rel(got["sum"], ref["filter"]["sum"])
        return same == COLUMNS, (
            f"{same}/{COLUMNS} columns bit-identical to gaussian_filter1d of the whole raw "
            f"columns (SHA-256); column sums {rel:.2g} max rel. off"
        )
    raise ValueError(f"unknown step {step!r}")


def check_outcome(outcome: Outcome, ref: dict[str, Any]) -> dict[str, tuple[bool, str]]:
    """Each step's check, for a child that completed."""
    assert outcome.report is not None
    return {step: check(step, got, ref) for step, got in outcome.report["results"].items()}
