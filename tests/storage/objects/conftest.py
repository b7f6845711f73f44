"""Object-store servers for the tests of arrays in object stores, on 127.0.0.1 only.

One S3 server (moto) for the session, a fresh bucket per test (moto's state is one per
process, so a bucket of its own is what keeps a test independent), a fault proxy per test in
front of it, and a GCS emulator for the session when gcp-storage-emulator and gcsfs are there.
The directory is skipped, with the reason, where moto or obstore is missing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

pytest.importorskip("moto.server", reason="the S3 server of these tests is moto's")
pytest.importorskip("boto3", reason="S3 buckets are made with boto3")
pytest.importorskip("obstore", reason="oocarray reaches object stores through obstore")

# gcsfs.GCSFileSystem (what fsspec's gs:// loads) is otherwise gcsfs's "extended" file system,
# which asks the endpoint over gRPC for each bucket's layout and waits 60 s for an answer the
# emulator never gives.  Only read when gcsfs is first imported.
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")

from testkit.objects import Bucket, FaultProxy, GCSServer, ProxiedBucket, S3Server


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    with S3Server() as server:
        yield server


@pytest.fixture
def s3(s3_server: S3Server) -> Bucket:
    """A fresh bucket of the session's S3 server: ``url(key)``, ``storage_options``,
    ``server``."""
    return s3_server.bucket()


@pytest.fixture
def fault_proxy(s3: Bucket) -> Iterator[ProxiedBucket]:
    """The test's bucket reached through a :class:`FaultProxy` (``proxy``) of its own:
    ``url(key)`` and ``storage_options`` go through it, ``direct`` does not."""
    with FaultProxy(s3.server.endpoint) as proxy:
        yield ProxiedBucket(proxy, s3)


@pytest.fixture(scope="session")
def gcs_server() -> Iterator[GCSServer]:
    pytest.importorskip("gcp_storage_emulator.server", reason="no GCS emulator")
    pytest.importorskip("gcsfs", reason="the GCS emulator's client is gcsfs")
    with GCSServer() as server:
        yield server


@pytest.fixture
def gcs(gcs_server: GCSServer) -> Bucket:
    """A fresh bucket of the session's GCS emulator; its ``storage_options`` are gcsfs's."""
    return gcs_server.bucket()
