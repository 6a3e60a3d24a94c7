"""Alias following: a moved alias (promotion, rollback) is loaded, warmed up and swapped
in while requests keep coming; none is dropped or answered by the wrong version."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from reprise.serve import Settings
from tests.serve.fakes import FakeModel, FakeSource, run, score, serving, wait_until

FAST = Settings(poll_interval=0.01)


def _row(i: int) -> dict[str, Any]:
    return {"x": float(i % 10), "y": i % 100, "plan": "gold" if i % 2 else "basic"}


def test_requests_under_load_follow_promotion_and_rollback_and_none_is_dropped() -> None:
    source = FakeSource()
    for model in source.models["churn"].values():
        model.delay = 0.002

    async def client(c: Any, k: int, answers: list[tuple[int, Any]]) -> None:
        for j in range(40):
            i = k * 1000 + j
            r = await c.post("/v1/models/churn/predict", json=[_row(i)])
            answers.append((i, r))

    async def mover(app: Any) -> list[int]:
        state, seen = app.state.reprise, []
        for target in (2, 1):  # promote v2, then roll back to v1
            await asyncio.sleep(0.15)
            source.aliases["churn@production"] = target
            await wait_until(lambda t=target: state.table.by_ref["churn@production"].version
                             == t)
            seen.append(target)
        return seen

    async def main() -> list[tuple[int, Any]]:
        answers: list[tuple[int, Any]] = []
        async with serving(source, ["churn@production"], FAST) as (c, app):
            moves, *_ = await asyncio.gather(mover(app), *(client(c, k, answers)
                                                            for k in range(8)))
            assert moves == [2, 1]
            await wait_until(lambda: len(app.state.reprise.table.models()) == 1)
        return answers
    answers = run(main())
    assert len(answers) == 8 * 40
    versions = set()
    for i, r in answers:
        assert r.status_code == 200, r.text
        body = r.json()
        row = _row(i)
        assert body["predictions"][0]["score"] == score(row["x"], row["y"], row["plan"],
                                                        body["version"])
        versions.add(body["version"])
    assert versions == {1, 2}
    assert source.loads == [("churn", 1), ("churn", 2), ("churn", 1)]


def test_in_flight_requests_finish_on_the_old_version_which_is_then_released() -> None:
    source = FakeSource()
    source.models["churn"][1].delay = 0.3

    async def main() -> None:
        async with serving(source, ["churn@production"], FAST) as (c, app):
            state = app.state.reprise
            old = state.table.by_ref["churn@production"]
            slow = asyncio.ensure_future(c.post("/v1/models/churn/predict", json=[_row(1)]))
            await wait_until(lambda: source.models["churn"][1].active == 1)
            source.aliases["churn@production"] = 2
            await wait_until(lambda: state.table.by_ref["churn@production"].version == 2)
            fresh = await c.post("/v1/models/churn/predict", json=[_row(2)])
            assert fresh.json()["version"] == 2
            assert (await slow).json()["version"] == 1  # finished where it started
            await wait_until(lambda: old.batcher._closed)
            metrics = (await c.get("/metrics")).text
            assert 'reprise_model_served{model="churn",version="1"} 0.0' in metrics
            gone = await c.post("/v1/models/churn/versions/1/predict", json=[_row(3)])
            assert gone.status_code == 404
    run(main())


def test_pinned_versions_never_move_and_a_broken_version_is_not_swapped_in(
        caplog: pytest.LogCaptureFixture) -> None:
    source = FakeSource()
    source.models["churn"][3] = FakeModel("churn", 3)
    source.broken.add(("churn", 3))

    async def main() -> None:
        async with serving(source, ["churn@production", "churn:1"], FAST) as (c, app):
            state = app.state.reprise
            source.aliases["churn@production"] = 3
            await asyncio.sleep(0.2)
            assert state.table.by_ref["churn@production"].version == 1
            assert source.loads.count(("churn", 3)) == 1  # tried once, not every poll
            source.aliases["churn@production"] = 2
            await wait_until(lambda: state.table.by_ref["churn@production"].version == 2)
            assert state.table.by_ref["churn:1"].version == 1
            pinned = await c.post("/v1/models/churn/versions/1/predict", json=[_row(1)])
            assert pinned.json()["version"] == 1  # still served: the pinned ref holds it
            assert (await c.post("/v1/models/churn/predict", json=[_row(1)])).json()[
                "version"] == 2
    with caplog.at_level(logging.WARNING):
        run(main())
    assert "moved to v3, which could not be loaded" in caplog.text


def test_an_alias_that_cannot_be_resolved_keeps_the_current_version(
        caplog: pytest.LogCaptureFixture) -> None:
    source = FakeSource()

    async def main() -> None:
        async with serving(source, ["churn@production"], FAST) as (c, _):
            del source.aliases["churn@production"]
            await asyncio.sleep(0.05)
            r = await c.post("/v1/models/churn/predict", json=[_row(1)])
            assert r.status_code == 200 and r.json()["version"] == 1
    with caplog.at_level(logging.WARNING):
        run(main())
    assert "could not resolve churn@production" in caplog.text
