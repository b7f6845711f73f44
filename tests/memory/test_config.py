"""Settings: configure(), config(), sizes and the OOCARRAY_* environment variables."""

from __future__ import annotations

import dataclasses
import os
import subprocess

import pytest

import oocarray as oc
from testkit.children import run_python


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("512M", 512 << 20),
        ("8G", 8 << 30),
        ("1.5GiB", 3 << 29),
        ("64KiB", 64 << 10),
        ("2GB", 2 * 10**9),
        ("100", 100),
        ("1e6", 10**6),
        (" 3 k ", 3 << 10),
        (4096, 4096),
        (0, 0),
    ],
)
def test_sizes(text: object, expected: int) -> None:
    assert oc.parse_size(text) == expected


def test_configure_changes_only_what_it_is_given() -> None:
    oc.configure(max_bytes="8G", max_spill_bytes="100G")
    settings = oc.configure(trace=True)
    assert settings.max_bytes == 8 << 30
    assert settings.max_spill_bytes == 100 << 30
    assert settings.trace is True
    assert oc.config() == settings
    assert oc.configure(max_bytes=None).max_bytes is None


def test_config_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        oc.config().max_bytes = 1  # type: ignore[misc]


def test_spill_dir_accepts_paths(tmp_path: os.PathLike[str]) -> None:
    assert oc.configure(spill_dir=tmp_path).spill_dir == os.fspath(tmp_path)
    assert oc.configure(spill_dir=None).spill_dir is None


@pytest.mark.parametrize("bad", ["lots", "8Gi", "-1", "", "1.5.5G"])
def test_bad_size_names_the_setting_value_and_example(bad: str) -> None:
    with pytest.raises(ValueError, match="max_bytes") as caught:
        oc.configure(max_bytes=bad)
    assert repr(bad) in str(caught.value)
    assert "512M" in str(caught.value)


def run_import(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return run_python("import oocarray as oc; print(oc.config())", env=env, keep_settings=True)


def test_environment_variables_set_the_initial_values(tmp_path: os.PathLike[str]) -> None:
    result = run_import(
        {
            "OOCARRAY_MAX_BYTES": "2G",
            "OOCARRAY_MAX_PHYSICAL_BYTES": "3G",
            "OOCARRAY_SPILL_DIR": os.fspath(tmp_path),
            "OOCARRAY_MAX_SPILL_BYTES": "10G",
            "OOCARRAY_TRACE": "1",
        }
    )
    assert result.returncode == 0, result.stderr
    assert f"max_bytes={2 << 30}" in result.stdout
    assert f"max_physical_bytes={3 << 30}" in result.stdout
    assert f"max_spill_bytes={10 << 30}" in result.stdout
    assert "trace=True" in result.stdout
    assert os.fspath(tmp_path) in result.stdout


def test_bad_environment_variable_fails_with_its_name() -> None:
    result = run_import({"OOCARRAY_MAX_BYTES": "plenty"})
    assert result.returncode != 0
    assert "OOCARRAY_MAX_BYTES" in result.stderr
    assert "'plenty'" in result.stderr


@pytest.mark.parametrize("text", ["2Gb", "2gb", "512mb", "1.5gib", "100b"])
def test_a_lowercase_b_is_bits_and_refused_with_what_to_write(text: str) -> None:
    with pytest.raises(ValueError, match="lowercase 'b' means bits") as caught:
        oc.parse_size(text, "max_bytes")
    assert "max_bytes" in str(caught.value)
    assert "B'" in str(caught.value), "it suggests an uppercase unit"


def test_configure_refuses_bits() -> None:
    with pytest.raises(ValueError, match=r"'2G' or '2GiB' for powers of 1024, or '2GB'"):
        oc.configure(max_bytes="2Gb")
