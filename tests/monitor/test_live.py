"""Live windows of a served model's request log (written by the server's table builder
and the store's chunk writer): input drift, prediction drift, performance with labels,
insufficient windows, the recorded reference and the persisted window summaries."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from reprise.core.errors import UserError
from reprise.monitor import add_feedback
from reprise.monitor._alarm import Alarm
from reprise.monitor._live import _alarms, live_report, parse_window
from reprise.monitor._model_reference import model_reference
from tests.monitor._live_setup import log_traffic, setup_model, traffic


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.chdir(tmp_path)
    ws, model = setup_model(tmp_path)
    yield ws, model
    ws.close()


def test_in_distribution_traffic_raises_no_alarm(served: Any) -> None:
    ws, model = served
    log_traffic(ws, model, traffic(2000, seed=11), at=1000)
    report = live_report("churn@production", workspace=ws, windows=2, now=9000,
                         reference="train@1")
    assert [w.window.rows for w in report.windows] == [1000, 1000]
    assert [w.verdicts["input_drift"] for w in report.windows] == ["no_drift", "no_drift"]
    assert [w.verdicts["prediction_drift"] for w in report.windows] == ["no_drift"] * 2
    assert report.alarms == []
    assert (report.model, report.version, report.alias) == ("churn", 1, "production")
    assert report.reference["predictions"] == "reference_sample"
    assert report.reference["dataset"] == "train@1"


def test_a_shift_raises_input_and_prediction_drift_alarms(served: Any) -> None:
    ws, model = served
    log_traffic(ws, model, traffic(1000, seed=11), at=1000)
    log_traffic(ws, model, traffic(1000, seed=12, shift=0.5), at=5000)
    report = live_report("churn@production", workspace=ws, windows=2, now=9000,
                         reference="train@1")
    old, new = report.windows
    assert old.verdicts["input_drift"] == "no_drift" and new.verdicts["input_drift"] == "drift"
    assert "a" in new.input.drifted
    assert new.verdicts["prediction_drift"] == "drift"
    kinds = sorted(a.kind for a in report.alarms)
    assert kinds == ["input_drift", "prediction_drift"]
    alarm = next(a for a in report.alarms if a.kind == "input_drift")
    assert isinstance(alarm, Alarm) and alarm.window == new.window and alarm.version == 1
    assert alarm.alias == "production" and "a" in alarm.evidence["columns"]
    assert Alarm.from_dict(alarm.to_dict()).id == alarm.id  # JSON-able, as the loop needs
    # the same windows computed again: the same alarm ids, the same stored rows
    again = live_report("churn:1", workspace=ws, windows=2, now=9000, reference="train@1")
    assert {a.id for a in again.alarms} == {a.id for a in report.alarms}
    stored = ws.metadata.list_monitor_windows("churn")
    assert len(stored) == 2 and stored[0].input_verdict == "drift"
    assert stored[0].summary["alarms"] and stored[1].summary["alarms"] == []
    col = {c["column"]: c for c in stored[0].summary["input"]["columns"]}["a"]
    assert col["method"] == "ks" and col["p_adjusted"] < 0.05 and col["effect"]["mean_shift"]


def test_time_windows_and_a_small_window_is_insufficient(served: Any) -> None:
    ws, model = served
    log_traffic(ws, model, traffic(30, seed=3), at=1000, per_request=1)
    report = live_report("churn", workspace=ws, window="1h", now=2000, reference="train@1")
    (w,) = report.windows
    assert w.window.rows == 30 and w.verdicts["input_drift"] == "insufficient"
    assert w.verdicts["prediction_drift"] == "insufficient" and report.alarms == []
    assert live_report("churn", workspace=ws, window="10s", now=9000,
                       reference="train@1").windows == []


def test_performance_alarms_only_on_a_real_degradation(served: Any) -> None:
    ws, model = served
    # a harmless shift: inputs move along b's axis where the rule still holds; labels true
    frame = traffic(1000, seed=21, shift=0.6)
    ids = log_traffic(ws, model, frame, at=1000, per_request=1)
    truth = ((frame["a"] + frame["b"]) > 0).astype(int).tolist()
    add_feedback("churn", [{"request_id": r, "label": y} for r, y in zip(ids, truth, strict=True)],
                 workspace=ws)
    report = live_report("churn", workspace=ws, now=9000, reference="train@1")
    (w,) = report.windows
    assert w.verdicts["input_drift"] == "drift"  # the inputs moved...
    assert w.performance["verdict"] == "ok"  # ...but the model is as good as at training
    assert w.window.labelled == 1000
    assert "performance" not in {a.kind for a in report.alarms}
    # the concept changes: the labels flip for a third of the rows
    rng = np.random.default_rng(0)
    ids2 = log_traffic(ws, model, traffic(1000, seed=22), at=5000, per_request=1, prefix="q")
    flipped = [1 - y if rng.random() < 0.35 else y for y in
               ((traffic(1000, seed=22)["a"] + traffic(1000, seed=22)["b"]) > 0).astype(int)]
    add_feedback("churn", [{"request_id": r, "label": int(y)}
                           for r, y in zip(ids2, flipped, strict=True)],
                 workspace=ws)
    report = live_report("churn", workspace=ws, now=9000, reference="train@1")
    (w,) = report.windows
    assert w.verdicts["input_drift"] == "no_drift"
    acc = w.performance["metrics"]["accuracy"]
    assert w.performance["verdict"] == "degraded" and acc["ci_high"] < acc["reference"]
    alarm = next(a for a in report.alarms if a.kind == "performance")
    assert "accuracy" in alarm.message and alarm.window.labelled == 1000
    # one line a terminal can show: at most 3 metrics named, every one in the evidence
    many = {f"metric_{i}": acc for i in range(12)}
    w12 = dataclasses.replace(w, performance={**w.performance, "metrics": many})
    (perf,) = [a for a in _alarms(w12, model_reference("churn", workspace=ws), None, 0.0)
               if a.kind == "performance"]
    assert "metric_2 " in perf.message and "metric_3 " not in perf.message
    assert perf.message.endswith("; and 9 more metrics") and len(perf.message) < 250
    assert list(perf.evidence["metrics"]) == list(many)


def test_too_few_labels_give_no_performance_verdict(served: Any) -> None:
    ws, model = served
    ids = log_traffic(ws, model, traffic(1000, seed=5), at=1000, per_request=1)
    add_feedback("churn", [{"request_id": r, "label": 0} for r in ids[:50]], workspace=ws)
    (w,) = live_report("churn", workspace=ws, now=9000, reference="train@1").windows
    assert w.performance["verdict"] == "insufficient" and w.performance["labelled"] == 50


def test_the_reference_is_computed_once_and_recorded_on_the_version(served: Any) -> None:
    ws, model = served
    log_traffic(ws, model, traffic(200), at=1000)
    live_report("churn", workspace=ws, now=9000, reference="train@1")
    rec = ws.metadata.get_monitor_reference("churn", 1)
    assert rec.dataset == "train@1" and rec.predictions == "reference_sample"
    assert rec.sample_rows == 4000 and ws.artifacts.exists(rec.artifact_hash)
    assert rec.artifact_hash in ws.metadata.referenced_artifact_hashes()  # gc keeps it
    live_report("churn", workspace=ws, now=9000, reference="train@1")
    assert ws.metadata.get_monitor_reference("churn", 1).created_at == rec.created_at


def test_no_training_dataset_asks_for_a_reference(served: Any) -> None:
    ws, _ = served
    with pytest.raises(UserError, match="--reference DATASET@N"):
        live_report("churn@production", workspace=ws)
    live_report("churn@production", workspace=ws, reference="train@1")
    # given once, the reference is recorded on the version and reused
    assert live_report("churn@production", workspace=ws).reference["dataset"] == "train@1"
    with pytest.raises(UserError, match="no alias"):
        live_report("churn@staging", workspace=ws)


@pytest.mark.parametrize("bad", [0, "0", "ten", "5x", -3])
def test_bad_windows_are_refused(bad: Any) -> None:
    with pytest.raises(UserError, match="window"):
        parse_window(bad)
    assert parse_window("15m") == ("time", 900.0) and parse_window(None) == ("rows", 1000.0)


def test_too_many_windows_are_refused_before_any_work(served: Any) -> None:
    ws, _ = served
    with pytest.raises(UserError, match="at most 100 windows at a time, not 101"):
        live_report("churn", workspace=ws, windows=101, window=1)  # was minutes of work


@pytest.mark.parametrize(("bad", "why"), [("0", "whole number of at least 1"),
                                          ("-5", "whole number of at least 1"),
                                          ("2.5", "whole number of at least 1"),
                                          ("0s", "duration must be longer than 0"),
                                          ("0.0m", "duration must be longer than 0")])
def test_an_empty_or_fractional_window_says_what_is_wrong(bad: str, why: str) -> None:
    with pytest.raises(UserError, match=f"window '{re.escape(bad)}': .*{why}"):
        parse_window(bad)


def test_live_windows_on_both_metadata_stores(tmp_path: Path, store_url: str,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("REPRISE_STORE_URL", store_url)
    ws, model = setup_model(tmp_path)
    try:
        log_traffic(ws, model, traffic(500, seed=12, shift=0.8), at=5000)
        report = live_report("churn@production", workspace=ws, now=9000,
                             reference="train@1")
        assert [a.kind for a in report.alarms] == ["input_drift", "prediction_drift"]
        (stored,) = ws.metadata.latest_monitor_windows()
        assert (stored.rows, stored.input_verdict) == (500, "drift")
        assert ws.metadata.get_monitor_reference("churn", 1).dataset == "train@1"
    finally:
        ws.close()


def test_row_windows_cut_across_chunks_aligned_on_the_newest_row(served: Any) -> None:
    ws, model = served
    for k in range(3):  # 3 chunks of 700 rows, 10 rows a request, one request a second
        log_traffic(ws, model, traffic(700, seed=50 + k), at=1000.0 + 100 * k)
    three = live_report("churn", workspace=ws, windows=3, now=9000, reference="train@1",
                        persist=False)
    assert [w.window.rows for w in three.windows] == [100, 1000, 1000]
    two = live_report("churn", workspace=ws, windows=2, now=9000, reference="train@1",
                      persist=False)
    assert [w.window.rows for w in two.windows] == [1000, 1000]
    assert [w.window for w in two.windows] == [w.window for w in three.windows[1:]]
    assert two.windows[-1].window.end == 1269.0  # the newest request
    assert live_report("churn", workspace=ws, window=5000, now=9000, reference="train@1",
                       persist=False).windows[0].window.rows == 2100
    # since and now cut by answer time, inside a chunk
    # by time: answers in [now - 3·20 s, now], inside chunks; a window without traffic
    # (1079.5..1099.5 falls between two chunks) is left out
    cut = live_report("churn", workspace=ws, window="20s", windows=3, now=1119.5,
                      reference="train@1", persist=False)
    assert [(w.window.start, w.window.end, w.window.rows) for w in cut.windows] == \
        [(1060.0, 1069.0, 100), (1100.0, 1119.0, 200)]
