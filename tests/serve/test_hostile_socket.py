"""Hostile request bodies against a real server process on a loopback socket: each is
refused while ``/healthz`` keeps answering (issue 20, items 1 and 2).

The server runs in its own process, as in production, so a request that blocks its
event loop shows as health probes that stall (before the fix: 44 s for item 1)."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
_SERVER = """
import sys, uvicorn
from reprise.serve import Settings, create_app
from tests.serve.fakes import FakeSource
app = create_app(FakeSource(), ["churn@production"], settings=Settings())
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""
X = {"name": "x", "shape": [1], "datatype": "FP64", "data": [1.0]}
Y = {"name": "y", "shape": [1], "datatype": "INT64", "data": [3]}
PLAN = {"name": "plan", "shape": [1], "datatype": "BYTES", "data": ["gold"]}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = subprocess.Popen([sys.executable, "-c", _SERVER, str(port)], cwd=ROOT, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(base + "/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "no server"
            time.sleep(0.1)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:  # its loop is blocked: SIGTERM is not handled
            proc.kill()
            proc.wait(15)


async def _while_probing(base: str, path: str, body: Any, copies: int,
                         ) -> tuple[list[httpx.Response], float]:
    """Send ``copies`` of a bad body at once and probe /healthz until they are answered:
    (their responses, the slowest probe in seconds)."""
    async with httpx.AsyncClient(base_url=base, timeout=20) as c:
        assert (await c.get("/healthz")).status_code == 200  # connection warm
        bad = [asyncio.ensure_future(c.post(path, json=body)) for _ in range(copies)]
        slowest = 0.0
        while not all(t.done() for t in bad):
            t0 = time.perf_counter()
            assert (await c.get("/healthz")).status_code == 200
            slowest = max(slowest, time.perf_counter() - t0)
            await asyncio.sleep(0.01)
        return [t.result() for t in bad], slowest


def test_distinct_keys_are_refused_while_health_answers(url: str) -> None:
    records = [{f"k{i:05d}": 0} for i in range(12_000)]  # ~145 kB, the body
    responses, slowest = asyncio.run(
        _while_probing(url, "/v1/models/churn/predict", {"records": records}, 1))
    (r,) = responses
    assert r.status_code == 422 and len(r.content) < 4000
    assert slowest < 2.0, slowest  # 44 s before the fix (the check blocked the loop)


def test_declared_shapes_without_data_are_refused_while_health_answers(url: str) -> None:
    ghost = {"name": "ghost", "shape": [1_000_000_000, 0], "datatype": "FP64", "data": []}
    responses, slowest = asyncio.run(
        _while_probing(url, "/v2/models/churn/infer", {"inputs": [X, Y, PLAN, ghost]}, 3))
    for r in responses:  # before the fix: 8 GB each for ~30 s
        assert r.status_code == 400 and "unexpected input 'ghost'" in r.json()["error"]
    assert slowest < 2.0, slowest
