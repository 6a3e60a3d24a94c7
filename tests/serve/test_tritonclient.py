"""Triton's ``tritonclient.http``, the most used Open Inference Protocol client, against a
running ``reprise serve``: its default binary mode, JSON mode, compressed requests, and
errors it can read; plus raw framing errors on the real socket."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pandas as pd
import pytest

tritonhttp = pytest.importorskip("tritonclient.http")
InferenceServerException = pytest.importorskip("tritonclient.utils").InferenceServerException

TOKEN = "tr1ton-token"


def auth() -> dict[str, str]:
    """A fresh headers dict each call: tritonclient adds its own headers to the one given."""
    return {"Authorization": f"Bearer {TOKEN}"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pipeline() -> tuple[Any, pd.DataFrame]:
    """A fitted scikit-learn pipeline over a float, an int and a string column."""
    from sklearn.compose import ColumnTransformer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"amount": rng.normal(size=200).astype(np.float32),
                          "visits": rng.integers(0, 50, 200),
                          "plan": rng.choice(["basic", "gold"], 200)})
    target = ((frame["amount"] > 0) ^ (frame["plan"] == "gold")).astype(int)
    prep = ColumnTransformer([("num", StandardScaler(), ["amount", "visits"]),
                              ("cat", OneHotEncoder(), ["plan"])])
    return make_pipeline(prep, LogisticRegression()).fit(frame, target), frame


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any, Any]]:
    """(host:port, the package, its sample): ``reprise serve churn@production`` running."""
    import reprise
    from reprise.registry import package_model, promote, register_package

    root = tmp_path_factory.mktemp("ws")
    ws = reprise.init(root)
    model, frame = _pipeline()
    package = package_model(model, sample=frame)
    version = register_package("churn", package, workspace=ws).version
    promote("churn", version, "production", workspace=ws, force=True, reason="test")
    ws.close()
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("REPRISE_")}
    proc = subprocess.Popen([sys.executable, "-m", "reprise.cli", "serve", "churn@production",
                             "--port", str(port)], cwd=root, env={**env, "REPRISE_SERVE_TOKEN":
                                                                 TOKEN},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        _wait_ready(f"http://127.0.0.1:{port}", proc)
        yield f"127.0.0.1:{port}", package, frame
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)


def _wait_ready(url: str, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(url + "/readyz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline and proc.poll() is None, proc.stdout.read()  # type: ignore[union-attr]
        time.sleep(0.2)


def _inputs(frame: pd.DataFrame, *, binary: bool) -> list[Any]:
    columns = [("amount", "FP32", frame["amount"].to_numpy(np.float32)),
               ("visits", "INT64", frame["visits"].to_numpy(np.int64)),
               ("plan", "BYTES", frame["plan"].to_numpy(object))]
    out = []
    for name, datatype, values in columns:
        tensor = tritonhttp.InferInput(name, list(values.shape), datatype)
        tensor.set_data_from_numpy(values, binary_data=binary)
        out.append(tensor)
    return out


def _expected(package: Any, rows: pd.DataFrame) -> dict[str, Any]:
    return package.predict_records(rows.to_dict("records"))  # type: ignore[no-any-return]


def test_default_mode_sends_and_receives_binary_tensors(served: tuple[str, Any, Any]) -> None:
    url, package, frame = served
    rows = frame.head(7)
    client = tritonhttp.InferenceServerClient(url)
    try:
        assert "binary_tensor_data" in client.get_server_metadata(headers=auth())["extensions"]
        result = client.infer("churn", _inputs(rows, binary=True), headers=auth())
    finally:
        client.close()
    outputs = result.get_response()["outputs"]
    assert all("binary_data_size" in o["parameters"] for o in outputs)
    expected = _expected(package, rows)
    assert result.as_numpy("prediction").tolist() == expected["prediction"]
    assert result.as_numpy("probabilities").shape == (7, 2)
    np.testing.assert_allclose(result.as_numpy("probabilities"), expected["probabilities"])


def test_json_mode_and_a_binary_output_chosen_per_output(
        served: tuple[str, Any, Any]) -> None:
    url, package, frame = served
    rows = frame.iloc[10:15]
    client = tritonhttp.InferenceServerClient(url)
    try:
        result = client.infer("churn", _inputs(rows, binary=False), headers=auth(), outputs=[
            tritonhttp.InferRequestedOutput("prediction", binary_data=False),
            tritonhttp.InferRequestedOutput("probabilities", binary_data=True)])
    finally:
        client.close()
    prediction, probabilities = result.get_response()["outputs"]
    assert "data" in prediction and "binary_data_size" in probabilities["parameters"]
    expected = _expected(package, rows)
    assert result.as_numpy("prediction").tolist() == expected["prediction"]
    np.testing.assert_allclose(result.as_numpy("probabilities"), expected["probabilities"])


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_compressed_requests(served: tuple[str, Any, Any], algorithm: str) -> None:
    url, package, frame = served
    rows = frame.iloc[20:24]
    client = tritonhttp.InferenceServerClient(url)
    try:
        result = client.infer("churn", _inputs(rows, binary=True), headers=auth(),
                              request_compression_algorithm=algorithm)
    finally:
        client.close()
    assert result.as_numpy("prediction").tolist() == _expected(package, rows)["prediction"]


def test_errors_reach_the_client_as_readable_messages(served: tuple[str, Any, Any]) -> None:
    url, _, frame = served
    client = tritonhttp.InferenceServerClient(url)
    try:
        with pytest.raises(InferenceServerException) as ghost:
            client.infer("ghost", _inputs(frame.head(2), binary=True), headers=auth())
        with pytest.raises(InferenceServerException) as unknown_output:
            client.infer("churn", _inputs(frame.head(2), binary=True), headers=auth(),
                         outputs=[tritonhttp.InferRequestedOutput("nope")])
        with pytest.raises(InferenceServerException) as no_endpoint:
            client.get_model_repository_index(headers=auth())
    finally:
        client.close()
    assert ghost.value.status() == "404" and "ghost" in ghost.value.message()
    assert unknown_output.value.status() == "400"
    assert "'nope' does not exist" in unknown_output.value.message()
    assert no_endpoint.value.status() == "404"
    assert "no endpoint POST /v2/repository/index" in no_endpoint.value.message()


def test_raw_framing_errors_on_the_socket(served: tuple[str, Any, Any]) -> None:
    url = f"http://{served[0]}/v2/models/churn/infer"
    head = (b'{"inputs":[{"name":"amount","shape":[1],"datatype":"FP32",'
            b'"parameters":{"binary_data_size":4}}]}')
    cases = {"999": "body has only", "1x": "non-negative whole number",
             "-1": "non-negative whole number"}
    for length, words in cases.items():
        r = httpx.post(url, content=head + b"\0\0\0\0", timeout=5, headers={
            **auth(), "Inference-Header-Content-Length": length})
        assert r.status_code == 400 and words in r.json()["error"], (length, r.text)
    r = httpx.post(url, content=head + b"\0\0", timeout=5, headers={
        **auth(), "Inference-Header-Content-Length": str(len(head))})
    assert r.status_code == 400 and "only 2 bytes" in r.json()["error"]
