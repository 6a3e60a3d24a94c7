"""``reprise export docker|kubernetes|mlflow`` end to end through ``python -m
reprise.cli``: a Docker context whose build step and entrypoint (run here with this
interpreter, as the image would run them) answer a prediction over HTTP; user errors
exit 2 and write nothing; where a Docker daemon runs, the image is built and run."""

from __future__ import annotations

import json
import os
import shutil
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

SRC = Path(__file__).resolve().parents[2] / "src"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("REPRISE_WORKSPACE", "REPRISE_STORE_URL", "REPRISE_SERVE_TOKEN")}
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), env.get("PYTHONPATH", "")])
    # `python` in the entrypoint is this interpreter, as it is the image's
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return {**env, **extra}


def _cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "reprise.cli", *args], cwd=cwd, env=_env(),
                          capture_output=True, text=True, timeout=120)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def churn(workspace: Any) -> pd.DataFrame:
    from sklearn.linear_model import LogisticRegression

    from reprise.registry import package_model, promote, register_package

    rng = np.random.default_rng(1)
    frame = pd.DataFrame(rng.normal(size=(150, 3)), columns=["a", "b", "c"])
    clf = LogisticRegression().fit(frame, (frame["a"] > 0).astype(int))
    version = register_package("churn", package_model(clf, sample=frame),
                               workspace=workspace).version
    promote("churn", version, "production", workspace=workspace, force=True, reason="test")
    return frame


def _wait_ready(url: str, proc: subprocess.Popen[str], timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(url + "/readyz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"the server did not get ready:\n{proc.communicate()[0]}")
        time.sleep(0.2)


def test_the_docker_context_builds_its_workspace_and_its_entrypoint_serves(
        workspace: Any, churn: pd.DataFrame, tmp_path: Path) -> None:
    ctx = tmp_path / "ctx"
    res = _cli(["export", "docker", "churn@production", "-o", str(ctx), "--json"],
               workspace.root)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["model"] == "churn:1"
    # the image's build step (RUN setup_workspace.py), then its ENTRYPOINT, here
    image_ws = tmp_path / "srv"
    image_ws.mkdir()
    setup = subprocess.run([sys.executable, str(ctx / "setup_workspace.py"),
                            str(ctx / "package"), str(image_ws)], cwd=image_ws,
                           env=_env(REPRISE_WORKSPACE=str(image_ws)), capture_output=True,
                           text=True, timeout=120)
    assert setup.returncode == 0, setup.stderr
    assert "churn@production -> churn:1" in setup.stdout
    port = _free_port()
    down = subprocess.run([sys.executable, str(ctx / "healthcheck.py")], timeout=30,
                          env=_env(PORT=str(port)), capture_output=True, text=True)
    assert down.returncode == 1 and "unhealthy" in down.stderr  # nothing listens yet
    proc = subprocess.Popen(["/bin/sh", str(ctx / "entrypoint.sh"), "--poll-interval", "1"],
                            cwd=image_ws, env=_env(REPRISE_WORKSPACE=str(image_ws),
                                                   REPRISE_HOST="127.0.0.1", PORT=str(port),
                                                   REPRISE_SERVE_TOKEN="s3cret"),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(url, proc)
        health = subprocess.run([sys.executable, str(ctx / "healthcheck.py")], timeout=30,
                                env=_env(PORT=str(port)), capture_output=True, text=True)
        assert health.returncode == 0, health.stderr  # the image's HEALTHCHECK
        rows = churn.head(3).to_dict(orient="records")
        assert httpx.post(url + "/v1/models/churn/predict", json=rows,
                          timeout=10).status_code == 401
        r = httpx.post(url + "/v1/models/churn/predict", json=rows, timeout=10,
                       headers={"authorization": "Bearer s3cret"})
        assert r.status_code == 200, r.text
        from reprise.registry import load_model

        expected = load_model("churn@production", workspace=workspace).predict_records(rows)
        assert [p["prediction"] for p in r.json()["predictions"]] == expected["prediction"]
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    assert "s3cret" not in out


def test_exports_through_the_cli_and_their_user_errors(workspace: Any, churn: pd.DataFrame,
                                                       tmp_path: Path) -> None:
    k8s = tmp_path / "k8s"
    res = _cli(["export", "kubernetes", "churn@production", "-o", str(k8s), "--image",
                "registry.example/churn:1", "--replicas", "1"], workspace.root)
    assert res.returncode == 0, res.stderr
    assert "exported churn:1 (kubernetes, 4 files)" in res.stdout
    assert "registry.example/churn:1" in (k8s / "deployment.yaml").read_text()
    again = _cli(["export", "kubernetes", "churn@production", "-o", str(k8s)], workspace.root)
    assert again.returncode == 2 and "not empty" in again.stderr and "--force" in again.stderr
    for args, message in [
            (["export", "docker", "ghost@production"], "no model 'ghost'"),
            (["export", "docker", "churn@staging"], "no alias 'staging'"),
            (["export", "mlflow", "churn:7"], "no version 7"),
            (["export", "kubernetes", "churn@production", "--target-cpu", "0"], "--target-cpu")]:
        out = tmp_path / "never"
        res = _cli([*args, "-o", str(out)], workspace.root)
        assert res.returncode == 2, (args, res.stderr)
        assert message in res.stderr and "Traceback" not in res.stderr
        assert not out.exists()
    mlf = tmp_path / "mlflow"
    res = _cli(["export", "mlflow", "churn:1", "-o", str(mlf)], workspace.root)
    assert res.returncode == 0, res.stderr
    assert (mlf / "MLmodel").is_file() and (mlf / "artifacts" / "package" / "manifest.json"
                                            ).is_file()


def _docker_daemon() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True,
                              timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.skipif(not _docker_daemon(), reason="no Docker daemon on this machine")
def test_the_image_builds_and_answers(workspace: Any, churn: pd.DataFrame,
                                      tmp_path: Path) -> None:
    """Needs the reprise-ml wheel: built from this checkout into the context's wheels/."""
    house, tree = tmp_path / "house", tmp_path / "tree"
    tree.mkdir()
    for part in ("pyproject.toml", "README.md"):  # built from a copy: the checkout stays clean
        shutil.copy(SRC.parent / part, tree / part)
    shutil.copytree(SRC, tree / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-w", str(house), str(tree)], check=True, capture_output=True, timeout=600)
    ctx = tmp_path / "ctx"
    assert _cli(["export", "docker", "churn@production", "-o", str(ctx)],
                workspace.root).returncode == 0
    for whl in house.glob("*.whl"):
        shutil.copy(whl, ctx / "wheels" / whl.name)
    tag = f"reprise-export-test:{os.getpid()}"
    subprocess.run(["docker", "build", "-t", tag, str(ctx)], check=True, timeout=1200)
    port = _free_port()
    cid = subprocess.run(["docker", "run", "-d", "--rm", "-p", f"127.0.0.1:{port}:8080", "-e",
                          "REPRISE_SERVE_TOKEN=s3cret", tag], check=True, capture_output=True,
                         text=True, timeout=60).stdout.strip()
    try:
        url, deadline = f"http://127.0.0.1:{port}", time.monotonic() + 120
        while True:
            try:
                if httpx.get(url + "/readyz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the container did not get ready"
            time.sleep(1)
        user = subprocess.run(["docker", "exec", cid, "id", "-u"], capture_output=True,
                              text=True, timeout=30).stdout.strip()
        assert user == "10001"
        r = httpx.post(url + "/v1/models/churn/predict", json=churn.head(2).to_dict(
            orient="records"), headers={"authorization": "Bearer s3cret"}, timeout=10)
        assert r.status_code == 200, r.text
    finally:
        subprocess.run(["docker", "rm", "-f", cid], capture_output=True, timeout=60)
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, timeout=60)


@pytest.mark.reliability
def test_a_fresh_venv_installed_from_the_context_alone_serves(
        workspace: Any, churn: pd.DataFrame, tmp_path: Path) -> None:
    """The image's steps without Docker: a wheelhouse for the context's lock (this
    checkout's wheel + the lock's wheels from the package index), the context exported
    with it, then a fresh venv (no system site-packages) installed from the context's
    wheels alone, as the Dockerfile does, runs the build step and the entrypoint."""
    house, tree = tmp_path / "house", tmp_path / "tree"
    tree.mkdir()
    for part in ("pyproject.toml", "README.md"):  # built from a copy: the checkout stays clean
        shutil.copy(SRC.parent / part, tree / part)
    shutil.copytree(SRC, tree / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(house),
                    str(tree)], check=True, capture_output=True, timeout=600)
    first = tmp_path / "first"
    assert _cli(["export", "docker", "churn@production", "-o", str(first)],
                workspace.root).returncode == 0
    got = subprocess.run([*pip, "download", "--only-binary", ":all:", "--find-links", str(house),
                          "-d", str(house), "-r", str(first / "requirements.txt")],
                         capture_output=True, text=True, timeout=900)
    if got.returncode != 0:
        pytest.skip(f"the package index is out of reach here: {got.stderr[-300:]}")
    ctx = tmp_path / "ctx"
    assert _cli(["export", "docker", "churn@production", "-o", str(ctx), "--wheelhouse",
                 str(house)], workspace.root).returncode == 0
    dockerfile = (ctx / "Dockerfile").read_text()
    assert "pip install --no-index --find-links /opt/reprise/wheels -r" in dockerfile
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    bare = {k: v for k, v in _env().items() if k != "PYTHONPATH"}
    bare["PATH"] = os.pathsep.join([str(venv / "bin"), os.environ.get("PATH", "")])
    subprocess.run([str(venv / "bin" / "pip"), "install", "--disable-pip-version-check",
                    "--no-index", "--find-links", str(ctx / "wheels"), "-r",
                    str(ctx / "requirements.txt")], check=True, env=bare, timeout=900,
                   capture_output=True)
    image_ws = tmp_path / "srv"
    image_ws.mkdir()
    subprocess.run([str(venv / "bin" / "python"), str(ctx / "setup_workspace.py"),
                    str(ctx / "package"), str(image_ws)], cwd=image_ws, check=True,
                   env={**bare, "REPRISE_WORKSPACE": str(image_ws)}, timeout=300)
    port = _free_port()
    proc = subprocess.Popen(["/bin/sh", str(ctx / "entrypoint.sh")], cwd=image_ws,
                            env={**bare, "REPRISE_WORKSPACE": str(image_ws),
                                 "REPRISE_HOST": "127.0.0.1", "PORT": str(port)},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(url, proc, timeout=180)
        r = httpx.post(url + "/v1/models/churn/predict",
                       json=churn.head(3).to_dict(orient="records"), timeout=10)
        assert r.status_code == 200, r.text
        assert len(r.json()["predictions"]) == 3
        where = subprocess.run([str(venv / "bin" / "python"), "-c",
                                "import reprise; print(reprise.__file__)"], env=bare,
                               capture_output=True, text=True, timeout=60).stdout
        assert str(venv) in where  # the venv's own Reprise, not this checkout
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
