"""The command line on object-store URLs: ``info``, ``stats`` and ``convert`` both ways, with
endpoint and region as ``--storage-option`` and the credentials in the AWS variables."""

from __future__ import annotations

import json

import numpy as np
import pytest

import oocarray as oc
from oocarray._cli import main


@pytest.fixture
def aws_env(s3, monkeypatch):
    options = s3.storage_options
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", options["access_key_id"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", options["secret_access_key"])
    return [
        "--storage-option",
        f"endpoint={options['endpoint']}",
        "--storage-option",
        f"region={options['region']}",
    ]


def test_convert_to_a_bucket_and_back_and_info_and_stats_of_it(s3, aws_env, tmp_path, capsys):
    data = np.arange(600, dtype=np.float64).reshape(200, 3)
    src = tmp_path / "a.npy"
    np.save(src, data)
    url = s3.url("a.zarr")
    assert main(["convert", str(src), url, "--chunks", "50,3", "--no-progress", *aws_env]) == 0
    assert url in capsys.readouterr().out
    assert np.array_equal(oc.open(url, storage_options=s3.storage_options)[...], data)
    assert main(["info", url, "--json", *aws_env]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["shape"] == [200, 3] and info["format"] == "zarr v3" and info["path"] == url
    assert main(["stats", url, *aws_env]) == 0
    assert "mean" in capsys.readouterr().out
    back = tmp_path / "b.h5"
    assert main(["convert", url, str(back), "--no-progress", *aws_env]) == 0
    assert np.array_equal(oc.open(back)[...], data)
    assert main(["convert", str(src), url, "--no-progress", *aws_env]) == 1
    assert "already holds a zarr array" in capsys.readouterr().err
    assert main(["convert", str(src), url, "--overwrite", "--no-progress", *aws_env]) == 0
