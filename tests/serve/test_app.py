"""Reprise's own API through the whole app (no sockets): answers, every error path,
token, readiness and metrics."""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest

from reprise.registry import Field, Signature
from reprise.serve import ModelSettings, Settings
from tests.serve.fakes import TOKEN, FakeModel, FakeSource, run, score, serving, wait_until

GOOD = {"x": 1.5, "y": 3, "plan": "gold"}
SECRET = "Alice-Private-4711"  # a client value that must never come back in an error


def _post(path: str, body: Any, settings: Settings | None = None, **kw: Any) -> Any:
    async def main() -> Any:
        async with serving(FakeSource(), ["churn@production", "churn:2"], settings) as (c, _):
            return await c.post(path, json=body, **kw)
    return run(main())


def test_records_list_and_columns_answer_with_the_version() -> None:
    r = _post("/v1/models/churn/predict", {"records": [GOOD, {**GOOD, "y": 70}]})
    assert r.status_code == 200
    assert r.json() == {"model": "churn", "version": 1, "predictions": [
        {"score": score(1.5, 3, "gold", 1), "label": "low"},
        {"score": score(1.5, 70, "gold", 1), "label": "high"}]}
    r = _post("/v1/models/churn/versions/2/predict", [GOOD])
    assert r.json()["version"] == 2 and r.json()["predictions"][0]["score"] == score(
        1.5, 3, "gold", 2)
    r = _post("/v1/models/churn/predict", {"columns": {"x": [1.0, 2.0], "y": [1, 2],
                                                       "plan": ["basic", "gold"]}})
    assert r.json()["predictions"] == {"score": [score(1.0, 1, "basic", 1),
                                                 score(2.0, 2, "gold", 1)],
                                       "label": ["low", "low"]}


def test_unknown_model_and_version_are_404() -> None:
    assert _post("/v1/models/nope/predict", [GOOD]).status_code == 404
    for v in ("7", "abc", "99999999999999999999999"):
        r = _post(f"/v1/models/churn/versions/{v}/predict", [GOOD])
        assert r.status_code == 404 and "served versions: 1, 2" in r.json()["error"]


def test_malformed_json_is_400() -> None:
    r = _post("/v1/models/churn/predict", None, content=b'{"records": [',
              headers={"content-type": "application/json"})
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]


def test_a_body_over_the_limit_is_413_by_header_and_by_stream() -> None:
    settings = Settings(max_body_bytes=200, poll_interval=0.05)
    big = {"records": [GOOD] * 20}
    assert _post("/v1/models/churn/predict", big, settings).status_code == 413

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: chunked upload
        for _ in range(100):
            yield b" " * 50

    async def main() -> Any:
        async with serving(FakeSource(), ["churn@production"], settings) as (c, _):
            return await c.post("/v1/models/churn/predict", content=chunks())
    r = run(main())
    assert r.status_code == 413 and "200 bytes" in r.json()["error"]


@pytest.mark.parametrize(("record", "field", "problem"), [
    ({"x": 1.5, "y": 3}, "plan", "missing"),
    ({**GOOD, SECRET: 1}, SECRET, "unexpected"),
    ({**GOOD, "x": SECRET}, "x", "type"),
    ({**GOOD, "y": 2.5}, "y", "type"),
    ({**GOOD, "x": None}, "x", "null"),
])
def test_signature_problems_are_422_naming_the_field_without_the_value(
        record: dict[str, Any], field: str, problem: str) -> None:
    r = _post("/v1/models/churn/predict", [record])
    assert r.status_code == 422
    body = r.json()
    assert {"field": field, "problem": problem} in [
        {"field": f["field"], "problem": f["problem"]} for f in body["fields"]]
    assert all(f["expected"] and f["got"] for f in body["fields"])
    if field != SECRET:
        assert SECRET not in r.text


def test_wrong_tensor_shape_is_422() -> None:
    sig = Signature([Field("img", "float", shape=(2, 2))], [Field("sum", "float")])
    model = FakeModel("img", 1, signature=sig, example=[{"img": [[0.0, 1.0], [2.0, 3.0]]}])
    model.predict = lambda cols: {"sum": cols["img"].sum(axis=(1, 2))}  # type: ignore[method-assign]

    async def main() -> list[Any]:
        async with serving(FakeSource({"img": {1: model}}, {}), ["img:1"]) as (c, _):
            ok = await c.post("/v1/models/img/predict", json=[{"img": [[1, 2], [3, 4]]}])
            bad = await c.post("/v1/models/img/predict", json=[{"img": [[1, 2, 3]]}])
            return [ok, bad]
    ok, bad = run(main())
    assert ok.json()["predictions"] == [10.0]
    assert bad.status_code == 422 and bad.json()["fields"][0]["problem"] == "shape"
    assert bad.json()["fields"][0]["got"] == "shape [1, 3]"


def test_extra_columns_and_out_of_range_policies_can_be_overridden() -> None:
    extra = {**GOOD, "comment": "hi"}
    lenient = Settings(extra_columns="ignore", poll_interval=0.05)
    assert _post("/v1/models/churn/predict", [extra], lenient).status_code == 200
    outside = {**GOOD, "x": 50.0, "plan": "platinum"}
    r = _post("/v1/models/churn/predict", [outside])
    assert r.status_code == 200 and r.json()["out_of_range"] == {"x": 1, "plan": 1}
    strict = Settings(models={"churn": ModelSettings(out_of_range="reject")},
                      poll_interval=0.05)
    r = _post("/v1/models/churn/predict", [outside], strict)
    assert r.status_code == 422
    assert {f["problem"] for f in r.json()["fields"]} == {"out_of_range"}
    assert "platinum" not in r.text and "50" not in r.text


def test_a_model_that_raises_is_500_with_an_error_id_in_the_log(
        caplog: pytest.LogCaptureFixture) -> None:
    source = FakeSource()
    source.models["churn"][1].fail_when = lambda cols: 13 in cols["y"].tolist()

    async def main() -> list[Any]:
        async with serving(source, ["churn@production"]) as (c, _):
            bad = await c.post("/v1/models/churn/predict", json=[{**GOOD, "y": 13}])
            ok = await c.post("/v1/models/churn/predict", json=[GOOD])
            oip = await c.post("/v2/models/churn/infer", json={"inputs": [
                {"name": "x", "shape": [1], "datatype": "FP64", "data": [1.0]},
                {"name": "y", "shape": [1], "datatype": "INT64", "data": [13]},
                {"name": "plan", "shape": [1], "datatype": "BYTES", "data": ["gold"]}]})
            return [bad, ok, oip]
    with caplog.at_level(logging.ERROR):
        bad, ok, oip = run(main())
    assert bad.status_code == 500 and ok.status_code == 200
    error_id = bad.json()["error_id"]
    assert error_id in bad.json()["error"] and "broke" not in bad.text
    assert error_id in caplog.text and "RuntimeError: the model broke" in caplog.text
    assert oip.status_code == 500 and list(oip.json()) == ["error"]


def test_token_is_required_except_on_health_probes(monkeypatch: pytest.MonkeyPatch,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("REPRISE_SERVE_TOKEN", TOKEN)

    async def main() -> dict[str, int]:
        async with serving(FakeSource(), ["churn@production"]) as (c, _):
            codes = {}
            for path in ("/healthz", "/readyz", "/v2/health/live", "/v2/health/ready",
                         "/metrics", "/v2/models/churn", "/docs", "/openapi.json"):
                codes[path] = (await c.get(path)).status_code
            url = "/v1/models/churn/predict"
            codes["none"] = (await c.post(url, json=[GOOD])).status_code
            wrong = {"authorization": f"Bearer {TOKEN}x"}
            codes["wrong"] = (await c.post(url, json=[GOOD], headers=wrong)).status_code
            right = {"authorization": f"Bearer {TOKEN}"}
            codes["right"] = (await c.post(url, json=[GOOD], headers=right)).status_code
            codes["right-metrics"] = (await c.get("/metrics", headers=right)).status_code
            return codes
    with caplog.at_level(logging.DEBUG):
        codes = run(main())
    assert codes == {"/healthz": 200, "/readyz": 200, "/v2/health/live": 200,
                     "/v2/health/ready": 200, "/metrics": 401, "/v2/models/churn": 401,
                     "/docs": 401, "/openapi.json": 401, "none": 401, "wrong": 401,
                     "right": 200, "right-metrics": 200}
    assert TOKEN not in caplog.text
    assert TOKEN not in repr(Settings(token=TOKEN))


def test_overload_answers_503_with_retry_after() -> None:
    source = FakeSource()
    source.models["churn"][1].delay = 0.05
    settings = Settings(max_batch_size=1, latency_budget_ms=120, poll_interval=0.05)

    async def main() -> list[Any]:
        async with serving(source, ["churn@production"], settings) as (c, _):
            import asyncio

            return await asyncio.gather(*(c.post("/v1/models/churn/predict", json=[GOOD])
                                          for _ in range(12)))
    answers = run(main())
    codes = [r.status_code for r in answers]
    assert 200 in codes and 503 in codes and set(codes) == {200, 503}
    shed = next(r for r in answers if r.status_code == 503)
    assert int(shed.headers["retry-after"]) >= 1 and "latency budget" in shed.json()["error"]


def test_get_on_a_prediction_endpoint_is_405() -> None:
    async def main() -> Any:
        async with serving(FakeSource(), ["churn@production"]) as (c, _):
            return await c.get("/v1/models/churn/predict")
    r = run(main())
    assert r.status_code == 405 and r.headers["allow"] == "POST"


def test_ready_only_after_every_model_is_loaded_and_warmed_up() -> None:
    source = FakeSource()
    source.gate = threading.Event()

    async def main() -> None:
        async with serving(source, ["churn@production"], wait_ready=False) as (c, app):
            assert (await c.get("/healthz")).status_code == 200
            assert (await c.get("/readyz")).status_code == 503
            assert (await c.get("/v2/health/ready")).status_code == 400
            assert (await c.get("/v2/models/churn/ready")).status_code == 400
            loading = await c.post("/v1/models/churn/predict", json=[GOOD])
            assert loading.status_code == 503 and loading.headers["retry-after"] == "1"
            source.gate.set()
            await wait_until(lambda: app.state.reprise.ready)
            assert source.models["churn"][1].batches == [1]  # the warm-up prediction
            assert (await c.get("/readyz")).json()["ready"] is True
            assert (await c.get("/v2/models/churn/ready")).json() == {"name": "churn",
                                                                      "ready": True}
    run(main())


def test_a_model_that_cannot_load_leaves_the_server_unready_with_the_reason() -> None:
    source = FakeSource()
    source.broken.add(("churn", 1))

    async def main() -> Any:
        async with serving(source, ["churn@production"]) as (c, app):
            assert app.state.reprise.failed
            return await c.get("/readyz")
    r = run(main())
    assert r.status_code == 503 and "cannot load churn v1" in r.json()["error"]


def test_metrics_count_requests_errors_latency_batches_queue_and_out_of_range() -> None:
    async def main() -> str:
        async with serving(FakeSource(), ["churn@production"]) as (c, _):
            await c.post("/v1/models/churn/predict", json=[GOOD, {**GOOD, "x": 99.0}])
            await c.post("/v1/models/churn/predict", json=[{"x": 1.0}])
            await c.post("/v1/models/ghost/predict", json=[GOOD])
            return (await c.get("/metrics")).text
    text = run(main())
    for line in (
            'reprise_requests_total{code="200",model="churn",version="1"} 1.0',
            'reprise_requests_total{code="422",model="churn",version="1"} 1.0',
            'reprise_requests_total{code="404",model="_unknown",version=""} 1.0',
            'reprise_request_errors_total{kind="invalid",model="churn",version="1"} 1.0',
            'reprise_out_of_range_values_total{field="x",model="churn",version="1"} 1.0',
            'reprise_request_duration_seconds_count{model="churn",version="1"} 2.0',
            'reprise_batch_size_rows_sum{model="churn",version="1"} 3.0',  # warm-up + 2
            'reprise_queue_depth{model="churn",version="1"} 0.0',
            'reprise_model_served{model="churn",version="1"} 1.0'):
        assert line in text, line


def test_openapi_documents_every_endpoint() -> None:
    async def main() -> Any:
        async with serving(FakeSource(), ["churn@production"]) as (c, _):
            assert (await c.get("/docs")).status_code == 200
            return (await c.get("/openapi.json")).json()
    paths = run(main())["paths"]
    for path in ("/v1/models/{name}/predict", "/v1/models/{name}/versions/{version}/predict",
                 "/v2/models/{name}/infer", "/v2/models/{name}/versions/{version}/infer",
                 "/v2/health/ready", "/v2/models/{name}", "/metrics", "/readyz",
                 "/v1/models/{name}/feedback"):
        assert path in paths
    assert "422" in paths["/v1/models/{name}/predict"]["post"]["responses"]
    infer = paths["/v2/models/{name}/infer"]["post"]
    assert "application/octet-stream" in infer["requestBody"]["content"]
    assert "Inference-Header-Content-Length" in infer["description"]


def test_fastapi_loads_only_when_the_api_documentation_is_asked_for() -> None:
    # a server start (each replica's cold start) imports neither FastAPI nor pydantic:
    # about 0.2 s of CPU; /openapi.json and /docs build the document on first request
    import os
    import subprocess
    import sys
    from pathlib import Path

    code = """
import sys
from tests.serve.fakes import FakeSource, run, serving

async def main():
    async with serving(FakeSource(), ["churn@production"]) as (c, _):
        for path in ("/readyz", "/v2/models/churn", "/metrics", "/nowhere"):
            await c.get(path)
        r = await c.post("/v1/models/churn/predict", json=[{"x": 1.5, "y": 3, "plan": "gold"}])
        assert r.status_code == 200, r.text
        before = {m for m in ("fastapi", "pydantic") if m in sys.modules}
        r = await c.get("/openapi.json")
        assert r.status_code == 200 and "/readyz" in r.json()["paths"]
        print(sorted(before), "fastapi" in sys.modules)

run(main())
"""
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "src"), str(root)])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=root, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[]", "True"], done.stdout
