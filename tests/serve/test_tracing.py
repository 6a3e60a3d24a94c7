"""W3C ``traceparent`` on prediction requests and OpenTelemetry spans (issue 14.7): the
header's rules, what a server answers with and without tracing, the spans a request
makes (names, parents, the trace taken from the caller) in the SDK's in-memory
exporter, and ``--otel`` without the extra."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from reprise.cli import main
from reprise.serve import Settings, create_app
from reprise.serve._tracing import continue_trace, parse_traceparent
from tests.serve.fakes import FakeModel, FakeSource, run, wait_until

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"
VALID = f"00-{TRACE}-{PARENT}-01"
GOOD = {"x": 1.5, "y": 3, "plan": "gold"}


@pytest.mark.parametrize("value", [
    VALID.upper(),  # upper-case hex
    f"ff-{TRACE}-{PARENT}-01",  # version ff is invalid
    f"00-{'0' * 32}-{PARENT}-01",  # an all-zero trace id
    f"00-{TRACE}-{'0' * 16}-01",  # an all-zero parent id
    VALID + "-extra",  # version 00 is exactly 55 characters
    f"01-{TRACE}-{PARENT}-01extra",  # a later version: longer only after a dash
    f"00-{TRACE[:-1]}g-{PARENT}-01", f"00_{TRACE}-{PARENT}-01", VALID[:-1], "", "garbage",
])
def test_invalid_traceparents_are_refused(value: str) -> None:
    assert parse_traceparent(value.encode()) is None


def test_valid_traceparents_parse_and_continue_the_trace() -> None:
    assert parse_traceparent(VALID.encode()) == (TRACE.encode(), PARENT.encode(), 1)
    future = f"cc-{TRACE}-{PARENT}-00-what-comes-later".encode()
    assert parse_traceparent(future) == (TRACE.encode(), PARENT.encode(), 0)
    answer = continue_trace(VALID.encode()).decode()
    version, trace, parent, flags = answer.split("-")
    assert (version, trace, flags) == ("00", TRACE, "01") and parent != PARENT
    assert parse_traceparent(answer.encode()) is not None
    new = continue_trace(b"nonsense").decode()
    assert parse_traceparent(new.encode()) is not None and new.split("-")[1] != TRACE
    assert new.endswith("-00")  # a trace started here and recorded nowhere: not sampled


def _post(headers_list: list[dict[str, str]], body: Any = None, *,
          provider: Any = None) -> list[Any]:
    async def main() -> list[Any]:
        source = FakeSource()
        app = create_app(source, ["churn@production"], settings=Settings(poll_interval=0.05),
                         tracer_provider=provider)
        import httpx

        async with app.router.lifespan_context(app):
            await wait_until(lambda: app.state.reprise.ready, 10)
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
                return [await c.post("/v1/models/churn/predict",
                                     json=[GOOD] if body is None else body, headers=h)
                        for h in headers_list]
    return run(main())


def test_a_server_continues_the_callers_trace_and_starts_one_for_a_bad_header() -> None:
    valid, invalid, none = _post([{"traceparent": VALID}, {"traceparent": "00-x"}, {}])
    (refused,) = _post([{"traceparent": VALID}], body=[{"x": "not a number"}])
    assert valid.status_code == 200 and refused.status_code == 422
    for answer in (valid, refused):  # an error answer continues the trace too
        version, trace, parent, flags = answer.headers["traceparent"].split("-")
        assert (version, trace, flags) == ("00", TRACE, "01")
        assert len(parent) == 16 and parent != PARENT and int(parent, 16)
    fresh = invalid.headers["traceparent"]
    assert parse_traceparent(fresh.encode()) is not None and TRACE not in fresh
    assert "traceparent" not in none.headers  # nobody asked: nothing spent


def test_the_open_inference_protocol_continues_the_trace_too(
        spans: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    from tests.serve.test_oip import PLAN, X, Y

    provider, exporter = spans

    async def main() -> Any:
        import httpx

        app = create_app(FakeSource(), ["churn@production"], tracer_provider=provider)
        async with app.router.lifespan_context(app):
            await wait_until(lambda: app.state.reprise.ready, 10)
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
                return await c.post("/v2/models/churn/versions/1/infer",
                                    json={"inputs": [X, Y, PLAN]},
                                    headers={"traceparent": VALID})
    answer = run(main())
    assert answer.status_code == 200
    (request,) = [s for s in exporter.get_finished_spans() if s.name.startswith("POST")]
    assert request.name == "POST /v2/models/{name}/versions/{version}/infer"
    assert answer.headers["traceparent"] == f"00-{TRACE}-{request.context.span_id:016x}-01"


@pytest.fixture
def spans() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def test_spans_of_a_request_are_parented_by_the_incoming_traceparent(
        spans: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = spans
    (answer,) = _post([{"traceparent": VALID, "tracestate": "vendor=abc,other=1"}],
                      provider=provider)
    assert answer.status_code == 200
    by_name = {s.name: s for s in exporter.get_finished_spans()}
    assert set(by_name) == {"POST /v1/models/{name}/predict", "validate", "queue", "predict"}
    request = by_name["POST /v1/models/{name}/predict"]
    assert request.kind == SpanKind.SERVER
    assert request.context.trace_id == int(TRACE, 16)
    assert request.parent is not None and request.parent.span_id == int(PARENT, 16)
    assert request.parent.is_remote
    assert dict(request.context.trace_state) == {"vendor": "abc", "other": "1"}
    assert answer.headers["traceparent"] == f"00-{TRACE}-{request.context.span_id:016x}-01"
    assert request.attributes is not None
    assert request.attributes["reprise.model.version"] == 1
    assert request.attributes["http.response.status_code"] == 200
    children = [by_name[n] for n in ("validate", "queue", "predict")]
    for child in children:
        assert child.parent is not None and child.parent.span_id == request.context.span_id
        assert child.context.trace_id == int(TRACE, 16)
        assert child.start_time is not None and child.end_time is not None
        assert request.start_time is not None and request.end_time is not None
        assert request.start_time <= child.start_time <= child.end_time <= request.end_time
    validate, queue, predict = children
    assert validate.end_time <= queue.start_time and queue.end_time <= predict.start_time


def test_without_a_traceparent_a_request_starts_a_trace_and_a_failure_is_an_error(
        spans: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = spans

    async def main() -> Any:
        import httpx

        broken = FakeModel("churn", 1, fail_when=lambda cols: 99 in cols["y"].tolist())
        source = FakeSource({"churn": {1: broken}}, {"churn@production": 1})
        app = create_app(source, ["churn@production"], tracer_provider=provider)
        async with app.router.lifespan_context(app):
            await wait_until(lambda: app.state.reprise.ready, 10)
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
                return await c.post("/v1/models/churn/predict", json=[{**GOOD, "y": 99}])
    answer = run(main())
    assert answer.status_code == 500
    (request,) = [s for s in exporter.get_finished_spans() if s.name.startswith("POST")]
    assert request.parent is None  # a root: a new trace
    assert answer.headers["traceparent"].split("-")[1] == f"{request.context.trace_id:032x}"
    assert request.status.status_code == StatusCode.ERROR
    assert request.attributes is not None and request.attributes["error.type"] == "model_error"
    assert {s.name for s in exporter.get_finished_spans()} == {request.name, "validate"}


def test_an_unsampled_caller_gets_no_spans_but_its_trace_continues(
        spans: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = spans
    (answer,) = _post([{"traceparent": VALID[:-2] + "00"}], provider=provider)
    assert exporter.get_finished_spans() == ()
    version, trace, parent, flags = answer.headers["traceparent"].split("-")
    assert (trace, flags) == (TRACE, "00") and parent != PARENT


def test_otel_without_the_extra_names_the_install_command(
        workspace: Any, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)  # as if not installed
    with pytest.raises(SystemExit) as info:
        main(["serve", "churn@production", "--otel"])
    assert info.value.code == 2
    assert "pip install 'reprise-ml[otel]'" in capsys.readouterr().err


def test_otel_exporters_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from reprise.core.errors import UserError
    from reprise.serve._tracing import tracer_provider_from_env

    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    provider = tracer_provider_from_env()
    assert provider.resource.attributes["service.name"] == "reprise-serve"
    provider.shutdown()
    monkeypatch.setenv("OTEL_SERVICE_NAME", "churn-api")
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    provider = tracer_provider_from_env()  # builds the exporter; sends nothing yet
    assert provider.resource.attributes["service.name"] == "churn-api"
    provider.shutdown()
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "zipkin")
    with pytest.raises(UserError, match="unknown exporter 'zipkin'"):
        tracer_provider_from_env()


@pytest.mark.slow
def test_reprise_serve_otel_exports_the_spans_of_a_real_process(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``reprise serve --otel`` configured by the environment alone (the console exporter):
    the spans of a request, parented by its ``traceparent``, are written when the server
    stops (the batch processor flushes them)."""
    import httpx

    import reprise
    from reprise.registry import promote, register_package
    from tests.registry.test_registry import pkg
    from tests.serve._e2e import Server

    ws = reprise.init(tmp_path)
    register_package("churn", pkg(1.0), workspace=ws)
    promote("churn", 1, "production", workspace=ws)
    ws.close()
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "churn-api")
    server = Server(tmp_path, {}, args=("--otel",)).start()
    try:
        server.wait_ready()
        r = httpx.post(server.url + "/v1/models/churn/predict", json=[{"a": 0.5, "b": 1.0}],
                       headers={"traceparent": VALID}, timeout=10)
    finally:
        assert server.stop() == 0
    assert r.status_code == 200
    span_id = r.headers["traceparent"].split("-")[2]
    log = server.log.read_text()
    decoder, spans, at = json.JSONDecoder(), [], log.find("{")
    while at >= 0:  # the console exporter writes one JSON document per span
        try:
            doc, end = decoder.raw_decode(log, at)
        except ValueError:
            at = log.find("{", at + 1)
            continue
        if isinstance(doc, dict) and "context" in doc:
            spans.append(doc)
        at = log.find("{", end)
    by_name = {s["name"]: s for s in spans}
    assert set(by_name) == {"POST /v1/models/{name}/predict", "validate", "queue", "predict"}
    request = by_name["POST /v1/models/{name}/predict"]
    assert request["context"]["trace_id"] == f"0x{TRACE}"
    assert request["context"]["span_id"] == f"0x{span_id}"
    assert request["parent_id"] == f"0x{PARENT}"
    assert request["resource"]["attributes"]["service.name"] == "churn-api"
    assert {by_name[n]["parent_id"] for n in ("validate", "queue", "predict")} == {
        f"0x{span_id}"}
