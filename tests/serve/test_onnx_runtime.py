"""``reprise models optimize`` then ``reprise serve --runtime onnx`` and ``reprise predict
--runtime onnx``, end to end through the CLI: the server of an ONNX package imports
neither torch nor scikit-learn (proved with ``python -X importtime`` on the real
process) and answers as the native model does."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pandas as pd
import pytest

import reprise
from tests.serve._e2e import free_port, wait_for

_CLEAN_ENV = ("REPRISE_WORKSPACE", "REPRISE_STORE_URL", "REPRISE_ARTIFACTS_URL",
              "REPRISE_SERVE_TOKEN")


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in _CLEAN_ENV}


def _cli(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "reprise.cli", *args], cwd=root, env=_env(),
                          capture_output=True, text=True, timeout=180)


@pytest.fixture
def mlp_workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Any]:
    """A workspace with ``mlp:1``: a scaler + torch MLP, gates passed."""
    import torch
    from sklearn.preprocessing import StandardScaler

    from reprise.registry import package_model, register_package

    monkeypatch.chdir(tmp_path)
    ws = reprise.init(tmp_path)
    rng = np.random.default_rng(0)
    x = pd.DataFrame({"a": rng.normal(size=200), "b": rng.uniform(0, 5, 200)})
    y = np.array((x["a"] + x["b"] / 5 > 0.5).astype(int))
    prep = StandardScaler().fit(x)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(2, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    evaluation = {"metrics": {"accuracy": {"value": 0.9}},
                  "gates": {"passed": True, "results": []}}
    register_package("mlp", package_model(net, sample=x, target=y, preprocessing=prep,
                                          evaluation=evaluation), workspace=ws)
    ws.close()
    return tmp_path, x


def test_optimize_serve_and_predict_with_onnx_runtime(mlp_workspace: tuple[Path, Any]
                                                      ) -> None:
    root, x = mlp_workspace
    done = _cli(root, "models", "optimize", "mlp:1", "--json")
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout)
    assert info["version"] == 2 and info["parity"] is True and info["source_version"] == 1
    assert info["parity_report"]["rows"] >= 256 and info["parity_report"]["max_abs_diff"] < 1e-5
    assert info["created"] is True
    assert info["rewrites"] == ["scaler-as-sub-mul", "scale-folded-into-gemm"]
    again = _cli(root, "models", "optimize", "mlp:1")  # the same graph: the same version
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("already registered as mlp:2: ONNX variant of mlp:1")
    assert "  graph rewrites    scaler-as-sub-mul, scale-folded-into-gemm" in again.stdout
    shown = _cli(root, "models", "show", "mlp:2")
    assert shown.returncode == 0, shown.stderr
    assert "ONNX variant of mlp:1 (package " in shown.stdout
    assert "parity, native vs ONNX Runtime (atol 1e-05): passed" in shown.stdout

    rows = x.head(20).to_dict("records")
    native, _, platform = _serve_and_ask(root, "mlp:1", "native", rows)
    assert platform == "reprise_package"
    onnx, imported, platform = _serve_and_ask(root, "mlp:2", "onnx", rows, importtime=True)
    assert platform == "onnxruntime_onnx"  # the OIP metadata names the runtime
    assert native["prediction"] == onnx["prediction"]
    assert np.allclose(native["probabilities"], onnx["probabilities"], atol=1e-5)
    assert "onnxruntime" in imported
    assert not {"torch", "sklearn"} & imported, sorted({"torch", "sklearn"} & imported)

    (root / "in.csv").write_text(x.head(30).to_csv(index=False))
    done = _cli(root, "predict", "mlp@production", "in.csv", "-o", "out.csv", "--json")
    assert done.returncode != 0  # no alias yet: a clear error, exit 2
    done = _cli(root, "predict", "mlp:2", "in.csv", "-o", "out.csv", "--runtime", "onnx",
                "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["rows"] == 30
    done = _cli(root, "predict", "mlp:1", "in.csv", "-o", "out.csv", "--runtime", "onnx")
    assert done.returncode == 2 and "no ONNX graph" in done.stderr


def test_optimize_cli_errors_exit_2(mlp_workspace: tuple[Path, Any]) -> None:
    root, _ = mlp_workspace
    done = _cli(root, "models", "optimize", "mlp:1", "--quantize", "dynamic-int8")
    assert done.returncode == 0, done.stderr
    assert "pre-processing" not in done.stderr  # ONNX Runtime's advice, not the user's to act on
    assert "parity, native vs ONNX Runtime (atol 1e-05): passed" in done.stdout
    assert ("held-out rows     none found in lineage: mlp:1 was registered without a run"
            in done.stdout)
    assert "quantisation gate on 259 rows, basis: agreement" in done.stdout
    assert "  accuracy  native 1.0000 [" in done.stdout
    assert "  95% intervals: each model clopper-pearson, mover-clopper-pearson; the drop a " \
        "paired bootstrap (1000 resamples, seed 0, BCa)" in done.stdout
    for args, message in ((("mlp",), "NAME:VERSION"),
                          (("mlp:1", "--quantize", "int4"), "quantize must be"),
                          (("mlp:9",), "no version 9")):
        done = _cli(root, "models", "optimize", *args)
        assert done.returncode == 2 and message in done.stderr, done.stderr


def _serve_and_ask(root: Path, ref: str, runtime: str, rows: list[dict[str, Any]], *,
                   importtime: bool = False) -> Any:
    port = free_port()
    flags = ["-X", "importtime"] if importtime else []
    log = root / f"serve-{port}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, *flags, "-m", "reprise.cli", "serve", ref, "--port", str(port),
             "--runtime", runtime, "--no-request-log", "--log-level", "warning"],
            cwd=root, env=_env(), stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        def ready() -> bool:
            assert proc.poll() is None, log.read_text()[-3000:]
            try:
                return httpx.get(url + "/readyz", timeout=2).status_code == 200
            except httpx.TransportError:
                return False

        wait_for(ready, 90, f"{ref} ready")
        columns = {k: [r[k] for r in rows] for k in rows[0]}
        answer = httpx.post(url + "/v1/models/mlp/predict", json={"columns": columns},
                            timeout=10)
        assert answer.status_code == 200, answer.text
        platform = httpx.get(url + "/v2/models/mlp", timeout=10).json()["platform"]
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)
    outputs = answer.json()["predictions"]
    if not importtime:
        return outputs, set(), platform
    return outputs, _top_level_imports(log.read_text()), platform


def _top_level_imports(stderr: str) -> set[str]:
    """Top-level package names from ``-X importtime`` lines (``... | module.name``)."""
    found = set()
    for line in stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            found.add(line.rsplit("|", 1)[1].strip().split(".")[0])
    return found
