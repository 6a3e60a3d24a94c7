"""Monitoring records on both metadata backends: the reference recorded on a model
version (its artifact kept by gc), window summaries upserted by id, listed newest first,
and the newest window of each version."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import reprise
from reprise.core._monitor_types import MonitorReferenceRecord, WindowRecord
from reprise.store._materializers import save_object


@pytest.fixture
def ws(tmp_path: Path, store_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("REPRISE_STORE_URL", store_url)
    w = reprise.init(tmp_path / "ws")
    yield w
    w.close()


def _window(version: int, end: float, verdict: str = "no_drift") -> WindowRecord:
    return WindowRecord(name="churn", version=version, start=end - 10, end=end, rows=100,
                        labelled=3, input_verdict=verdict, prediction_verdict="no_drift",
                        performance_verdict="unknown", reference_hash="r" * 64,
                        summary={"input": {"columns": [{"column": "a", "p_adjusted": 0.5}]}},
                        computed_at=time.time())


def test_a_reference_is_recorded_on_the_version_and_kept_by_gc(ws: Any) -> None:
    store = ws.metadata
    assert store.get_monitor_reference("churn", 1) is None
    art = save_object(ws.artifacts, {"format": 1, "inputs": {}})
    rec = MonitorReferenceRecord("churn", 1, "train@3", art.hash, 4000, "reference_sample",
                                 created_at=10.0)
    store.put_monitor_reference(rec, art)
    store.put_monitor_reference(rec, art)  # again: replaced, not doubled
    assert store.get_monitor_reference("churn", 1) == rec
    assert store.get_monitor_reference("churn", 1, "train@3") == rec
    assert store.get_monitor_reference("churn", 1, "train@4") is None
    assert store.get_monitor_reference("churn", 2) is None
    assert art.hash in store.referenced_artifact_hashes()
    assert art.hash not in ws.gc().removed


def test_windows_upsert_by_id_and_the_newest_of_each_version(ws: Any) -> None:
    store = ws.metadata
    store.add_monitor_windows([_window(1, 100.0), _window(1, 200.0, "drift"),
                               _window(2, 150.0)])
    store.add_monitor_windows([_window(1, 200.0, "drift")])  # the same window again
    listed = store.list_monitor_windows("churn")
    assert [(w.version, w.end) for w in listed] == [(1, 200.0), (2, 150.0), (1, 100.0)]
    assert [w.end for w in store.list_monitor_windows("churn", version=1, limit=1)] == [200.0]
    assert listed[0].summary == {"input": {"columns": [{"column": "a", "p_adjusted": 0.5}]}}
    latest = sorted(store.latest_monitor_windows(), key=lambda w: w.version)
    assert [(w.version, w.end, w.input_verdict) for w in latest] == \
        [(1, 200.0, "drift"), (2, 150.0, "no_drift")]
    assert store.list_monitor_windows("other") == []
