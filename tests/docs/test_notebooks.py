"""The notebooks in notebooks/ run top to bottom in a fresh kernel and show what they claim.

Each notebook is executed by the documentation site's build (the ``site`` fixture: myst-nb,
kernel ``python3``), with small sizes injected after its ``parameters`` cell, and the lines its
cells print are checked:
the statistics match NumPy's, arrays moved to disk at the same address, the manager kept
memory under its budget while plain NumPy went past it, the workspace loop stopped faulting
pages, the training loss went down.  The committed notebooks must carry no outputs.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.docs.conftest import Site

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("ipykernel")
pytest.importorskip("matplotlib")

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"

# What each notebook's parameters cell is overridden with: a run of a few seconds each (the
# documentation site renders the notebooks with the same sizes).
SMALL: dict[str, str] = json.loads((NOTEBOOKS / "small_parameters.json").read_text())
NUMBER = r"([-+0-9.,e]+)"


def test_every_notebook_is_tested() -> None:
    assert sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")) == sorted(SMALL)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_committed_notebook_has_no_outputs(name: str) -> None:
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    nbformat.validate(nb)
    dirty = [
        i
        for i, cell in enumerate(nb.cells)
        if cell.cell_type == "code" and (cell.outputs or cell.execution_count is not None)
    ]
    assert not dirty, (
        f"{name}: cells {dirty} have outputs or execution counts; clear them before committing "
        "(Jupyter: Edit > Clear Outputs of All Cells, then save)"
    )
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, f"{name}: expected one cell tagged 'parameters'"
    assert nb.metadata["kernelspec"]["name"] == "python3"


def execute(site: Site, name: str) -> str:
    """Everything the notebook printed when the documentation build ran it (small sizes)."""
    executed = site.executed / name
    assert executed.exists(), f"the site's build did not execute {name}:\n{site.output[-5000:]}"
    nb = nbformat.read(executed, as_version=4)
    text = []
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            assert output.output_type != "error", f"{output.ename}: {output.evalue}"
            if output.output_type == "stream" and output.name == "stdout":
                text.append(output.text)
    return "".join(text)


def number(pattern: str, text: str) -> float:
    match = re.search(pattern, text)
    assert match, f"no line matching {pattern!r} in the notebook's output:\n{text}"
    return float(match.group(1).replace(",", ""))


def numbers(pattern: str, text: str) -> list[float]:
    match = re.search(pattern, text)
    assert match, f"no line matching {pattern!r} in the notebook's output:\n{text}"
    return [float(g.replace(",", "")) for g in match.groups()]


def test_explore_larger_than_ram(site: Site) -> None:
    out = execute(site, "01_explore_larger_than_ram.ipynb")
    assert "48.0 MiB of data, 3.0x the budget of 16.0 MiB" in out
    # oocarray's one-pass statistics against NumPy's, block by block in float64.
    assert number(r"mean vs NumPy: largest absolute difference " + NUMBER, out) < 1e-4
    assert number(r"std vs NumPy: largest relative difference " + NUMBER, out) < 1e-5
    counted, total = numbers(rf"histogram counts: {NUMBER} of {NUMBER} values", out)
    assert counted == total == 48 * 2**20 / 4
    mean, std = numbers(
        rf"normalised copy: largest \|mean\| {NUMBER}, largest \|std - 1\| {NUMBER}", out
    )
    assert mean < 1e-3
    assert std < 1e-3
    assert "ndarray (200, 16) float32 owned by explore" in out
    assert "the slice matches (raw - mean) / std: True" in out
    peak, budget = numbers(
        rf"peak NumPy memory in 'explore': {NUMBER} MiB of the {NUMBER} MiB budget", out
    )
    assert 0 < peak <= budget == 16.0
    assert re.search(r"removed /\S+oocarray-notebook-01-", out)  # its temporary directory


def test_managers_budgets_spill_workspaces(site: Site) -> None:
    out = execute(site, "02_managers_budgets_spill_workspaces.ipynb")
    assert "features owned by transform at ram" in out
    assert "MemoryBudgetError: cannot allocate 48.0 MiB in manager 'strict'" in out
    # an explicit spill, and an eviction under a budget: same address, same data
    assert "before: location 'ram'" in out
    assert "after:  location 'mmap'" in out
    assert "same address: True, same data: True" in out
    assert "first array: 'ram' -> 'mmap', same address: True, data intact: True" in out
    # memory over time: plain NumPy goes past the budget, the manager stays at it
    plain = number(r"plain NumPy: resident memory rose by " + NUMBER + " MiB", out)
    managed, in_ram, on_disk = numbers(
        rf"under oc.Manager\(max_bytes='32M'\): resident memory rose by {NUMBER} MiB; "
        rf"{NUMBER} arrays in RAM, {NUMBER} placed on disk",
        out,
    )
    assert plain > 2.5 * 32
    assert managed < 32 + 8
    assert (in_ram, on_disk) == (4, 8)
    assert number(r"peak managed bytes in RAM: " + NUMBER + " MiB", out) <= 32
    # workspaces: escapes are reported, detach copies out, the loop stops faulting pages
    assert "WorkspaceLeakError: 1 array(s) allocated in cycle" in out
    assert "held by item 0 of a list, in notebook variable 'history'" in out
    assert "the escaped array is still valid: True" in out
    assert "detached result owned by System at ram" in out
    faults_without = number(r"without a workspace: " + NUMBER + " page faults", out)
    faults_with = number(r"with oc.Workspace: +" + NUMBER + " page faults", out)
    # (about 1,200 against 17 on a quiet machine; 1,332 against 144 once under heavy load)
    assert faults_with * 4 < faults_without


def test_etl_to_training(site: Site) -> None:
    out = execute(site, "03_etl_to_training.ipynb")
    assert re.search(r"training with (torch|NumPy)", out)
    assert 0.45 < number(r"share of positive labels: " + NUMBER, out) < 0.55
    first, last = numbers(rf"mean loss: first epoch {NUMBER}, last epoch {NUMBER}", out)
    assert last < first
    accuracy, best = numbers(rf"accuracy {NUMBER} \(the true weights: {NUMBER}\)", out)
    assert accuracy > best - 0.05
    peak, budget = numbers(
        rf"peak NumPy memory of the pipeline: {NUMBER} MiB of its {NUMBER} MiB budget", out
    )
    assert 0 < peak <= budget == 32.0


def test_xarray_climate_cube(site: Site) -> None:
    out = execute(site, "04_xarray_climate_cube.ipynb")
    days, times = numbers(
        rf"cube of {NUMBER} days: 32.0 MiB in memory, .* {NUMBER}x the budget", out
    )
    assert days == 1024
    assert times == 4.0
    # variables come back lazy, on oocarray's chunk manager, not on dask or NumPy
    assert "t2m is backed by oocarray." in out
    assert (
        number(r"climatology vs xarray\+NumPy: largest absolute difference " + NUMBER, out) < 1e-3
    )
    mean, std, difference = numbers(
        rf"anomaly at .*: mean {NUMBER} K, std {NUMBER} K; "
        rf"vs xarray\+NumPy: largest absolute difference {NUMBER} K",
        out,
    )
    assert abs(mean) < 0.2  # anomalies about their own climatology average to zero
    assert 0.8 < std < 2.5  # 1 K of noise and the season's drift within each month
    assert difference < 1e-3
    peak, budget = numbers(
        rf"peak NumPy memory in 'cube': {NUMBER} MiB of the {NUMBER} MiB budget", out
    )
    assert 0 < peak <= budget == 8.0
    assert re.search(r"removed /\S+oocarray-notebook-04-", out)
