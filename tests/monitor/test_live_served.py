"""End to end in process: a real ``reprise serve`` app (the registry's model, the request
log on) answers in-distribution then shifted traffic; the monitor judges the log it wrote,
and the same server's ``/metrics`` then shows the stored window's drift gauges."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from reprise.monitor._live import live_report
from reprise.registry import RegistrySource
from reprise.serve import Settings, create_app
from tests.monitor._live_setup import setup_model, traffic
from tests.serve.fakes import run, wait_until


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.chdir(tmp_path)
    w, _ = setup_model(tmp_path)
    yield w
    w.close()


async def _serve(ws: Any, frames: list[Any]) -> list[str]:
    """Send each frame's rows (20 a request), stop (which flushes the request log) and
    return the request ids."""
    settings = Settings(poll_interval=60, log_sample=1.0, log_cap=100_000, log_flush_s=60)
    app = create_app(RegistrySource(ws), ["churn@production"], settings=settings)
    ids: list[str] = []
    async with app.router.lifespan_context(app):
        await wait_until(lambda: app.state.reprise.ready, timeout=60)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            for frame in frames:
                rows = frame.to_dict("records")
                for i in range(0, len(rows), 20):
                    r = await c.post("/v1/models/churn/predict", json=rows[i:i + 20])
                    assert r.status_code == 200, r.text
                    ids.append(r.headers["x-request-id"])
    return ids


async def _metrics(ws: Any) -> str:
    app = create_app(RegistrySource(ws), ["churn@production"],
                     settings=Settings(poll_interval=60, request_log=False))
    async with app.router.lifespan_context(app):
        await wait_until(lambda: app.state.reprise.ready, timeout=60)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            return (await c.get("/metrics")).text


def test_served_traffic_is_monitored_and_exported(ws: Any) -> None:
    ids = run(_serve(ws, [traffic(1000, seed=41), traffic(1000, seed=42, shift=0.6)]))
    assert len(ids) == 100
    report = live_report("churn@production", workspace=ws, windows=2, reference="train@1")
    old, new = report.windows
    assert (old.window.rows, new.window.rows) == (1000, 1000)
    assert old.verdicts["input_drift"] == "no_drift" and new.verdicts["input_drift"] == "drift"
    assert old.performance["verdict"] == "unknown"  # no label sent
    assert [a.kind for a in report.alarms] == ["input_drift", "prediction_drift"]
    text = run(_metrics(ws))
    assert 'reprise_drift_alarm{kind="input_drift",model="churn",version="1"} 1.0' in text
    assert 'reprise_drift_statistic{column="a",method="ks",model="churn",part="input"' in text
