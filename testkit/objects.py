"""Object-store servers on loopback, for the tests of arrays in object stores: S3 (moto), GCS
(gcp-storage-emulator), and an HTTP proxy that injects faults in front of either.

Every server listens on 127.0.0.1, on a port the system picks (port 0), runs in this process on
daemon threads and stops by itself (``stop()``, or the end of a ``with`` block), so that a test
never reaches anything but loopback and never leaves a server behind.  Each kind gives the
``storage_options`` its client takes, so a test names a URL and those options and nothing else.

The proxy's faults are counted, not drawn: "the next 2 GETs answer 503", never "5% of requests
fail", so that a test never depends on chance or on timing.

Clients observed against these servers (obstore 0.12, moto 5.2):

* S3: obstore (``obstore.store.from_url("s3://bucket/...", **S3Server.storage_options())``).
  moto checks no signature: wrong credentials are accepted.
* GCS: gcsfs only, not obstore; see :class:`GCSServer` for why.
"""

from __future__ import annotations

import contextlib
import fcntl
import http.client
import http.server
import itertools
import json
import os
import select
import socket
import struct
import subprocess
import sys
import threading
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from types import TracebackType
from typing import Any, Literal, Self

__all__ = [
    "FAST_RETRY",
    "Bucket",
    "FaultProxy",
    "GCSServer",
    "Match",
    "ProxiedBucket",
    "S3Server",
    "fresh_bucket_name",
]

# obstore's RetryConfig (obstore.store.RetryConfig) for tests: 3 retries, backoff in
# milliseconds, so that a test of retries takes no time.  Pass as ``retry_config=``.
FAST_RETRY: dict[str, Any] = {
    "max_retries": 3,
    "backoff": {
        "init_backoff": timedelta(milliseconds=1),
        "max_backoff": timedelta(milliseconds=10),
        "base": 2,
    },
    "retry_timeout": timedelta(seconds=10),
}

ACCESS_KEY_ID = "testing"
SECRET_ACCESS_KEY = "testing-secret"
REGION = "us-east-1"
# How long any socket of the proxy waits for its peer: a guard against a hang, never reached by
# a passing test.
SOCKET_TIMEOUT_S = 30.0

_names = itertools.count()


def fresh_bucket_name(prefix: str = "oc") -> str:
    """A bucket name no other call of this process returns, valid for S3 and GCS (3 to 63
    characters of lower-case letters, digits and hyphens)."""
    return f"{prefix}-{next(_names)}-{uuid.uuid4().hex[:12]}"


@dataclass(frozen=True)
class Bucket:
    """One bucket of a server, and how a client reaches it.

    Attributes
    ----------
    scheme
        The URL scheme: "s3" or "gs".
    name
        The bucket's name.
    storage_options
        What the client takes besides the URL (endpoint, credentials).
    server
        The server the bucket lives on.
    """

    scheme: str
    name: str
    storage_options: dict[str, Any]
    server: Any = field(repr=False)

    def url(self, key: str = "") -> str:
        """``scheme://bucket/key``."""
        return f"{self.scheme}://{self.name}/{key.lstrip('/')}"


# The server's process: moto on 127.0.0.1 port 0, the port printed, until stdin closes.
# werkzeug logs every request at INFO, to stderr (discarded): a fifth of the server threads'
# samples, most of them queued on the log handler's lock.
_MOTO_MAIN = """
import logging
import sys
from moto.server import ThreadedMotoServer
logging.getLogger("werkzeug").setLevel(logging.ERROR)
server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
server.start()
print(server.get_host_and_port()[1], flush=True)
sys.stdin.read()
server.stop()
"""


class S3Server:
    """moto's S3 on 127.0.0.1, for obstore (and boto3, to set a test up behind its back).

    moto keeps one state per process, shared by every server it runs: give each test a bucket
    of its own (:meth:`make_bucket`) and tests stay independent.  What obstore relies on, moto
    does: ETags on GET and HEAD, ``If-None-Match`` answered 304, ``If-Match`` 412, ranges
    including suffix ranges (``bytes=-n``) answered 206.  It checks no signature.
    """

    def __init__(self) -> None:
        # In a process of its own: a client thread that holds the GIL (a page fault of a
        # chunk-backed ndarray waits for a fetch with it held) must not stop the server.
        self._process = subprocess.Popen(
            [sys.executable, "-c", _MOTO_MAIN],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        assert self._process.stdout is not None
        line = self._process.stdout.readline().decode().strip()
        if not line.isdigit():
            self._process.kill()
            raise RuntimeError(f"moto's server did not start: {line!r}")
        self.endpoint = f"http://127.0.0.1:{line}"

    def storage_options(self, endpoint: str | None = None) -> dict[str, Any]:
        """The options ``obstore.store.from_url("s3://...", **options)`` takes to reach this
        server, or ``endpoint`` (a proxy in front of it)."""
        return {
            "endpoint": endpoint or self.endpoint,
            "access_key_id": ACCESS_KEY_ID,
            "secret_access_key": SECRET_ACCESS_KEY,
            "region": REGION,
            "client_options": {"allow_http": True},
        }

    def boto3(self) -> Any:
        """A boto3 S3 client of this server."""
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=ACCESS_KEY_ID,
            aws_secret_access_key=SECRET_ACCESS_KEY,
            region_name=REGION,
        )

    def make_bucket(self, name: str | None = None) -> str:
        """Creates a bucket (a fresh name by default); returns its name."""
        name = name or fresh_bucket_name()
        self.boto3().create_bucket(Bucket=name)
        return name

    def bucket(self, name: str | None = None, endpoint: str | None = None) -> Bucket:
        """A new bucket, reached directly or through ``endpoint``."""
        return Bucket("s3", self.make_bucket(name), self.storage_options(endpoint), self)

    def stop(self) -> None:
        if self._process.poll() is None:
            assert self._process.stdin is not None
            self._process.stdin.close()  # the server's process ends at end-of-file
            try:
                self._process.wait(timeout=SOCKET_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        if self._process.stdout is not None:
            self._process.stdout.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class GCSServer:
    """gcp-storage-emulator on 127.0.0.1, in memory, for gcsfs.

    :meth:`storage_options` are gcsfs's (fsspec's ``gs://``): ``{"endpoint_url": ...,
    "token": "anon"}``; :meth:`filesystem` makes one.  Use ``gcsfs.core.GCSFileSystem``, not
    ``gcsfs.GCSFileSystem``: unless ``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false`` is set before
    gcsfs is imported, the latter is gcsfs's "extended" file system, which first asks the
    endpoint over gRPC for the bucket's layout and waits 60 s for the answer on every call.

    obstore cannot use this emulator (obstore 0.12, gcp-storage-emulator 2026.7): obstore's
    GCS store speaks GCS's XML API (``PUT /bucket/key``, ``HEAD``, ``GET /bucket?list-type=2``)
    and requires ``ETag`` and ``Last-Modified`` headers, while the emulator implements the JSON
    API: its uploads answer without an ``ETag`` (obstore: "ETag Header missing from response"),
    its downloads without ``Last-Modified`` (obstore: "Last-Modified Header missing from
    response"), and ``HEAD`` and XML listing answer 501; obstore also percent-encodes the
    hyphens of a bucket name (``oc%2D1``), which the emulator does not decode (501).  (With
    ``skip_signature`` instead of a ``bearer_token`` obstore even asks the metadata server,
    169.254.169.254, for a token.)

    The emulator ignores suffix ranges: ``bytes=-n`` answers the whole object.
    """

    def __init__(self) -> None:
        from gcp_storage_emulator.server import create_server

        self._server = create_server("127.0.0.1", 0, in_memory=True)
        # Its API thread is not a daemon; a test that forgets stop() must not hang the exit.
        self._server._api.daemon = True
        self._server.start()
        port = self._server._api._httpd.server_address[1]
        self.endpoint = f"http://127.0.0.1:{port}"

    def storage_options(self, endpoint: str | None = None) -> dict[str, Any]:
        """gcsfs's options to reach this server (or ``endpoint``, a proxy in front of it)."""
        return {"endpoint_url": endpoint or self.endpoint, "token": "anon"}

    def filesystem(self, endpoint: str | None = None) -> Any:
        """A gcsfs file system of this server (no instance cache: one per call)."""
        from gcsfs.core import GCSFileSystem

        return GCSFileSystem(**self.storage_options(endpoint), skip_instance_cache=True)

    def make_bucket(self, name: str | None = None) -> str:
        """Creates a bucket (a fresh name by default), through the JSON API; returns its name."""
        name = name or fresh_bucket_name()
        request = urllib.request.Request(
            f"{self.endpoint}/storage/v1/b?project=test",
            data=json.dumps({"name": name}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=SOCKET_TIMEOUT_S) as answer:
            answer.read()
        return name

    def bucket(self, name: str | None = None, endpoint: str | None = None) -> Bucket:
        """A new bucket, reached directly or through ``endpoint``."""
        return Bucket("gs", self.make_bucket(name), self.storage_options(endpoint), self)

    def stop(self) -> None:
        self._server.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


@dataclass(frozen=True)
class Match:
    """Which requests a fault applies to: a method (exactly, e.g. "GET") and a substring of the
    path (with the query); None matches any."""

    method: str | None = None
    path: str | None = None

    def __call__(self, method: str, path: str) -> bool:
        return (self.method is None or method == self.method) and (
            self.path is None or self.path in path
        )


Predicate = Match | Callable[[str, str], bool] | None
FaultKind = Literal["fail", "reset", "truncate"]

_ERROR_CODES = {
    400: "BadRequest",
    403: "AccessDenied",
    404: "NoSuchKey",
    500: "InternalError",
    503: "SlowDown",
}


@dataclass
class _Fault:
    kind: FaultKind
    remaining: int
    match: Predicate
    status: int = 503
    keep: int = 0


@dataclass
class _Rate:
    value: float
    match: Predicate


def _matches(match: Predicate, method: str, path: str) -> bool:
    return match is None or match(method, path)


@dataclass(frozen=True)
class ProxiedBucket:
    """A bucket reached through a :class:`FaultProxy`: ``url`` and ``storage_options`` go
    through the proxy, ``direct`` does not (to set a test up, or check it, without faults)."""

    proxy: FaultProxy
    direct: Bucket

    @property
    def storage_options(self) -> dict[str, Any]:
        return self.direct.server.storage_options(self.proxy.endpoint)  # type: ignore[no-any-return]

    @property
    def name(self) -> str:
        return self.direct.name

    def url(self, key: str = "") -> str:
        return self.direct.url(key)


class FaultProxy:
    """An HTTP/1.1 proxy on 127.0.0.1 in front of ``upstream`` (``http://host:port``), which
    forwards every request unchanged (Host included, so signatures stay valid) unless a fault
    says otherwise, and relays the answer (less its ``Connection`` header: the client's
    connection is kept alive, the upstream's is one per request).

    Faults apply to the requests a predicate matches (:class:`Match`, or any
    ``(method, path) -> bool``; None: all):

    * :meth:`fail_next`, :meth:`reset_next`, :meth:`truncate_next`: the next ``n`` matching
      requests, each taken by the first such fault (in the order they were set) that has some
      left;
    * :meth:`latency`, :meth:`slow_body`: every matching request until changed or cleared.

    ``requests`` counts the requests received, by method; ``connections`` the connections
    accepted; ``injected`` the faults applied, by
    kind ("fail", "reset", "truncate", "latency", "slow").
    """

    def __init__(self, upstream: str) -> None:
        scheme, _, hostport = upstream.partition("://")
        if scheme != "http" or not hostport:
            raise ValueError(f"FaultProxy forwards to http://host:port, not {upstream!r}")
        host, _, port = hostport.rstrip("/").rpartition(":")
        self.upstream = (host, int(port))
        self._lock = threading.Lock()
        self._requests: Counter[str] = Counter()
        self._injected: Counter[str] = Counter()
        self._faults: list[_Fault] = []
        self._latency: _Rate | None = None
        self._slow: _Rate | None = None
        self._stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._accepted = 0
        self._server = _ProxyServer(("127.0.0.1", 0), _ProxyHandler, self)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name="FaultProxy", daemon=True
        )
        self._thread.start()

    # --- what happened

    @property
    def requests(self) -> Counter[str]:
        """Requests received so far, by method (a copy)."""
        with self._lock:
            return Counter(self._requests)

    @property
    def connections(self) -> int:
        """Connections accepted so far (kept alive, one serves many requests)."""
        with self._lock:
            return self._accepted

    @property
    def injected(self) -> Counter[str]:
        """Faults applied so far, by kind (a copy)."""
        with self._lock:
            return Counter(self._injected)

    # --- faults

    def fail_next(self, n: int, status: int = 503, match: Predicate = None) -> None:
        """Answers the next ``n`` matching requests with ``status`` and an S3-style XML error
        (no ``Retry-After``), without forwarding them."""
        self._add(_Fault("fail", n, match, status=status))

    def reset_next(self, n: int, match: Predicate = None) -> None:
        """Resets the connection (TCP RST) of the next ``n`` matching requests instead of
        answering them; they are not forwarded."""
        self._add(_Fault("reset", n, match))

    def truncate_next(self, n: int, keep: int = 0, match: Predicate = None) -> None:
        """Forwards the next ``n`` matching requests, relays the status and headers of the
        answer (its Content-Length unchanged) and only the first ``keep`` bytes of its body,
        then closes the connection."""
        self._add(_Fault("truncate", n, match, keep=keep))

    def latency(self, seconds: float, match: Predicate = None) -> None:
        """Waits ``seconds`` before forwarding each matching request (0: no more)."""
        with self._lock:
            self._latency = _Rate(seconds, match) if seconds > 0 else None

    def slow_body(self, bytes_per_second: float | None, match: Predicate = None) -> None:
        """Relays the body of each matching answer at ``bytes_per_second`` (None: no more)."""
        with self._lock:
            self._slow = _Rate(bytes_per_second, match) if bytes_per_second else None

    def clear(self) -> None:
        """No more faults, latency or slow bodies (the counters stay)."""
        with self._lock:
            self._faults.clear()
            self._latency = None
            self._slow = None

    def _add(self, fault: _Fault) -> None:
        if fault.remaining < 0:
            raise ValueError("a fault applies to a count of requests >= 0")
        with self._lock:
            self._faults.append(fault)

    def _plan(self, method: str, path: str) -> tuple[_Fault | None, float, float | None]:
        """Counts a request; returns the fault it takes (if any), its latency and body rate."""
        with self._lock:
            self._requests[method] += 1
            fault = next(
                (f for f in self._faults if f.remaining > 0 and _matches(f.match, method, path)),
                None,
            )
            if fault is not None:
                fault.remaining -= 1
                self._injected[fault.kind] += 1
            delay = 0.0
            if self._latency is not None and _matches(self._latency.match, method, path):
                delay = self._latency.value
                self._injected["latency"] += 1
            rate = None
            if self._slow is not None and _matches(self._slow.match, method, path):
                rate = self._slow.value
                self._injected["slow"] += 1
            return fault, delay, rate

    # --- lifetime

    def stop(self) -> None:
        """Stops serving and drops every open connection; returns when the server is down."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        self._server.shutdown()
        with self._lock:
            connections = list(self._connections)
        for sock in connections:
            # Wakes a handler blocked reading the next request of a kept-alive connection.
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._server.server_close()
        self._thread.join(SOCKET_TIMEOUT_S)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class _ProxyServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    # stop() must not wait for handlers idling on kept-alive connections; it shuts them down.
    block_on_close = False
    # Clients open many connections at once (64 requests in flight): socketserver's backlog
    # of 5 drops their SYNs, which the kernel retries after a second.
    request_queue_size = 1024

    def __init__(
        self, address: tuple[str, int], handler: type[_ProxyHandler], proxy: FaultProxy
    ) -> None:
        self.proxy = proxy
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.proxy._lock:
            self.proxy._connections.add(request)
            self.proxy._accepted += 1
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.proxy._lock:
            self.proxy._connections.discard(request)
        super().shutdown_request(request)


class _Reset(Exception):
    """The connection was reset on purpose; no answer follows."""


class _ProxyHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = SOCKET_TIMEOUT_S
    server: _ProxyServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def handle_one_request(self) -> None:
        try:
            super().handle_one_request()
        except _Reset:
            self.close_connection = True
        except (OSError, http.client.HTTPException):
            # The client went away, or the upstream did: nothing more to say on this connection.
            self.close_connection = True

    def _proxy(self) -> None:
        proxy = self.server.proxy
        body = self._read_body()
        fault, delay, rate = proxy._plan(self.command, self.path)
        if fault is not None and fault.kind == "reset":
            self._reset()
        if fault is not None and fault.kind == "fail":
            self._fail(fault.status)
            return
        if delay and proxy._stopping.wait(delay):
            raise _Reset
        upstream = http.client.HTTPConnection(*proxy.upstream, timeout=SOCKET_TIMEOUT_S)
        try:
            upstream.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
            for name, value in self.headers.items():
                upstream.putheader(name, value)
            chunked = "chunked" in self.headers.get("Transfer-Encoding", "").lower()
            upstream.endheaders(body if body or chunked else None, encode_chunked=chunked)
            answer = upstream.getresponse()
            try:
                self._relay(answer, fault, rate)
            finally:
                answer.close()
        finally:
            upstream.close()

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = do_PATCH = do_OPTIONS = _proxy

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            parts: list[bytes] = []
            while True:
                size = int(self.rfile.readline(65537).split(b";")[0].strip(), 16)
                if size == 0:
                    # Trailers, up to the empty line.
                    while self.rfile.readline(65537).strip():
                        pass
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline(65537)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _reset(self) -> None:
        # SO_LINGER with a zero timeout: close() sends RST instead of FIN.
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.connection.close()
        raise _Reset

    def _fail(self, status: int) -> None:
        code = _ERROR_CODES.get(status, "InjectedFault")
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f"<Error><Code>{code}</Code><Message>Injected by FaultProxy</Message>"
            "<RequestId>faultproxy</RequestId></Error>"
        ).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _relay(
        self, answer: http.client.HTTPResponse, fault: _Fault | None, rate: float | None
    ) -> None:
        # The status line, then the upstream's headers unchanged (no Server or Date of ours)
        # but for those of its connection to us (hop by hop): one connection per request
        # upstream (moto always says "Connection: close"), kept alive towards the client.
        bodyless = (
            self.command == "HEAD" or answer.status in (204, 304) or 100 <= answer.status < 200
        )
        if not bodyless and answer.getheader("Content-Length") is None and not answer.chunked:
            # A body that ends with the connection: this one must end too.
            self.close_connection = True
        self.send_response_only(answer.status, answer.reason)
        for name, value in answer.getheaders():
            if name.lower() not in ("connection", "keep-alive"):
                self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if bodyless:
            return
        chunked = bool(answer.chunked)
        if fault is None and not rate and not chunked and answer.length and _SPLICE:
            _splice_body(answer, self.connection.fileno())
            return
        content = answer.read()
        if fault is not None and fault.kind == "truncate":
            if chunked:
                self.wfile.write(b"%x\r\n" % len(content))
            self._send(content[: fault.keep], rate)
            raise _Truncated
        if chunked:
            if content:
                self.wfile.write(b"%x\r\n" % len(content))
                self._send(content, rate)
                self.wfile.write(b"\r\n")
            self.wfile.write(b"0\r\n\r\n")
        else:
            self._send(content, rate)

    def _send(self, data: bytes, rate: float | None) -> None:
        if not rate:
            self.wfile.write(data)
            return
        # Pieces of a tenth of a second's worth each.
        step = max(1, int(rate / 10))
        stopping = self.server.proxy._stopping
        for start in range(0, len(data), step):
            piece = data[start : start + step]
            self.wfile.write(piece)
            if stopping.wait(len(piece) / rate):
                raise _Reset


class _Truncated(_Reset):
    """The answer was cut short on purpose; the connection closes (FIN, not RST)."""


# Bytes a body's pipe holds (Linux's default is 64 KiB; 1 MiB is the most an unprivileged
# process may ask for by default).
_PIPE_BYTES = 1 << 20
_SPLICE = hasattr(os, "splice") and hasattr(fcntl, "F_SETPIPE_SZ")


def _splice_body(answer: http.client.HTTPResponse, client: int) -> None:
    """Relays the rest of ``answer``'s body (``answer.length`` bytes) to the socket ``client``.

    The bytes http.client has read past the headers go first; the kernel moves the rest from
    socket to socket through a pipe (splice), none of it through Python.  Copied through Python,
    bodies cost the proxy half to all of the CPU time of the server that sent them, taken from
    the clients it serves on the same cores (the benchmarks run them all on one machine).
    """
    assert answer.length is not None and answer.fp is not None
    remaining = answer.length
    buffered = answer.fp.peek(remaining)[:remaining]
    answer.fp.read(len(buffered))  # taken from http.client's buffer: no read on the socket
    _write_all(client, buffered)
    remaining -= len(buffered)
    upstream = answer.fileno()
    out, into = os.pipe()
    try:
        with contextlib.suppress(OSError):  # a smaller pipe only means more calls
            fcntl.fcntl(into, fcntl.F_SETPIPE_SZ, _PIPE_BYTES)
        while remaining:
            moved = _when_ready(upstream, select.POLLIN, os.splice, upstream, into, remaining)
            if moved == 0:
                raise http.client.IncompleteRead(b"", remaining)
            remaining -= moved
            while moved:
                moved -= _when_ready(client, select.POLLOUT, os.splice, out, client, moved)
    finally:
        os.close(out)
        os.close(into)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[_when_ready(fd, select.POLLOUT, os.write, fd, view) :]


def _when_ready(fd: int, event: int, call: Callable[..., int], *args: Any) -> int:
    """``call(*args)``, waiting up to SOCKET_TIMEOUT_S for ``event`` on ``fd`` each time it
    would block (the proxy's sockets have timeouts, so they do not block)."""
    while True:
        try:
            return call(*args)
        except BlockingIOError:
            poll = select.poll()
            poll.register(fd, event)
            if not poll.poll(SOCKET_TIMEOUT_S * 1000):
                raise TimeoutError(f"a proxied body stalled for {SOCKET_TIMEOUT_S} s") from None
