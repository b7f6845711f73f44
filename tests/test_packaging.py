"""What a non-editable install ships: every subpackage, the stub and the type marker."""

from __future__ import annotations

import tomllib
from pathlib import Path

from setuptools import find_packages

ROOT = Path(__file__).resolve().parent.parent


def test_every_subpackage_is_packaged() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    include = config["tool"]["setuptools"]["packages"]["find"]["include"]
    packaged = set(find_packages(where=str(ROOT), include=include))
    on_disk = {
        ".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "oocarray").rglob("__init__.py")
    }
    assert on_disk <= packaged, f"missing from the wheel: {sorted(on_disk - packaged)}"
    data = config["tool"]["setuptools"]["package-data"]["oocarray"]
    assert {"py.typed", "_native.pyi"} <= set(data)
