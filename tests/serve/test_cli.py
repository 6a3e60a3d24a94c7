"""``reprise serve``: registered on the CLI, user errors exit 2, a missing extra names
the install command, and (end to end) a registered package answers over HTTP."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pandas as pd
import pytest
from sklearn.linear_model import LogisticRegression

from reprise.cli import main


def _exit_code(args: list[str]) -> int:
    with pytest.raises(SystemExit) as info:
        main(args)
    return int(info.value.code or 0)


def test_unknown_model_is_a_user_error(workspace: Any, capsys: pytest.CaptureFixture[str]
                                       ) -> None:
    assert _exit_code(["serve", "ghost@production", "--port", "0"]) == 2
    assert "ghost" in capsys.readouterr().err


def test_a_missing_serve_extra_names_the_install_command(
        workspace: Any, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "uvicorn", None)  # as if not installed
    assert _exit_code(["serve", "churn@production"]) == 2
    assert "pip install 'reprise-ml[serve]'" in capsys.readouterr().err


def test_serve_starts_without_typer(tmp_path: Path) -> None:
    """``reprise serve`` is parsed on the fast path: Typer (with click and its adapters)
    cost every new replica ~0.2 s of its cold start."""
    import reprise

    reprise.init(tmp_path).close()
    code = ("import sys\nfrom reprise.cli import main\ntry:\n"
            "    main(['serve', 'ghost@production', '--port', '0', '--max-wait-ms', '1'])\n"
            "except SystemExit as exc:\n    print(exc.code, 'typer' in sys.modules)\n")
    env = {k: v for k, v in os.environ.items() if k != "REPRISE_WORKSPACE"}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, timeout=120,
                         capture_output=True, text=True)
    assert out.stdout.split() == ["2", "False"], out.stderr
    assert "ghost" in out.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_serve_a_registered_package_end_to_end(workspace: Any, tmp_path: Path) -> None:
    from reprise.registry import package_model, promote, register_package

    rng = np.random.default_rng(0)
    frame = pd.DataFrame(rng.normal(size=(200, 3)), columns=["a", "b", "c"])
    clf = LogisticRegression().fit(frame.to_numpy(), (frame["a"] > 0).astype(int))
    version = register_package("churn", package_model(clf, sample=frame),
                               workspace=workspace).version
    promote("churn", version, "production", workspace=workspace, force=True, reason="test")
    port = _free_port()
    env = {**os.environ, "REPRISE_SERVE_TOKEN": "t0ken"}
    proc = subprocess.Popen([sys.executable, "-m", "reprise.cli", "serve", "churn@production",
                             "--port", str(port), "--poll-interval", "0.5"], cwd=workspace.root,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        url, deadline = f"http://127.0.0.1:{port}", time.monotonic() + 60
        while True:
            try:
                if httpx.get(url + "/readyz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline and proc.poll() is None, proc.stdout.read()  # type: ignore[union-attr]
            time.sleep(0.2)
        row = frame.iloc[0].to_dict()
        denied = httpx.post(url + "/v1/models/churn/predict", json=[row], timeout=5)
        r = httpx.post(url + "/v1/models/churn/predict", json=[row], timeout=5,
                       headers={"authorization": "Bearer t0ken"})
        assert denied.status_code == 401
        assert r.status_code == 200 and r.json()["version"] == version
        assert r.json()["predictions"][0]["prediction"] == int(clf.predict(
            frame.head(1).to_numpy())[0])
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    assert "t0ken" not in out
