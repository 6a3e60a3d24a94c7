"""Drift gauges in a server's ``/metrics``, read from the window summaries stored in the
metadata store (the server does not import ``reprise.monitor``), cached between scrapes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

import reprise
from reprise.core._monitor_types import WindowRecord
from reprise.serve import Settings, create_app
from reprise.serve._drift_metrics import DriftCollector
from tests.serve.fakes import FakeSource, run, wait_until


@pytest.fixture
def ws(tmp_path: Path) -> Any:
    w = reprise.init(tmp_path / "ws")
    yield w
    w.close()


def _record(name: str = "churn", version: int = 1, end: float = 200.0,
            verdict: str = "drift") -> WindowRecord:
    cols = [{"column": "a", "method": "ks", "statistic": 0.22, "p_adjusted": 1e-30},
            {"column": "plan", "method": "chi2", "statistic": 3.1, "p_adjusted": None},
            {"column": "gone", "method": None, "statistic": None, "p_adjusted": None}]
    return WindowRecord(name=name, version=version, start=end - 100, end=end, rows=1000,
                        labelled=0, input_verdict=verdict, prediction_verdict="no_drift",
                        performance_verdict="unknown", reference_hash="h" * 64,
                        summary={"input": {"columns": cols},
                                 "prediction": {"columns": [{"column": "score",
                                                             "method": "ks",
                                                             "statistic": 0.01,
                                                             "p_adjusted": 0.9}]}})


def test_the_newest_window_of_each_served_model_is_exported(ws: Any) -> None:
    ws.metadata.add_monitor_windows([_record(end=100.0, verdict="no_drift"), _record(),
                                     _record(name="other")])

    async def go() -> str:
        source = FakeSource()
        source.workspace = ws  # type: ignore[attr-defined]
        app = create_app(source, ["churn@production"], settings=Settings(poll_interval=60))
        async with app.router.lifespan_context(app):
            await wait_until(lambda: app.state.reprise.ready)
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
                return (await c.get("/metrics")).text

    text = run(go())
    lines = text.splitlines()
    assert ('reprise_drift_statistic{column="a",method="ks",model="churn",part="input",'
            'version="1"} 0.22') in lines
    assert 'reprise_drift_p_value{column="a",model="churn",part="input",version="1"} 1e-30' \
        in lines
    assert ('reprise_drift_alarm{kind="input_drift",model="churn",version="1"} 1.0'
            in lines)  # the newest window (end 200) drifts; the older one does not count
    assert 'reprise_drift_alarm{kind="performance",model="churn",version="1"} 0.0' in lines
    assert 'reprise_drift_window_rows{model="churn",version="1"} 1000.0' in lines
    assert 'column="gone"' not in text and 'model="other"' not in text  # not served here


def test_reads_are_cached_and_a_broken_store_leaves_the_gauges_out(ws: Any) -> None:
    now = [0.0]
    collector = DriftCollector(ws, lambda: ["churn"], lambda: now[0], ttl=5.0)
    assert collector.records() == []
    ws.metadata.add_monitor_windows([_record()])
    now[0] = 4.0
    assert collector.records() == []  # cached
    now[0] = 6.0
    assert [r.end for r in collector.records()] == [200.0]

    class Broken:
        @property
        def metadata(self) -> Any:
            raise OSError("database gone")

    broken = DriftCollector(Broken(), lambda: ["churn"], lambda: 0.0)
    assert [f.samples for f in broken.collect()] == [[]] * 5
