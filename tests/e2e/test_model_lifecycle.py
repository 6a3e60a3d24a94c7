"""The whole life of a model as a user drives it: train in a pipeline -> register ->
promote -> serve -> predict over HTTP (Reprise's API and the Open Inference Protocol) ->
promote another version -> the running server follows, without failing a request ->
roll back -> it follows back; then a clean shutdown."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.pipeline.test_pipelines import cli
from tests.registry.test_cli import js, make_project


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path)


def _wait(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _version_now(url: str, row: dict[str, float]) -> int:
    r = httpx.post(f"{url}/v1/models/points/predict", json={"records": [row]}, timeout=10)
    assert r.status_code == 200, r.text
    return int(r.json()["version"])


class Load(threading.Thread):
    """Requests in a loop while the alias moves: every one must succeed."""

    def __init__(self, url: str, row: dict[str, float]) -> None:
        super().__init__(daemon=True)
        self.url, self.row = url, row
        self.codes: list[int] = []
        self.versions: set[int] = set()
        self.stop = threading.Event()

    def run(self) -> None:
        with httpx.Client(timeout=10) as client:
            while not self.stop.is_set():
                r = client.post(f"{self.url}/v1/models/points/predict",
                                json={"records": [self.row]})
                self.codes.append(r.status_code)
                if r.status_code == 200:
                    self.versions.add(int(r.json()["version"]))


def test_train_register_promote_serve_follow_rollback(project: Path) -> None:
    run1 = js(project, "run", "flow.py:flow")["run_id"]
    assert js(project, "models", "register", "points", "--run", run1)["version"] == 1
    cli(project, "models", "promote", "points", "1", "--alias", "production")

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if k != "REPRISE_WORKSPACE"}
    server = subprocess.Popen(
        [sys.executable, "-m", "reprise.cli", "serve", "points@production", "--port", str(port),
         "--poll-interval", "0.3"], cwd=project, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)
    load: Load | None = None
    try:
        def ready() -> bool:
            assert server.poll() is None, server.stdout.read()  # type: ignore[union-attr]
            try:
                return httpx.get(f"{url}/readyz", timeout=2).status_code == 200
            except httpx.TransportError:
                return False

        _wait(ready, 90, "the server to be ready")
        row = {"a": 0.8, "b": -0.4}
        assert _version_now(url, row) == 1
        body = httpx.post(f"{url}/v1/models/points/predict",
                          json={"columns": {"a": [0.8, -1.0], "b": [-0.4, 1.0]}}, timeout=10)
        columnar = body.json()["predictions"]  # columns in, columns out
        assert body.status_code == 200 and len(columnar["prediction"]) == 2
        meta = httpx.get(f"{url}/v2/models/points", timeout=10).json()
        assert meta["name"] == "points" and [i["name"] for i in meta["inputs"]] == ["a", "b"]
        infer = httpx.post(f"{url}/v2/models/points/infer", timeout=10, json={
            "id": "req-1", "inputs": [
                {"name": "a", "shape": [2], "datatype": "FP64", "data": [0.8, -1.0]},
                {"name": "b", "shape": [2], "datatype": "FP64", "data": [-0.4, 1.0]}]})
        answer = infer.json()
        assert infer.status_code == 200 and answer["model_version"] == "1"
        assert answer["id"] == "req-1"
        outputs = {o["name"]: o for o in answer["outputs"]}
        assert outputs["prediction"]["data"] == columnar["prediction"]

        load = Load(url, row)
        load.start()
        run2 = js(project, "run", "flow.py:flow", "-p", "C=0.01")["run_id"]
        assert js(project, "models", "register", "points", "--run", run2)["version"] == 2
        cli(project, "models", "promote", "points", "2", "--alias", "production")
        _wait(lambda: _version_now(url, row) == 2, 30, "the server to follow the promotion")
        cli(project, "models", "rollback", "points", "--alias", "production")
        _wait(lambda: _version_now(url, row) == 1, 30, "the server to follow the rollback")
        load.stop.set()
        load.join(timeout=30)
        assert load.codes and set(load.codes) == {200}, sorted(set(load.codes))
        assert load.versions == {1, 2}
        assert httpx.post(f"{url}/v1/models/points/versions/9/predict",
                          json={"records": [row]}, timeout=10).status_code == 404
    finally:
        if load is not None:
            load.stop.set()
        server.send_signal(signal.SIGINT)
        out, _ = server.communicate(timeout=60)
    assert server.returncode == 0, out
