"""Warm-up on a schedule (issue 18.6): a served version idle for ``warmup_idle`` seconds
gets a call with its example rows, counted in its own series and not as a request; a
version in use is left alone; 0 turns it off; a failing warm-up is counted and logged
and the server keeps serving."""

from __future__ import annotations

import asyncio
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from reprise.serve import Settings
from tests.serve.fakes import FakeSource, run, serving


def _metric(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                total += s.value
    return total


def _row() -> dict[str, Any]:
    return {"x": 2.0, "y": 3, "plan": "gold"}


def test_an_idle_version_is_warmed_up_and_not_counted_as_a_request() -> None:
    source = FakeSource()
    model = source.models["churn"][1]

    async def main() -> str:
        async with serving(source, ["churn@production"],
                           Settings(poll_interval=0.05, warmup_idle=0.2)) as (c, _):
            model.batches.clear()
            await asyncio.sleep(0.75)  # idle: a warm-up about every 0.2 s
            return (await c.get("/metrics")).text
    text = run(main())
    warmups = _metric(text, "reprise_warmups_total", model="churn", version="1", outcome="ok")
    assert 2 <= warmups <= 4
    assert model.batches == [1] * int(warmups)  # the example row, once per warm-up
    assert _metric(text, "reprise_requests_total") == 0


def test_a_version_in_use_is_not_warmed_up() -> None:
    source = FakeSource()

    async def main() -> str:
        async with serving(source, ["churn@production"],
                           Settings(poll_interval=0.05, warmup_idle=0.3)) as (c, _):
            for _ in range(16):  # a request every 0.05 s: never idle for 0.3 s
                r = await c.post("/v1/models/churn/predict", json=[_row()])
                assert r.status_code == 200
                await asyncio.sleep(0.05)
            return (await c.get("/metrics")).text
    text = run(main())
    assert _metric(text, "reprise_warmups_total") == 0
    assert _metric(text, "reprise_requests_total", code="200") == 16


def test_zero_turns_the_warm_up_off() -> None:
    source = FakeSource()
    model = source.models["churn"][1]

    async def main() -> str:
        async with serving(source, ["churn@production"],
                           Settings(poll_interval=0.05, warmup_idle=0)) as (c, _):
            model.batches.clear()
            await asyncio.sleep(0.4)
            return (await c.get("/metrics")).text
    text = run(main())
    assert model.batches == []
    assert _metric(text, "reprise_warmups_total") == 0


def test_a_failing_warm_up_is_counted_and_the_server_keeps_serving(caplog: Any) -> None:
    source = FakeSource()
    model = source.models["churn"][1]

    async def main() -> tuple[str, bool]:
        async with serving(source, ["churn@production"],
                           Settings(poll_interval=0.05, warmup_idle=0.15)) as (c, app):
            model.fail_when = lambda columns: True  # after the start-up warm-up
            await asyncio.sleep(0.5)
            model.fail_when = None
            r = await c.post("/v1/models/churn/predict", json=[_row()])
            assert r.status_code == 200
            return (await c.get("/metrics")).text, app.state.reprise.ready
    text, ready = run(main())
    assert ready
    assert _metric(text, "reprise_warmups_total", outcome="failed") >= 1
    assert "warm-up of idle churn v1 failed" in caplog.text
