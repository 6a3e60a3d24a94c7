"""The rollout analysis' ``input_drift`` check (installed by the CLI layer): a canary
whose logged traffic drifts from the candidate's reference fails the check; in
distribution it passes; without traffic or without the policy key it does not judge."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sklearn.linear_model import LogisticRegression

from reprise.cli._drift_check import input_drift_check, install_input_drift_check
from reprise.core._rollout_types import LATENCY_BOUNDS_MS, BucketRow, bucket_of, bucket_seconds
from reprise.monitor._model_reference import model_reference
from reprise.registry import package_model, register_package
from reprise.serve import analyze_once, start_rollout
from reprise.serve._policy import Policy
from reprise.serve._rollout_checks import CHECKS, VersionWindow
from tests.monitor._live_setup import log_traffic, setup_model, traffic, train_frame


@pytest.fixture
def canary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(CHECKS, "input_drift", lambda *a: None)  # restored afterwards
    ws, _ = setup_model(tmp_path)
    frame = train_frame()
    model2 = LogisticRegression(C=0.5).fit(frame[["a", "b"]], frame["y"])
    evaluation = {"metrics": {"accuracy": {"value": 0.9}},
                  "gates": {"passed": True, "results": []}}
    register_package("churn", package_model(model2, sample=frame[["a", "b"]],
                                            evaluation=evaluation), workspace=ws)
    model_reference("churn:2", dataset="train@1", workspace=ws)  # recorded on v2
    install_input_drift_check(ws)
    rec = start_rollout("churn", 2, interval="30s", workspace=ws,
                        policy={"input_drift": {"enabled": True},
                                "analysis": {"min_requests": 100}})
    yield ws, model2, rec
    ws.close()


def _feed(ws: Any, rec: Any, version: int, t: float, requests: int) -> None:
    latency = [0] * (len(LATENCY_BOUNDS_MS) + 1)
    latency[0] = requests
    ws.metadata.add_buckets([BucketRow(rec.id, version, bucket_of(t, bucket_seconds(
        rec.interval_s)), "s1", requests, 0, latency, {"0": requests // 2,
                                                        "1": requests - requests // 2})])


@pytest.mark.parametrize("shift,verdict", [(0.0, "pass"), (0.7, "fail")])
def test_a_canary_is_judged_on_its_logged_inputs(canary: Any, shift: float,
                                                 verdict: str) -> None:
    ws, model2, rec = canary
    t0 = rec.step_started_at
    log_traffic(ws, model2, traffic(1000, seed=31, shift=shift), at=t0 + 1, version=2)
    _feed(ws, rec, 1, t0 + 50, 2000)
    _feed(ws, rec, 2, t0 + 50, 1000)
    d = analyze_once("churn", now=t0 + 120, workspace=ws)
    check = next(c for c in d.checks if c.name == "input_drift")
    assert check.verdict == verdict, check.message
    if verdict == "fail":
        assert d.action == "hold" and "input drift in a" in d.reason
    else:
        assert check.message.startswith("no input drift")


def test_no_traffic_or_no_policy_key_gives_no_verdict(canary: Any) -> None:
    ws, _, rec = canary
    t0 = rec.step_started_at
    cand = VersionWindow(2, "candidate", model="churn", since=t0, until=t0 + 60)
    stable = VersionWindow(1, "stable", model="churn", since=t0, until=t0 + 60)
    on = Policy.from_dict({"input_drift": {"enabled": True}})
    out = input_drift_check(stable, cand, on, workspace=ws)
    assert out.verdict == "insufficient" and "request log" in out.message
    assert input_drift_check(stable, cand, Policy(), workspace=ws) is None
    unknown = VersionWindow(1, "candidate", model="churn", since=t0, until=t0 + 60)
    out = input_drift_check(stable, unknown, on, workspace=ws)  # v1: no reference known
    assert out.verdict == "insufficient" and "--reference" in out.message
