"""The request log in a server (in process, no sockets): sampling rate and cap, request
ids, PII exclusion, a full buffer that drops and counts without slowing answers, and
the feedback endpoint joined to the log before and after a flush."""

from __future__ import annotations

import random
import statistics
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

import reprise
from reprise.monitor import add_feedback, export_labelled, read_requests
from reprise.serve import Settings, create_app
from reprise.serve._reqlog import Sampler
from tests.serve.fakes import FakeSource, run, score, wait_until

ROW = {"x": 1.0, "y": 2, "plan": "basic"}


@pytest.fixture
def ws(tmp_path: Path) -> Any:
    w = reprise.init(tmp_path / "ws")
    yield w
    w.close()


@asynccontextmanager
async def serving(ws: Any, settings: Settings, *, sink: Any = None,
                  ) -> AsyncIterator[tuple[httpx.AsyncClient, Any]]:
    source = FakeSource()
    source.workspace = ws  # type: ignore[attr-defined]
    app = create_app(source, ["churn@production"], settings=settings)
    if sink is not None:  # the server's own log, writing somewhere else
        app.state.reprise.request_log.sink = sink
    async with app.router.lifespan_context(app):
        await wait_until(lambda: app.state.reprise.ready)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            yield client, app


def _settings(**kw: Any) -> Settings:
    base: dict[str, Any] = {"poll_interval": 60, "log_sample": 1.0, "log_flush_s": 60}
    return Settings(**{**base, **kw})


# -- sampling ---------------------------------------------------------------------------

def test_the_sample_takes_its_share_of_requests() -> None:
    s = Sampler(0.1, 10**9, clock=lambda: 0.0, draw=random.Random(7).random)
    taken = sum(s.take() for _ in range(100_000))
    assert abs(taken - 10_000) < 400  # about 4 standard deviations (95)


def test_the_cap_bounds_each_second_whatever_the_rate() -> None:
    now = [0.0]
    s = Sampler(1.0, 5, clock=lambda: now[0])
    per_second: dict[int, int] = {}
    for i in range(300):  # 100 requests a second for 3 s
        now[0] = i / 100
        if s.take():
            per_second[int(now[0])] = per_second.get(int(now[0]), 0) + 1
    assert per_second == {0: 5, 1: 5, 2: 5}
    assert not any(Sampler(0.0, 5).take() for _ in range(1000))


# -- what is logged ---------------------------------------------------------------------

def test_sampled_answers_are_logged_with_id_version_latency_and_pii_left_out(ws: Any) -> None:
    async def go() -> list[str]:
        async with serving(ws, _settings(log_exclude=("plan", "label"))) as (client, _):
            ids = []
            for i in range(3):
                r = await client.post("/v1/models/churn/predict",
                                      json=[{**ROW, "y": i}, {**ROW, "y": 10 + i}])
                assert r.status_code == 200
                ids.append(r.headers["x-request-id"])
            r = await client.post("/v1/models/churn/predict", json=[ROW],
                                  headers={"x-request-id": "client-id-1"})
            assert r.headers["x-request-id"] == "client-id-1"
            ids.append("client-id-1")
            return ids

    ids = run(go())
    assert len(set(ids)) == 4
    table = read_requests("churn", workspace=ws)
    assert table.num_rows == 7
    assert sorted(table.column_names) == sorted(
        ["request_id", "row", "time", "version", "latency_ms", "input.x", "input.y",
         "output.score"])  # plan (an input) and label (an output) were never logged
    rows = table.to_pylist()
    assert [r["request_id"] for r in rows] == [i for i in ids[:3] for _ in (0, 1)] + [ids[3]]
    assert [r["row"] for r in rows] == [0, 1, 0, 1, 0, 1, 0]
    assert {r["version"] for r in rows} == {1}
    assert all(r["latency_ms"] > 0 and abs(r["time"] - time.time()) < 60 for r in rows)
    assert [r["output.score"] for r in rows[:2]] == [score(1.0, 0, "basic", 1),
                                                    score(1.0, 10, "basic", 1)]
    chunks = ws.metadata.list_request_chunks("churn")
    assert [(c.requests, c.rows, c.version) for c in chunks] == [(4, 7, 1)]


def test_an_oip_request_is_logged_under_its_own_id_and_the_answer_repeats_it(
        ws: Any, tmp_path: Path) -> None:
    inputs = [{"name": "x", "shape": [1], "datatype": "FP64", "data": [1.0]},
              {"name": "y", "shape": [1], "datatype": "INT64", "data": [2]},
              {"name": "plan", "shape": [1], "datatype": "BYTES", "data": ["basic"]}]

    async def go() -> list[httpx.Response]:
        async with serving(ws, _settings(log_flush_s=0.05)) as (client, _):
            url = "/v2/models/churn/infer"
            return [await client.post(url, json={"id": "oip-7", "inputs": inputs}),
                    await client.post(url, json={"inputs": inputs}),  # no id anywhere
                    await client.post(url, json={"id": "body", "inputs": inputs},
                                      headers={"x-request-id": "header-wins"}),
                    await client.post(url, json={"id": "has space", "inputs": inputs})]

    with_id, without, both, unloggable = run(go())
    assert with_id.json()["id"] == with_id.headers["x-request-id"] == "oip-7"
    assert without.json()["id"] == without.headers["x-request-id"]  # one id, not two
    assert both.json()["id"] == "body" and both.headers["x-request-id"] == "header-wins"
    # an OIP id that is not a valid request id is answered as sent, logged under a new one
    assert unloggable.json()["id"] == "has space"
    assert unloggable.headers["x-request-id"] != "has space"
    logged = read_requests("churn", workspace=ws).column("request_id").to_pylist()
    assert logged == ["oip-7", without.headers["x-request-id"], "header-wins",
                      unloggable.headers["x-request-id"]]
    # feedback can name the prediction by the id the OIP client already had
    assert add_feedback("churn", [{"request_id": "oip-7", "label": "yes"}], workspace=ws) == 1
    assert export_labelled("churn", tmp_path / "l.parquet", workspace=ws).rows == 1


@pytest.mark.parametrize("value", ["has space", "x" * 129, "caf\u00e9"])
def test_a_bad_client_request_id_gets_400_and_nothing_is_logged(ws: Any, value: str) -> None:
    async def go() -> httpx.Response:
        async with serving(ws, _settings()) as (client, _):
            return await client.post("/v1/models/churn/predict", json=[ROW],
                                     headers={"x-request-id": value.encode()})

    r = run(go())
    assert r.status_code == 400 and "x-request-id" in r.json()["error"]
    assert ws.metadata.list_request_chunks("churn") == []


def test_no_request_log_means_no_id_and_no_chunk(ws: Any) -> None:
    async def go() -> httpx.Response:
        async with serving(ws, _settings(request_log=False)) as (client, app):
            assert app.state.reprise.request_log is None
            return await client.post("/v1/models/churn/predict", json=[ROW])

    r = run(go())
    assert r.status_code == 200 and "x-request-id" not in r.headers
    assert ws.metadata.list_request_chunks() == []


def test_errors_are_not_logged_and_a_flush_by_size_writes_while_serving(ws: Any) -> None:
    async def go() -> None:
        async with serving(ws, _settings(log_flush_rows=4)) as (client, _):
            bad = await client.post("/v1/models/churn/predict", json=[{"x": "no"}])
            assert bad.status_code == 422
            for _ in range(4):
                await client.post("/v1/models/churn/predict", json=[ROW])
            await wait_until(lambda: ws.metadata.list_request_chunks("churn"))

    run(go())
    assert read_requests("churn", workspace=ws).num_rows == 4


# -- a full buffer ----------------------------------------------------------------------

class BlockedSink:
    """A store that hangs until released: the buffer fills up behind it."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.written = 0

    def write(self, table: Any, **kw: Any) -> None:
        self.release.wait(30)
        self.written += table.num_rows

    def prune(self, *a: Any) -> None:
        pass


async def _timed(client: httpx.AsyncClient) -> float:
    start = time.perf_counter()
    r = await client.post("/v1/models/churn/predict", json=[ROW])
    assert r.status_code == 200
    return time.perf_counter() - start


def test_a_full_buffer_drops_and_counts_and_answers_are_not_slowed(ws: Any) -> None:
    n = 400
    settings = _settings(log_buffer=10, log_flush_rows=5, log_cap=10**6)
    sink = BlockedSink()

    async def go() -> tuple[list[float], list[float], Any, str]:
        baseline: list[float] = []
        logged: list[float] = []
        async with serving(ws, _settings(request_log=False)) as (plain, _), \
                serving(ws, settings, sink=sink) as (client, app):
            logger = app.state.reprise.request_log
            for i in range(50 + n):  # alternating, so that a busy machine slows both alike
                t_plain, t_logged = await _timed(plain), await _timed(client)
                if i >= 50:  # after a warm-up
                    baseline.append(t_plain)
                    logged.append(t_logged)
            metrics = (await client.get("/metrics")).text
            sink.release.set()  # let the shutdown flush finish
        return baseline, logged, logger, metrics

    baseline, logged, logger, metrics = run(go())
    # everything beyond the buffer and the batch stuck in the store was dropped, counted
    assert logger.dropped >= n + 50 - 3 * 10
    assert logger.dropped + sink.written == n + 50
    line = [m for m in metrics.splitlines()
            if m.startswith("reprise_request_log_records_total") and 'outcome="dropped"' in m]
    assert line and float(line[0].split()[-1]) == logger.dropped
    # the answers did not wait for the store: bounded, and about as fast as without a log
    assert max(logged) < 1.0
    assert statistics.median(logged) < 1.5 * statistics.median(baseline) + 0.002, (
        statistics.median(logged), statistics.median(baseline))


# -- feedback ---------------------------------------------------------------------------

def test_feedback_joins_logged_rows_whether_it_comes_before_or_after_the_flush(
        ws: Any, tmp_path: Path) -> None:
    async def go() -> None:
        async with serving(ws, _settings()) as (client, app):
            ids = []
            for y in range(4):
                r = await client.post("/v1/models/churn/predict", json=[{**ROW, "y": y}])
                ids.append(r.headers["x-request-id"])
            # before the flush: labels for two requests still in the buffer
            r = await client.post("/v1/models/churn/feedback", json={"feedback": [
                {"request_id": ids[0], "label": 1}, {"request_id": ids[1], "label": 0}]})
            assert r.status_code == 200 and r.json() == {"model": "churn", "stored": 2}
            await app.state.reprise.request_log.flush()
            assert ws.metadata.list_request_chunks("churn")
            # after: one more, and a correction of an earlier one
            r = await client.post("/v1/models/churn/feedback", json={"feedback": [
                {"request_id": ids[2], "label": 1}, {"request_id": ids[0], "label": 0}]})
            assert r.json()["stored"] == 2

    run(go())
    report = export_labelled("churn", tmp_path / "labelled.parquet", workspace=ws)
    import pyarrow.parquet as pq

    out = pq.read_table(tmp_path / "labelled.parquet")
    assert (report.rows, report.logged_rows) == (3, 4)
    assert out.column_names == ["x", "y", "plan", "label"]
    assert sorted(zip(out["y"].to_pylist(), out["label"].to_pylist(), strict=True)) == [
        (0, 0), (1, 0), (2, 1)]


@pytest.mark.parametrize(("body", "field", "words"), [
    ({"feedback": []}, "feedback", "non-empty list"),
    ([{"request_id": "a", "label": 1}], "$", "the body must be"),
    ({"feedback": [{"request_id": "a"}]}, "feedback[0].label", "required"),
    ({"feedback": [{"request_id": "a", "label": None}]}, "feedback[0].label", "required"),
    ({"feedback": [{"request_id": "a", "label": [1]}]}, "feedback[0].label", "array"),
    ({"feedback": [{"request_id": 5, "label": 1}]}, "feedback[0].request_id", "string"),
    ({"feedback": [{"request_id": "", "label": 1}]}, "feedback[0].request_id", "empty"),
    ({"feedback": [{"request_id": "a", "label": 1}, {"request_id": "a", "label": 0}]},
     "feedback[1].request_id", "more than once"),
    ({"feedback": [{"request_id": "a", "label": 1, "x": 2}]}, "feedback[0]", "unknown keys"),
    ({"feedback": [{"request_id": "a", "label": 1}] * 10_001}, "feedback", "at most 10000"),
])
def test_bad_feedback_gets_422_naming_the_field(ws: Any, body: Any, field: str,
                                                  words: str) -> None:
    async def go() -> httpx.Response:
        async with serving(ws, _settings()) as (client, _):
            return await client.post("/v1/models/churn/feedback", json=body)

    r = run(go())
    assert r.status_code == 422, r.text
    fields = r.json()["fields"]
    assert any(f["field"] == field and words in f["problem"] for f in fields), fields
    assert ws.metadata.get_feedback("churn") == {}


def test_feedback_for_an_unknown_model_or_not_json_is_refused(ws: Any) -> None:
    async def go() -> tuple[httpx.Response, httpx.Response]:
        async with serving(ws, _settings()) as (client, _):
            a = await client.post("/v1/models/other/feedback",
                                  json={"feedback": [{"request_id": "a", "label": 1}]})
            b = await client.post("/v1/models/churn/feedback", content=b"{not json")
            return a, b

    a, b = run(go())
    assert a.status_code == 404 and "churn" in a.json()["error"]
    assert b.status_code == 400 and "not valid JSON" in b.json()["error"]


def test_a_hung_store_cannot_hold_the_shutdown(ws: Any) -> None:
    sink = BlockedSink()  # never released
    settings = _settings(log_flush_rows=1, drain_timeout=0.5)

    async def go() -> float:
        async with serving(ws, settings, sink=sink) as (client, _):
            for _ in range(3):
                assert (await client.post("/v1/models/churn/predict", json=[ROW])
                        ).status_code == 200
            start = time.perf_counter()
        return time.perf_counter() - start

    try:
        assert run(go()) < 10
    finally:
        sink.release.set()


@pytest.mark.parametrize(("flags", "words"), [
    (["--log-sample", "2"], "log_sample must be a share between 0 and 1"),
    (["--log-cap", "0"], "log_cap must be 1 or more"),
    (["--log-buffer", "0"], "log_buffer must be 1 or more"),
    (["--log-max-age-days", "-1"], "log_max_age_days must be positive"),
])
def test_bad_request_log_flags_exit_2_before_serving(
        workspace: Any, capsys: pytest.CaptureFixture[str], flags: list[str], words: str,
        ) -> None:
    from reprise.cli import main

    with pytest.raises(SystemExit) as info:
        main(["serve", "churn", *flags])
    assert info.value.code == 2
    assert words in capsys.readouterr().err


class RecordingSink:
    def __init__(self) -> None:
        self.tables: list[Any] = []
        self.prunes: list[tuple[Any, ...]] = []

    def write(self, table: Any, **kw: Any) -> None:
        self.tables.append((table, kw))

    def prune(self, *args: Any) -> None:
        self.prunes.append(args)


def test_retention_runs_after_a_flush_at_most_every_five_minutes() -> None:
    from reprise.serve._reqlog import RequestLogger

    sink = RecordingSink()
    log = RequestLogger(sink, _settings(log_max_age_days=2, log_max_mb=1), "s")

    async def go() -> None:
        for name in ("churn", "fraud", "churn"):
            log.offer(name, 1, log.request_id({"headers": []}), 0.001, {"x": [1.0]}, 1,
                      {"y": [2]})
            await log.flush()
        await log.close()

    run(go())
    assert [kw["name"] for _, kw in sink.tables] == ["churn", "fraud", "churn"]
    assert sink.prunes == [(["churn"], 2 * 86400.0, 1024 * 1024)]  # once: rate-limited
    off = RequestLogger(RecordingSink(), _settings(log_max_age_days=None, log_max_mb=None), "s")
    off._write([])
    assert off.sink.prunes == []  # type: ignore[attr-defined]


def test_a_buffered_record_is_left_alone_by_the_collector_and_written_unchanged() -> None:
    import gc

    from reprise.serve._reqlog import RequestLogger

    sink = RecordingSink()
    log = RequestLogger(sink, _settings(log_exclude=["plan"]), "s")
    inputs = {"x": [1.5, 2.5], "y": [2, 3], "plan": ["gold", "tin"], "v": [[1, 2], [3, 4]]}

    async def go() -> None:
        log.offer("churn", 1, "r1", 0.001, inputs, 2, {"label": ["high", "low"]})
        gc.collect(0)  # survived a young collection: tuples of atoms are no longer tracked
        rec = log.buffer[0]
        assert not any(map(gc.is_tracked, (rec.inputs["x"], rec.inputs["y"],
                                           rec.outputs["label"])))
        assert "plan" not in rec.inputs and inputs["x"] == [1.5, 2.5]  # the caller's kept
        await log.close()

    run(go())
    (table, kw), = sink.tables
    assert kw["name"] == "churn" and table.column("input.x").to_pylist() == [1.5, 2.5]
    assert table.column("input.y").to_pylist() == [2, 3]
    assert table.column("input.v").to_pylist() == [[1, 2], [3, 4]]
    assert table.column("output.label").to_pylist() == ["high", "low"]
    assert "input.plan" not in table.column_names
