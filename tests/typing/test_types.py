"""The typing promises of the public API, checked by running mypy (with the project's strict
configuration from pyproject.toml) on ``reduction_types.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

api = pytest.importorskip("mypy.api")

ROOT = Path(__file__).resolve().parents[2]


def _mypy(*args: str) -> tuple[str, int]:
    out, err, status = api.run(
        ["--config-file", str(ROOT / "pyproject.toml"), "--no-error-summary", *args]
    )
    return out + err, status


def test_reductions_are_typed_lazy_with_compute_false() -> None:
    report, status = _mypy(str(Path(__file__).with_name("reduction_types.py")))
    assert status == 0, report


def test_the_check_sees_a_wrong_type(tmp_path: Path) -> None:
    # The same check on a wrong promise fails: mypy does look at the reductions' types.
    wrong = tmp_path / "wrong_types.py"
    wrong.write_text(
        "from typing import assert_type\n"
        "import oocarray as oc\n"
        "def f(x: oc.ChunkedArray) -> None:\n"
        "    assert_type(x.sum(compute=False), float)\n"
    )
    report, status = _mypy(str(wrong))
    assert status == 1 and '"LazyResult", not "float"' in report, report
