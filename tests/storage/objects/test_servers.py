"""The object-store servers and the fault proxy of ``testkit.objects``, with obstore (the
client oocarray uses) as their client: what they answer, and each fault seen by obstore as the
fault it is.  Counts, never timings: the proxy counts what it received and what it injected.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import socket
import socketserver
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import obstore as obs
import obstore.store
import pytest
from obstore.exceptions import (
    GenericError,
    NotModifiedError,
    PermissionDeniedError,
    PreconditionError,
)

from testkit.objects import FAST_RETRY, Bucket, FaultProxy, GCSServer, Match, ProxiedBucket

DATA = bytes(range(256)) * 400  # 100 KiB
RETRIES = FAST_RETRY["max_retries"]


def store(bucket: Bucket | ProxiedBucket, retries: int = RETRIES) -> Any:
    return obstore.store.from_url(
        bucket.url(), **bucket.storage_options, retry_config=dict(FAST_RETRY, max_retries=retries)
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def list_objects(conn: http.client.HTTPConnection, bucket: str) -> bytes:
    conn.request("GET", f"/{bucket}?list-type=2")
    return conn.getresponse().read()


# --- S3 (moto)


def test_s3_put_get_head_list(s3: Bucket) -> None:
    st = store(s3)
    put = obs.put(st, "dir/k", DATA)
    got = obs.get(st, "dir/k")
    assert bytes(got.bytes()) == DATA
    assert got.meta["e_tag"] == put["e_tag"] == obs.head(st, "dir/k")["e_tag"]
    assert got.meta["size"] == len(DATA)
    assert [m["path"] for m in obs.list(st, "dir").collect()] == ["dir/k"]
    # What obstore wrote, boto3 reads: one server, two clients.
    body = s3.server.boto3().get_object(Bucket=s3.name, Key="dir/k")["Body"].read()
    assert body == DATA


def test_s3_ranges(s3: Bucket) -> None:
    st = store(s3)
    obs.put(st, "k", DATA)
    assert bytes(obs.get_range(st, "k", start=10, end=20)) == DATA[10:20]
    suffix = obs.get(st, "k", options={"range": {"suffix": 7}})
    assert (bytes(suffix.bytes()), suffix.range) == (DATA[-7:], (len(DATA) - 7, len(DATA)))
    tail = obs.get(st, "k", options={"range": {"offset": len(DATA) - 3}})
    assert bytes(tail.bytes()) == DATA[-3:]
    parts = obs.get_ranges(st, "k", starts=[0, 500], ends=[5, 505])
    assert [bytes(p) for p in parts] == [DATA[:5], DATA[500:505]]


def test_s3_conditional_get(s3: Bucket) -> None:
    st = store(s3)
    etag = obs.put(st, "k", DATA)["e_tag"]
    assert etag
    with pytest.raises(NotModifiedError):
        obs.get(st, "k", options={"if_none_match": etag})
    assert bytes(obs.get(st, "k", options={"if_none_match": '"other"'}).bytes()) == DATA
    with pytest.raises(PreconditionError):
        obs.get(st, "k", options={"if_match": '"other"'})


def test_s3_missing_key_and_bucket(s3: Bucket) -> None:
    # obstore raises the builtin FileNotFoundError, not obstore.exceptions.NotFoundError.
    with pytest.raises(FileNotFoundError, match="NoSuchKey"):
        obs.get(store(s3), "absent")
    with pytest.raises(FileNotFoundError):
        obs.head(store(s3), "absent")
    other = Bucket("s3", "no-such-bucket-here", s3.storage_options, s3.server)
    with pytest.raises(FileNotFoundError, match="NoSuchBucket"):
        obs.get(store(other), "k")


def test_s3_buckets_are_independent(s3: Bucket) -> None:
    obs.put(store(s3), "k", b"one")
    other = s3.server.bucket()
    assert other.name != s3.name
    assert obs.list(store(other)).collect() == []


def test_s3_accepts_any_credentials(s3: Bucket) -> None:
    """moto checks no signature: a test of refused credentials needs the proxy's 403."""
    obs.put(store(s3), "k", b"x")
    wrong = dict(s3.storage_options, access_key_id="WRONG", secret_access_key="wrong")
    st = obstore.store.from_url(s3.url(), **wrong)
    assert bytes(obs.get(st, "k").bytes()) == b"x"


def test_connection_refused(s3: Bucket) -> None:
    options = dict(s3.storage_options, endpoint=f"http://127.0.0.1:{free_port()}")
    st = obstore.store.from_url(s3.url(), **options, retry_config=dict(FAST_RETRY, max_retries=1))
    with pytest.raises(GenericError, match="error sending request"):
        obs.get(st, "k")


# --- the fault proxy, in front of S3


def test_proxy_forwards(fault_proxy: ProxiedBucket) -> None:
    st = store(fault_proxy)
    obs.put(st, "k", DATA)
    assert bytes(obs.get(st, "k").bytes()) == DATA
    assert obs.head(st, "k")["size"] == len(DATA)
    assert [m["path"] for m in obs.list(st).collect()] == ["k"]
    etag = obs.head(store(fault_proxy.direct), "k")["e_tag"]
    with pytest.raises(NotModifiedError):  # a 304 relayed without a body
        obs.get(st, "k", options={"if_none_match": etag})
    assert fault_proxy.proxy.requests == {"PUT": 1, "GET": 3, "HEAD": 1}
    assert fault_proxy.proxy.injected == {}


def test_proxy_keep_alive_and_chunked_request(fault_proxy: ProxiedBucket) -> None:
    """Two requests on one connection, the first with a chunked body (moto takes unsigned
    PUTs; it refuses unsigned GETs)."""
    conn = http.client.HTTPConnection("127.0.0.1", int(fault_proxy.proxy.endpoint.split(":")[-1]))
    try:
        conn.request("PUT", f"/{fault_proxy.name}/c", body=iter([b"abc", b"defg"]))
        answer = conn.getresponse()
        answer.read()
        assert answer.status == 200
        conn.request("PUT", f"/{fault_proxy.name}/d", body=b"hij")
        answer = conn.getresponse()
        answer.read()
        assert answer.status == 200
    finally:
        conn.close()
    direct = store(fault_proxy.direct)
    assert bytes(obs.get(direct, "c").bytes()) == b"abcdefg"
    assert bytes(obs.get(direct, "d").bytes()) == b"hij"
    assert fault_proxy.proxy.requests == {"PUT": 2}
    assert fault_proxy.proxy.connections == 1


def test_proxy_relays_large_bodies_whole(fault_proxy: ProxiedBucket) -> None:
    """Bodies larger than the proxy's pipe and than http.client's buffer, whole and in
    ranges, as obstore reads them."""
    big = os.urandom(5 << 20) + b"end"
    obs.put(store(fault_proxy.direct), "big", big)
    st = store(fault_proxy)
    for _ in range(3):
        assert bytes(obs.get(st, "big").bytes()) == big
    assert bytes(obs.get_range(st, "big", start=1000, end=3_000_001)) == big[1000:3_000_001]
    assert bytes(obs.get_range(st, "big", start=len(big) - 10, end=len(big))) == big[-10:]
    assert fault_proxy.proxy.requests == {"GET": 5}


@contextlib.contextmanager
def raw_upstream(body: bytes, announced: int) -> Iterator[FaultProxy]:
    """A proxy in front of a server that answers every request with ``body`` under a
    Content-Length of ``announced``, then closes (as moto does)."""

    class Answer(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            self.request.recv(65536)
            head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
            self.request.sendall(head % announced + body)

    upstream = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=upstream.serve_forever, args=(0.05,), daemon=True).start()
    try:
        with FaultProxy(f"http://127.0.0.1:{upstream.server_address[1]}") as proxy:
            yield proxy
    finally:
        upstream.shutdown()
        upstream.server_close()


def test_proxy_keeps_the_connection_after_large_bodies() -> None:
    """Three 3 MiB answers one after another on one kept-alive connection to the proxy."""
    body = os.urandom(3 << 20)
    with raw_upstream(body, len(body)) as proxy:
        conn = http.client.HTTPConnection("127.0.0.1", int(proxy.endpoint.split(":")[-1]))
        try:
            for _ in range(3):
                conn.request("GET", "/any")
                assert conn.getresponse().read() == body
        finally:
            conn.close()
        assert (proxy.requests, proxy.connections) == ({"GET": 3}, 1)


def test_upstream_cut_short_is_a_short_body_to_the_client() -> None:
    """An upstream that closes before the length it announced: the client gets the bytes sent,
    then the end of the connection (a short body it can tell), never a hang."""
    announced, sent = 3 << 20, (1 << 20) + 5
    with raw_upstream(b"x" * sent, announced) as proxy:
        conn = http.client.HTTPConnection("127.0.0.1", int(proxy.endpoint.split(":")[-1]))
        try:
            conn.request("GET", "/any")
            answer = conn.getresponse()
            assert answer.getheader("Content-Length") == str(announced)
            with pytest.raises(http.client.IncompleteRead) as short:
                answer.read()
            assert len(short.value.partial) == sent
        finally:
            conn.close()


def test_503_below_the_retries_is_retried(fault_proxy: ProxiedBucket) -> None:
    obs.put(store(fault_proxy.direct), "k", DATA)
    fault_proxy.proxy.fail_next(RETRIES)
    assert bytes(obs.get(store(fault_proxy), "k").bytes()) == DATA
    assert fault_proxy.proxy.requests["GET"] == RETRIES + 1
    assert fault_proxy.proxy.injected["fail"] == RETRIES


def test_503_beyond_the_retries_raises(fault_proxy: ProxiedBucket) -> None:
    obs.put(store(fault_proxy.direct), "k", DATA)
    fault_proxy.proxy.fail_next(RETRIES + 1)
    with pytest.raises(GenericError, match="503 Service Unavailable") as error:
        obs.get(store(fault_proxy), "k")
    assert f"after {RETRIES} retries" in str(error.value)
    assert "SlowDown" in str(error.value)  # the proxy's XML error body, relayed
    assert fault_proxy.proxy.requests["GET"] == RETRIES + 1


@pytest.mark.parametrize(
    ("status", "error"), [(403, PermissionDeniedError), (404, FileNotFoundError)]
)
def test_client_errors_are_not_retried(
    fault_proxy: ProxiedBucket, status: int, error: type[Exception]
) -> None:
    obs.put(store(fault_proxy.direct), "k", DATA)
    fault_proxy.proxy.fail_next(1, status=status)
    with pytest.raises(error):
        obs.get(store(fault_proxy), "k")
    assert fault_proxy.proxy.requests["GET"] == 1


def test_faults_match_method_and_path(fault_proxy: ProxiedBucket) -> None:
    st = store(fault_proxy, retries=0)
    fault_proxy.proxy.fail_next(1, match=Match(method="PUT"))
    fault_proxy.proxy.fail_next(1, match=Match(path="/b"))
    obs.put(store(fault_proxy.direct), "a", b"a")
    assert bytes(obs.get(st, "a").bytes()) == b"a"  # neither matches
    with pytest.raises(GenericError, match="503"):
        obs.put(st, "a", b"x")
    with pytest.raises(GenericError, match="503"):
        obs.put(st, "b", b"x")  # the PUT fault is spent; the path fault matches
    obs.put(st, "b", b"b")  # both spent
    assert fault_proxy.proxy.injected["fail"] == 2


def test_reset_is_retried_then_raises(fault_proxy: ProxiedBucket) -> None:
    obs.put(store(fault_proxy.direct), "k", DATA)
    fault_proxy.proxy.reset_next(1)
    assert bytes(obs.get(store(fault_proxy), "k").bytes()) == DATA
    fault_proxy.proxy.reset_next(RETRIES + 1)
    with pytest.raises(GenericError, match="error sending request"):
        obs.get(store(fault_proxy), "k")
    assert fault_proxy.proxy.injected["reset"] == RETRIES + 2


def test_truncated_body_never_reads_short(fault_proxy: ProxiedBucket) -> None:
    obs.put(store(fault_proxy.direct), "k", DATA)
    # Without retries, the short body is an error.
    fault_proxy.proxy.truncate_next(1, keep=1000)
    with pytest.raises(GenericError, match="body error"):
        obs.get(store(fault_proxy, retries=0), "k").bytes()
    # With them, obstore asks again (it retries a body cut short) and gets it all.
    fault_proxy.proxy.truncate_next(1, keep=1000)
    assert bytes(obs.get(store(fault_proxy), "k").bytes()) == DATA
    # And when every try is cut short, an error again, also for ranges and streams.
    fault_proxy.proxy.truncate_next(1000, keep=1000)
    with pytest.raises(GenericError, match="body error"):
        obs.get(store(fault_proxy), "k").bytes()
    with pytest.raises(GenericError, match="body error"):
        obs.get_range(store(fault_proxy), "k", start=0, length=50_000)
    with pytest.raises(GenericError, match="body error"):
        b"".join(bytes(c) for c in obs.get(store(fault_proxy), "k").stream())


def test_latency_and_slow_body_apply(fault_proxy: ProxiedBucket) -> None:
    proxy = fault_proxy.proxy
    st = store(fault_proxy)
    proxy.latency(0.001)
    obs.put(st, "k", DATA)
    assert bytes(obs.get(st, "k").bytes()) == DATA
    assert proxy.injected["latency"] == 2
    proxy.slow_body(10_000_000, match=Match(method="GET"))
    assert bytes(obs.get(st, "k").bytes()) == DATA
    assert obs.head(st, "k")["size"] == len(DATA)
    assert (proxy.injected["latency"], proxy.injected["slow"]) == (4, 1)
    proxy.clear()
    proxy.fail_next(0)
    assert bytes(obs.get(st, "k").bytes()) == DATA
    assert (proxy.injected["latency"], proxy.injected["slow"], proxy.injected["fail"]) == (4, 1, 0)


def test_stop_drops_kept_alive_connections(fault_proxy: ProxiedBucket) -> None:
    """A client's idle connection does not keep ``stop()`` waiting (a hang guard would)."""
    conn = http.client.HTTPConnection("127.0.0.1", int(fault_proxy.proxy.endpoint.split(":")[-1]))
    try:
        list_objects(conn, fault_proxy.name)
        fault_proxy.proxy.stop()
        with pytest.raises((OSError, http.client.HTTPException)):
            list_objects(conn, fault_proxy.name)
    finally:
        conn.close()


# --- GCS (gcp-storage-emulator, through gcsfs)


def test_gcs_put_get(gcs: Bucket) -> None:
    assert isinstance(gcs.server, GCSServer)
    fs = gcs.server.filesystem()
    path = f"{gcs.name}/dir/k"
    fs.pipe(path, DATA)
    assert fs.cat(path) == DATA
    assert fs.cat_file(path, start=10, end=20) == DATA[10:20]
    assert fs.info(path)["size"] == len(DATA)
    assert fs.ls(f"{gcs.name}/dir") == [path]
    with pytest.raises(FileNotFoundError):
        fs.cat(f"{gcs.name}/absent")


def test_gcs_emulator_is_not_for_obstore(gcs: Bucket) -> None:
    """Why ``GCSServer`` serves gcsfs only: the emulator's answers lack the headers obstore
    requires.  (A bearer token, so that obstore asks no metadata server for one.)"""
    st = obstore.store.from_url(
        gcs.url(),
        base_url=gcs.server.endpoint,
        bearer_token="emulator",
        client_options={"allow_http": True},
        retry_config=dict(FAST_RETRY, max_retries=0, retry_timeout=timedelta(seconds=5)),
    )
    with pytest.raises(GenericError, match="GCS"):
        obs.put(st, "k", b"x")
