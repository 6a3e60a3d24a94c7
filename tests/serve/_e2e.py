"""Real ``reprise serve`` processes on loopback and a load to drive them, for the rollout
tests: start, wait until ready, stop (SIGINT) or kill (SIGKILL); a load of single-row
requests from a few threads, every answer recorded with the version that gave it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from tests.serve._faults import FAULTS_ENV

FAULTS = Path(__file__).with_name("_faults.py")
_CLEAN_ENV = ("REPRISE_WORKSPACE", "REPRISE_STORE_URL", "REPRISE_ARTIFACTS_URL",
              "REPRISE_SERVE_TOKEN")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(condition: Callable[[], Any], timeout: float, what: str,
             every: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(every)


class Server:
    """One ``reprise serve NAME@production`` process (faults injected as ``faults`` says)."""

    def __init__(self, root: Path, faults: dict[int, dict[str, Any]], *, name: str = "churn",
                 poll: float = 0.2, store_url: str | None = None, args: tuple[str, ...] = ()
                 ) -> None:
        self.root, self.faults, self.name, self.poll = root, faults, name, poll
        self.store_url, self.args = store_url, args
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = root / f"server-{self.port}.log"

    def start(self) -> Server:
        env = {k: v for k, v in os.environ.items() if k not in _CLEAN_ENV}
        env[FAULTS_ENV] = json.dumps({str(k): v for k, v in self.faults.items()})
        if self.store_url:
            env["REPRISE_STORE_URL"] = self.store_url
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, str(FAULTS), "serve", f"{self.name}@production", "--port",
                 str(self.port), "--poll-interval", str(self.poll), "--log-level", "info",
                 *self.args], cwd=self.root, env=env, stdout=log, stderr=subprocess.STDOUT)
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def wait_ready(self, timeout: float = 120) -> Server:
        def ready() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"the server exited ({self.proc.returncode}):\n"
                                     f"{self.tail()}")
            try:
                return httpx.get(self.url + "/readyz", timeout=2).status_code == 200
            except httpx.TransportError:
                return False
        wait_for(ready, timeout, f"{self.url} to be ready", every=0.2)
        return self

    def rollout(self) -> dict[str, Any] | None:
        """The rollout this server routes by now (from ``GET /v1/models``)."""
        models = httpx.get(self.url + "/v1/models", timeout=5).json()["models"]
        return models[0].get("rollout")  # type: ignore[no-any-return]

    def stop(self) -> int | None:
        """SIGINT (drain, then exit); SIGKILL after 30 s."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(10)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


@dataclass(frozen=True)
class Answer:
    t: float  # wall-clock time of the answer (comparable with the store's times)
    status: int
    version: int | None  # x-reprise-model-version
    seconds: float
    key: str | None


class Load:
    """Threads posting single-row requests (features ``a``, ``b`` ~ N(0, 1)) until
    stopped, spread over ``urls``; ``key(i)`` gives request i's x-request-key (None:
    no header)."""

    def __init__(self, urls: list[str], *, threads: int = 4,
                 key: Callable[[int], str | None] | None = None,
                 path: str = "/v1/models/churn/predict") -> None:
        self.urls, self.threads, self.key, self.path = urls, threads, key, path
        self.answers: list[Answer] = []
        self._stop = threading.Event()
        self._workers: list[threading.Thread] = []
        self._count = 0
        self._lock = threading.Lock()

    def __enter__(self) -> Load:
        for k in range(self.threads):
            t = threading.Thread(target=self._run, args=(k,), daemon=True)
            t.start()
            self._workers.append(t)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        for t in self._workers:
            t.join(30)

    def _next(self) -> int:
        with self._lock:
            self._count += 1
            return self._count

    def _run(self, k: int) -> None:
        rng = np.random.default_rng(k)
        url = self.urls[k % len(self.urls)] + self.path
        with httpx.Client(timeout=30) as client:
            while not self._stop.is_set():
                i = self._next()
                key = self.key(i) if self.key is not None else None
                a, b = rng.normal(size=2)
                start = time.perf_counter()
                try:
                    r = client.post(url, json=[{"a": float(a), "b": float(b)}],
                                    headers={"x-request-key": key} if key else None)
                except httpx.TransportError:  # the server was killed: counted as such
                    self.answers.append(Answer(time.time(), 0, None,
                                               time.perf_counter() - start, key))
                    time.sleep(0.05)
                    continue
                version = r.headers.get("x-reprise-model-version")
                self.answers.append(Answer(time.time(), r.status_code,
                                           int(version) if version else None,
                                           time.perf_counter() - start, key))

    def rate(self) -> float:
        """Answers per second so far."""
        if len(self.answers) < 2:
            return 0.0
        return len(self.answers) / max(1e-9, self.answers[-1].t - self.answers[0].t)
