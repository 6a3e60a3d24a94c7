"""The request log of real ``reprise serve`` processes on loopback, under load: a graceful
stop (SIGINT) in the middle of the load loses no answered request; a SIGKILL loses at
most what was not flushed yet and never leaves a half-written chunk indexed."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

import reprise
from reprise.monitor import read_requests
from reprise.registry import promote, register_package
from reprise.store._request_log import read_request_chunk
from tests.registry.test_registry import pkg
from tests.serve._e2e import Server, wait_for

ALL = ("--log-sample", "1", "--log-cap", "100000")


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.chdir(tmp_path)
    w = reprise.init(tmp_path)
    register_package("churn", pkg(1.0), workspace=w)
    promote("churn", 1, "production", workspace=w)
    yield w
    w.close()


class IdLoad:
    """Threads posting single-row requests; keeps (answer time, request id) of each 200."""

    def __init__(self, url: str, threads: int = 4) -> None:
        self.url = url + "/v1/models/churn/predict"
        self.answered: list[tuple[float, str]] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(k,), daemon=True)
                         for k in range(threads)]

    def __enter__(self) -> IdLoad:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(30)

    def _run(self, k: int) -> None:
        rng = np.random.default_rng(k)
        with httpx.Client(timeout=10) as client:
            while not self._stop.is_set():
                a, b = rng.normal(size=2)
                try:
                    r = client.post(self.url, json=[{"a": float(a), "b": float(b)}])
                except httpx.TransportError:  # stopping or killed
                    time.sleep(0.02)
                    continue
                if r.status_code == 200:
                    self.answered.append((time.time(), r.headers["x-request-id"]))


def _logged_ids(ws: Any) -> list[str]:
    table = read_requests("churn", workspace=ws)
    return table["request_id"].to_pylist() if table.num_rows else []


def test_a_graceful_stop_under_load_loses_no_answered_request(ws: Any, tmp_path: Path) -> None:
    # nothing is flushed before the stop: every record is written by the shutdown flush
    server = Server(tmp_path, {}, args=(*ALL, "--log-flush-s", "600")).start()
    try:
        server.wait_ready()
        with IdLoad(server.url) as load:
            wait_for(lambda: len(load.answered) >= 300, 60, "300 answers")
            assert server.stop() == 0  # SIGINT while the load goes on
    finally:
        server.stop()
    answered = [rid for _, rid in load.answered]
    logged = _logged_ids(ws)
    assert len(answered) >= 300
    assert sorted(logged) == sorted(answered)  # every acknowledged answer, no other


def test_a_sigkill_loses_at_most_the_unflushed_buffer_and_no_chunk_is_half_indexed(
        ws: Any, tmp_path: Path) -> None:
    server = Server(tmp_path, {}, args=(*ALL, "--log-flush-s", "0.2")).start()
    try:
        server.wait_ready()
        with IdLoad(server.url) as load:
            wait_for(lambda: len(ws.metadata.list_request_chunks("churn")) >= 5, 60,
                     "five chunks written")
            time.sleep(0.5)
            killed_at = time.time()
            server.kill()
    finally:
        server.stop()
    chunks = ws.metadata.list_request_chunks("churn")
    for chunk in chunks:  # every indexed chunk is whole: its file reads, all its rows
        assert read_request_chunk(ws, chunk).num_rows == chunk.rows
    logged = _logged_ids(ws)
    assert len(logged) == len(set(logged)) == sum(c.rows for c in chunks)
    answered = {rid: t for t, rid in load.answered}
    assert set(logged) <= set(answered)
    # what is lost was answered in the last moments: a flush is due every 0.2 s
    lost = [t for rid, t in answered.items() if rid not in set(logged)]
    assert all(t > killed_at - 3.0 for t in lost), (len(lost), killed_at - min(lost))
    report = ws.fsck(verify_hashes=True)
    assert not report.missing and not report.corrupted
