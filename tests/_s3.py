"""A local S3-compatible server for tests (moto in server mode) and a fault proxy.

``S3Server`` runs moto in its own process, bound to 127.0.0.1 on a port the
kernel picks, in its own process group, and stops it by that group. Running it
out of process keeps the server's allocations out of a test's ``tracemalloc``
and lets several client processes share it. ``FaultProxy`` is a tiny loopback
HTTP proxy in front of it that can fail requests (503 SlowDown, 500, 403) or
slow them down, to test retries and interrupted uploads on the real network path.

``python tests/_s3.py`` is the server process itself: it prints its port and
serves until its stdin closes.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing-secret-Zq81vX",  # distinctive: tests grep logs for it
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}
# Variables that would point a client at a real account or another endpoint.
_AWS_VARS = ("AWS_PROFILE", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE",
             "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_SECURITY_TOKEN")


class S3Server:
    """moto's S3 in a child process on 127.0.0.1; ``env(endpoint)`` configures a client."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[str] | None = None
        self.endpoint = ""

    def start(self, timeout: float = 30.0) -> S3Server:
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__)], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            start_new_session=True, env={**os.environ, **FAKE_CREDENTIALS})
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        line = ""
        while time.monotonic() < deadline and not line:
            line = self.proc.stdout.readline().strip()
            if self.proc.poll() is not None:
                break
        if not line.isdigit():
            self.stop()
            raise RuntimeError(f"moto server did not start (said {line!r})")
        self.endpoint = f"http://127.0.0.1:{line}"
        return self

    def stop(self) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()
        self.proc = None

    def env(self, endpoint: str | None = None) -> dict[str, str]:
        """Environment for a client of this server: fake credentials, its endpoint."""
        return {**FAKE_CREDENTIALS, "AWS_ENDPOINT_URL_S3": endpoint or self.endpoint}

    def client(self) -> Any:
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint,
                            aws_access_key_id=FAKE_CREDENTIALS["AWS_ACCESS_KEY_ID"],
                            aws_secret_access_key=FAKE_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
                            region_name="us-east-1")

    def new_bucket(self) -> str:
        name = f"t-{uuid.uuid4().hex[:16]}"
        self.client().create_bucket(Bucket=name)
        return name


def isolate_aws_env(setenv: Callable[[str, str], None], delenv: Callable[[str], None],
                    env: dict[str, str]) -> None:
    """Point this process's AWS chain at ``env`` only (no profile, no other endpoint)."""
    for var in _AWS_VARS:
        delenv(var)
    for k, v in env.items():
        setenv(k, v)


# -- the fault proxy --------------------------------------------------------------------

Rule = Callable[[str, str, int], "tuple[int, str] | None"]
"""(method, path with query, request number) -> (status, S3 error code) to fail, or None."""


class FaultProxy:
    """An HTTP proxy on 127.0.0.1 in front of ``upstream`` that applies ``rule`` to each
    request: a (status, code) answer replaces the upstream's (the request body is read
    and dropped), None forwards it. ``delay`` slows matching requests (seconds, by a
    predicate). ``cut`` (method, path, request number) -> True sends only the first half
    of that answer's body, then closes the connection (a body cut off in transit).
    ``seen`` records (method, path, status) of every request."""

    def __init__(self, upstream: str, rule: Rule | None = None,
                 delay: Callable[[str, str], float] | None = None,
                 cut: Callable[[str, str, int], bool] | None = None) -> None:
        self.upstream = upstream.removeprefix("http://")
        self.rule = rule
        self.delay = delay
        self.cut = cut
        self.seen: list[tuple[str, str, int]] = []
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    out = bytearray()
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass
                            return bytes(out)
                        out += self.rfile.read(size)
                        self.rfile.readline()
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def _handle(self) -> None:
                body = self._body()
                with proxy._lock:
                    number = len(proxy.seen)
                    proxy.seen.append((self.command, self.path, 0))
                if proxy.delay is not None:
                    time.sleep(proxy.delay(self.command, self.path))
                fault = proxy.rule(self.command, self.path, number) if proxy.rule else None
                if fault is not None:
                    status, code = fault
                    data = (f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}"
                            f"</Code><Message>injected {code}</Message></Error>").encode()
                    out = {"Content-Type": "application/xml"}
                else:
                    conn = http.client.HTTPConnection(proxy.upstream, timeout=60)
                    headers = {k: v for k, v in self.headers.items()
                               if k.lower() not in ("transfer-encoding", "content-length")}
                    conn.request(self.command, self.path, body=body if body else None,
                                 headers={**headers, "Content-Length": str(len(body))})
                    resp = conn.getresponse()
                    data = resp.read()
                    status = resp.status
                    out = {k: v for k, v in resp.getheaders()  # a HEAD keeps its length
                           if k.lower() not in ("transfer-encoding", "connection")
                           and (k.lower() != "content-length" or self.command == "HEAD")}
                    conn.close()
                with proxy._lock:  # before the answer: a client that has it may look
                    proxy.seen[number] = (self.command, self.path, status)
                cut = proxy.cut is not None and proxy.cut(self.command, self.path, number)
                self._answer(status, out, data, cut)

            def _answer(self, status: int, headers: dict[str, str], data: bytes,
                        cut: bool = False) -> None:
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                if self.command != "HEAD" or "Content-Length" not in headers:
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data[:len(data) // 2] if cut else data)
                if cut:
                    self.wfile.flush()
                    self.close_connection = True

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=10)

    def statuses(self) -> list[int]:
        with self._lock:
            return [s for _, _, s in self.seen]


def fail_first(n: int, status: int = 503, code: str = "SlowDown",
               when: Callable[[str, str], bool] = lambda m, p: True) -> Rule:
    """A rule failing the first ``n`` requests that ``when`` matches."""
    count = [0]
    lock = threading.Lock()

    def rule(method: str, path: str, number: int) -> tuple[int, str] | None:
        if not when(method, path):
            return None
        with lock:
            count[0] += 1
            return (status, code) if count[0] <= n else None

    return rule


@contextlib.contextmanager
def moto_server() -> Iterator[S3Server]:
    server = S3Server().start()
    try:
        yield server
    finally:
        server.stop()


def _serve() -> None:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    _, port = server.get_host_and_port()
    print(port, flush=True)
    sys.stdin.read()  # until the test closes our stdin or kills us
    server.stop()


if __name__ == "__main__":
    _serve()
