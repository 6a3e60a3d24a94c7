"""`reprise ui` as a real process: bound to 127.0.0.1 by default, the token from
REPRISE_UI_TOKEN, loopback Host names only; stopped by the test (its process group)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import reprise

httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_reprise_ui_serves_the_api_on_loopback(tmp_path: Path) -> None:
    ws = reprise.init(tmp_path)
    with reprise.start_run("r", workspace=ws) as run:
        run.log_metric("loss", 1.0)
    ws.close()
    port = _free_port()
    env = {**os.environ, "REPRISE_UI_TOKEN": "tok-123"}
    log = tmp_path / "ui.log"
    with open(log, "wb") as out:  # a file, not a pipe: nothing blocks on a full pipe
        proc = subprocess.Popen([sys.executable, "-m", "reprise.cli", "ui", "--port",
                                 str(port)], cwd=tmp_path, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    auth = {"Authorization": "Bearer tok-123"}
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                res = httpx.get(f"{url}/api/health", headers=auth, timeout=2)
                break
            except httpx.TransportError:
                assert proc.poll() is None, log.read_text()
                assert time.monotonic() < deadline, "reprise ui did not start in 30 s"
                time.sleep(0.2)
        assert res.status_code == 200 and res.json()["read_only"] is True
        assert httpx.get(f"{url}/api/runs", timeout=5).status_code == 401
        rows = httpx.get(f"{url}/api/runs", headers=auth, timeout=5).json()["runs"]
        assert [r["id"] for r in rows] == [run.id]
        evil = httpx.get(f"{url}/api/health", headers={**auth, "Host": "evil.example"},
                         timeout=5)
        assert evil.status_code == 400  # DNS rebinding: only loopback names on loopback
        if shutil.which("ss"):
            listening = subprocess.run(["ss", "-ltnH"], capture_output=True, text=True,
                                       timeout=10).stdout
            mine = [ln for ln in listening.splitlines() if f":{port} " in ln]
            assert mine and all(f"127.0.0.1:{port}" in ln for ln in mine), mine
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=15)


def test_bad_port_is_a_user_error(tmp_path: Path) -> None:
    reprise.init(tmp_path).close()
    res = subprocess.run([sys.executable, "-m", "reprise.cli", "ui", "--port", "70000"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=60,
                         env=os.environ.copy())
    assert res.returncode == 2 and "--port must be between 0 and 65535" in res.stderr
