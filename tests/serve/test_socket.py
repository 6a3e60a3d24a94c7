"""Real sockets: uvicorn on 127.0.0.1 (port 0), a bounded loopback load with no errors,
and a graceful shutdown that drains in-flight and queued requests."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import uvicorn

from reprise.serve import Settings, create_app
from tests.serve.fakes import FakeSource, run, score, wait_until


@asynccontextmanager
async def live_server(app: Any) -> AsyncIterator[tuple[uvicorn.Server, str]]:
    """uvicorn serving ``app`` on a free loopback port; always stopped on exit."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, lifespan="on",
                                           log_level="warning", access_log=False))
    task = asyncio.ensure_future(server.serve())
    try:
        await wait_until(lambda: server.started or task.done(), timeout=15)
        port = server.servers[0].sockets[0].getsockname()[1]
        yield server, f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 15)


def test_a_bounded_loopback_load_gets_no_errors() -> None:
    async def main() -> tuple[list[int], float, str]:
        app = create_app(FakeSource(), ["churn@production"], settings=Settings())
        async with live_server(app) as (_, url):
            await wait_until(lambda: app.state.reprise.ready)
            limits = httpx.Limits(max_connections=16)
            async with httpx.AsyncClient(base_url=url, limits=limits, timeout=10) as c:
                async def worker(k: int) -> list[int]:
                    codes = []
                    for j in range(40):
                        row = {"x": float(j % 10), "y": k, "plan": "gold"}
                        r = await c.post("/v1/models/churn/predict", json={"records": [row]})
                        assert r.json()["predictions"][0]["score"] == score(j % 10, k, "gold",
                                                                            1)
                        codes.append(r.status_code)
                    return codes
                t0 = time.perf_counter()
                codes = [code for part in await asyncio.gather(*(worker(k) for k in range(16)))
                         for code in part]
                elapsed = time.perf_counter() - t0
                metrics = (await c.get("/metrics")).text
        return codes, elapsed, metrics
    codes, elapsed, metrics = run(main())
    assert codes == [200] * 640 and elapsed < 30
    assert 'reprise_requests_total{code="200",model="churn",version="1"} 640.0' in metrics


def test_graceful_shutdown_answers_every_in_flight_and_queued_request() -> None:
    source = FakeSource()
    model = source.models["churn"][1]
    model.delay = 0.1

    async def main() -> list[Any]:
        app = create_app(source, ["churn@production"], settings=Settings(max_batch_size=1))
        async with live_server(app) as (server, url):
            await wait_until(lambda: app.state.reprise.ready)
            async with httpx.AsyncClient(base_url=url, timeout=15) as c:
                calls = [asyncio.ensure_future(c.post(
                    "/v1/models/churn/predict", json=[{"x": 1.0, "y": i, "plan": "gold"}]))
                    for i in range(6)]
                await wait_until(lambda: app.state.reprise.table.by_ref[
                    "churn@production"].batcher.depth >= 3)
                server.should_exit = True  # what SIGTERM does
                answers = await asyncio.gather(*calls, return_exceptions=True)
        return answers
    answers = run(main())
    assert [getattr(a, "status_code", a) for a in answers] == [200] * 6
    assert model.batches[1:] == [1] * 6  # after the warm-up: every request computed
