"""The Open Inference Protocol (KServe V2) REST endpoints, checked against the spec
(open-inference-protocol/specification/protocol/inference_rest.md)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
from sklearn.linear_model import LogisticRegression

from reprise.registry import Field, Signature, infer_signature
from tests.serve.fakes import FakeModel, FakeSource, run, score, serving

X = {"name": "x", "shape": [2], "datatype": "FP32", "data": [1.0, 2.0]}
Y = {"name": "y", "shape": [2, 1], "datatype": "INT64", "data": [[3], [70]]}
PLAN = {"name": "plan", "shape": [2], "datatype": "BYTES", "data": ["gold", "basic"]}


def _calls(*requests: tuple[str, str, Any]) -> list[Any]:
    async def main() -> list[Any]:
        async with serving(FakeSource(), ["churn@production", "churn:2"]) as (c, _):
            return [await (c.get(path) if method == "GET" else c.post(path, json=body))
                    for method, path, body in requests]
    return run(main())


def test_health_and_server_metadata() -> None:
    live, ready, meta = _calls(("GET", "/v2/health/live", None),
                               ("GET", "/v2/health/ready", None), ("GET", "/v2", None))
    assert live.status_code == 200 and live.json() == {"live": True}
    assert ready.status_code == 200 and ready.json() == {"ready": True}
    assert meta.json()["name"] == "reprise" and meta.json()["extensions"] == ["binary_tensor_data"]
    assert isinstance(meta.json()["version"], str)


def test_model_metadata_and_readiness() -> None:
    meta, meta_v2, ready, ready_v2, ghost, ghost_v = _calls(
        ("GET", "/v2/models/churn", None), ("GET", "/v2/models/churn/versions/2", None),
        ("GET", "/v2/models/churn/ready", None),
        ("GET", "/v2/models/churn/versions/2/ready", None),
        ("GET", "/v2/models/ghost", None), ("GET", "/v2/models/churn/versions/9/ready", None))
    assert meta.json() == {
        "name": "churn", "versions": ["1", "2"], "platform": "reprise_package",
        "inputs": [{"name": "x", "datatype": "FP64", "shape": [-1]},
                   {"name": "y", "datatype": "INT64", "shape": [-1]},
                   {"name": "plan", "datatype": "BYTES", "shape": [-1]}],
        "outputs": [{"name": "score", "datatype": "FP64", "shape": [-1]},
                    {"name": "label", "datatype": "BYTES", "shape": [-1]}]}
    assert meta_v2.json()["name"] == "churn"
    assert ready.json() == {"name": "churn", "ready": True}
    assert ready_v2.status_code == 200
    assert ghost.status_code == 404 and list(ghost.json()) == ["error"]
    assert ghost_v.status_code == 404 and list(ghost_v.json()) == ["error"]


def test_infer_flat_and_nested_data_with_the_id_echoed() -> None:
    (r,) = _calls(("POST", "/v2/models/churn/infer", {"id": "42", "inputs": [X, Y, PLAN]}))
    assert r.status_code == 200
    assert r.json() == {"model_name": "churn", "model_version": "1", "id": "42", "outputs": [
        {"name": "score", "shape": [2], "datatype": "FP64",
         "data": [score(1.0, 3, "gold", 1), score(2.0, 70, "basic", 1)]},
        {"name": "label", "shape": [2], "datatype": "BYTES", "data": ["low", "high"]}]}


def test_infer_on_a_version_with_requested_outputs_and_a_generated_id() -> None:
    body = {"inputs": [X, Y, PLAN], "outputs": [{"name": "label"}],
            "parameters": {"content_type": "np"}}
    (r,) = _calls(("POST", "/v2/models/churn/versions/2/infer", body))
    assert r.json()["model_version"] == "2" and len(r.json()["id"]) >= 8
    assert [o["name"] for o in r.json()["outputs"]] == ["label"]


@pytest.mark.parametrize(("body", "words"), [
    ({"inputs": []}, "inputs"),
    ({"inputs": [X, Y]}, "plan: missing"),
    ({"inputs": [{**X, "datatype": "BOOL"}, Y, PLAN]}, "does not fit"),
    ({"inputs": [{**X, "datatype": "FP128"}, Y, PLAN]}, "datatype"),
    ({"inputs": [{**X, "shape": [3]}, Y, PLAN]}, "needs 3 elements"),
    ({"inputs": [{**X, "shape": [1, 2]}, Y, PLAN]}, "expected [rows] or [rows, 1]"),
    ({"inputs": [{**X, "shape": [10**10] * 3000}, Y, PLAN]},
     "at most 32 non-negative integers"),
    ({"inputs": [X, {**Y, "shape": [1], "data": [3]}, PLAN]}, "disagree"),
    ({"inputs": [X, Y, PLAN], "outputs": [{"name": "nope"}]}, "does not exist"),
    ({"inputs": [X, Y, PLAN], "id": 5}, "id"),
    ({"inputs": [X, Y, PLAN, {**X, "name": "Secret-Col"}]}, "unexpected"),
    ({"inputs": [{**X, "data": ["Alice-Private", 1.0]}, Y, PLAN]},
     "FP32 elements must be numbers"),
])
def test_bad_inference_requests_are_400_with_only_an_error_string(body: Any,
                                                                  words: str) -> None:
    (r,) = _calls(("POST", "/v2/models/churn/infer", body))
    assert r.status_code == 400, r.text
    assert list(r.json()) == ["error"] and words in r.json()["error"]
    assert "Alice-Private" not in r.text


def test_infer_errors_for_json_model_and_version() -> None:
    bad_json, ghost, ghost_v = _calls(
        ("POST", "/v2/models/churn/infer", "not an object"),
        ("POST", "/v2/models/ghost/infer", {"inputs": [X]}),
        ("POST", "/v2/models/churn/versions/7/infer", {"inputs": [X]}))
    assert bad_json.status_code == 400 and list(bad_json.json()) == ["error"]
    assert ghost.status_code == 404 and list(ghost.json()) == ["error"]
    assert ghost_v.status_code == 404


def test_tensor_inputs_and_outputs_round_trip_row_major() -> None:
    sig = Signature([Field("img", "float", shape=(2, 2))], [Field("rowsum", "float",
                                                                  shape=(2,))])
    model = FakeModel("img", 3, signature=sig, example=[{"img": [[0.0, 1.0], [2.0, 3.0]]}])
    model.predict = lambda cols: {"rowsum": cols["img"].sum(axis=2)}  # type: ignore[method-assign]
    flat = {"inputs": [{"name": "img", "shape": [2, 2, 2], "datatype": "FP32",
                        "data": [1, 2, 3, 4, 5, 6, 7, 8]}]}
    nested = {"inputs": [{"name": "img", "shape": [2, 2, 2], "datatype": "FP32",
                          "data": [[[1, 2], [3, 4]], [[5, 6], [7, 8]]]}]}
    wrong = {"inputs": [{"name": "img", "shape": [2, 4], "datatype": "FP32",
                         "data": [1, 2, 3, 4, 5, 6, 7, 8]}]}

    async def main() -> list[Any]:
        async with serving(FakeSource({"img": {3: model}}, {}), ["img"]) as (c, _):
            return [await c.post("/v2/models/img/infer", json=b) for b in (flat, nested, wrong)]
    a, b, bad = run(main())
    expected = [{"name": "rowsum", "shape": [2, 2], "datatype": "FP64",
                 "data": [3.0, 7.0, 11.0, 15.0]}]
    assert a.json()["outputs"] == expected and b.json()["outputs"] == expected
    assert bad.status_code == 400 and "expected [rows, 2, 2]" in bad.json()["error"]


def test_a_scikit_learn_model_answers_like_calling_it_directly() -> None:
    rng = np.random.default_rng(0)
    frame = pd.DataFrame(rng.normal(size=(200, 4)), columns=list("abcd"))
    clf = LogisticRegression().fit(frame.to_numpy(), (frame["a"] > 0).astype(int))

    class Sk:
        name, version = "sk", 1
        signature = infer_signature(frame, outputs=[Field("label", "int")])
        example = frame.head(2).to_dict("records")

        def predict(self, columns: dict[str, Any]) -> dict[str, Any]:
            return {"label": clf.predict(np.column_stack([columns[n] for n in "abcd"]))}

    rows = frame.head(5).to_numpy()
    body = {"inputs": [{"name": n, "shape": [5], "datatype": "FP64",
                        "data": rows[:, i].tolist()} for i, n in enumerate("abcd")]}

    async def main() -> Any:
        async with serving(FakeSource({"sk": {1: Sk()}}, {}), ["sk:1"]) as (c, _):  # type: ignore[dict-item]
            return await c.post("/v2/models/sk/infer", json=body)
    out = run(main()).json()["outputs"][0]
    assert out["datatype"] == "INT64" and out["shape"] == [5]
    assert out["data"] == clf.predict(rows).tolist()
