"""The retrain action of the loop (issue 15.7) on a real pipeline: an alarm re-runs the
pipeline that produced production, from its code snapshot, on the newest dataset
version; the candidate is gated against production on the same rows, registered and
handed to a rollout, and its lineage names the alarm. A candidate that fails its gate
is neither registered nor rolled out, and the failed gate is in the audit log."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from reprise.monitor._loop import LoopActions, loop_events, watch_once
from reprise.tracking._api import open_workspace
from tests.monitor.test_loop import alarm
from tests.pipeline.test_pipelines import cli
from tests.registry.test_cli import js, make_project, points


def policy(eval_dataset: str) -> dict[str, Any]:
    return {"rules": [{"on": "input_drift", "do": "retrain"}], "cooldown": {"retrain": 0},
            "retrain": {"dataset": "latest", "target": "y", "eval_dataset": eval_dataset,
                        "gates": {"accuracy": "no worse than baseline by 0.05",
                                  "roc_auc": "no worse than baseline by 0.05"},
                        "rollout": {"strategy": "canary", "steps": [50, 100],
                                    "interval": "1s"}}}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """points@1 trained, registered as points:1 and promoted to production."""
    root = make_project(tmp_path)
    run1 = js(root, "run", "flow.py:flow")["run_id"]
    js(root, "models", "register", "points", "--run", run1)
    cli(root, "models", "promote", "points", "1", "--alias", "production")
    return root


def add_version(root: Path, frame: pd.DataFrame) -> None:
    frame.to_csv(root / "points.csv", index=False)
    cli(root, "data", "add", "points", "points.csv")


def the_alarm(start: float = 1_700_000_000.0) -> Any:
    a = alarm(version=1, start=start)
    return type(a)(model="points", version=1, kind=a.kind, alias="production",
                   window=a.window, message=a.message, evidence=a.evidence)


def test_retrain_passing_then_failing_gates(project: Path) -> None:
    """One project (its setup is the slow part), two retrains: on ``points@2`` (the same
    concept: gates pass, registered, rolled out), then on ``points@3`` (another concept:
    the gate against production fails, nothing registered)."""
    passing(project)
    failing(project)
    timing_out(project)


def passing(project: Path) -> None:
    add_version(project, points(300, seed=1))  # points@2: more rows, the same concept
    started: list[tuple[str, int, str, dict[str, Any]]] = []

    def start(name: str, version: int, alias: str, settings: dict[str, Any]) -> str:
        started.append((name, version, alias, settings))
        return "rollout-1"

    ws = open_workspace(project)
    a = the_alarm()
    res = watch_once("points@production", policy("points@1"), lambda: [a], workspace=ws,
                     holder="w", actions=LoopActions(start_rollout=start))
    out = res.actions[0]
    assert out["outcome"] == "succeeded", out
    result = out["result"]
    assert result["dataset"] == "points@2" and result["version"] == 2
    assert result["rollout"] == "rollout-1" and result["production"] == "points:1"
    assert started == [("points", 2, "production",
                        {"strategy": "canary", "steps": [50, 100], "interval": 1.0,
                         "policy": {"prediction_shift": {"max_distance": None}}})]
    policy_gates = [g for g in result["gates"] if g["source"] == "policy"]
    assert policy_gates[0]["baseline_model"] == "points:1" and policy_gates[0]["passed"]
    assert [g["metric"] for g in policy_gates] == ["accuracy", "roc_auc"]
    assert all(g["passed"] and g["baseline"] > 0.9 for g in policy_gates)
    assert ws.metadata.get_aliases("points")["production"] == 1  # never promoted by the loop

    tree = js(project, "lineage", "points:2")
    trig = tree["summary"]["trigger"]
    assert trig["alarm"]["id"] == a.id and trig["alarm"]["kind"] == "input_drift"
    assert trig["window"]["rows"] == 500 and trig["retrain_of"] == "points:1"
    assert tree["summary"]["datasets"] == ["points@2"] and tree["summary"]["code_snapshot"]
    shown = cli(project, "lineage", "points:2").stdout
    assert f"alarm {a.id}" in shown and "-> window 500 rows" in shown
    assert f"-> run {result['run']}" in shown and "-> data points@2" in shown
    run = ws.metadata.get_run(result["run"])
    assert run.tags["reprise.alarm_id"] == a.id
    assert json.loads(run.tags["reprise.alarm_evidence"]) == {"x": {"p": 1e-9}}


def failing(project: Path) -> None:
    frame = points(300, seed=2)
    frame["y"] = (frame["a"] + frame["b"] > 0).astype(int)  # a different concept
    add_version(project, frame)
    ws = open_workspace(project)
    a = the_alarm(start=1_700_009_000.0)
    before = len(loop_events(ws, "points@production"))
    started: list[Any] = []
    res = watch_once("points@production", policy("points@1"), lambda: [a], workspace=ws,
                     holder="w", actions=LoopActions(start_rollout=lambda *x: started.append(x)))
    out = res.actions[0]
    assert out["outcome"] == "failed" and "gates failed: accuracy no worse than baseline" \
        in out["result"]["error"]
    assert started == []
    assert [v.version for v in ws.metadata.list_model_versions("points")] == [1, 2]
    assert ws.metadata.get_aliases("points")["production"] == 1
    events = loop_events(ws, "points@production")[before:]
    assert [e.action for e in events] == ["monitor.alarm", "monitor.action.started",
                                          "monitor.action.failed"]
    failed = events[-1].payload
    assert failed["alarm"] == a.id and failed["evidence"] == {"x": {"p": 1e-9}}
    gate = [g for g in failed["result"]["gates"] if g["source"] == "policy"][0]
    assert gate["passed"] is False and gate["actual"] < gate["baseline"] - 0.05


def timing_out(project: Path) -> None:
    """A retrain past ``retrain.timeout``: its process is ended, the action audited as
    failed with reason timeout, nothing registered."""
    from tests.monitor.test_retrain_bounds import gone

    ws = open_workspace(project)
    pol = policy("points@1")
    pol["retrain"]["timeout"] = "200ms"  # less than the retraining process takes to start
    res = watch_once("points@production", pol, lambda: [the_alarm(start=1_700_020_000.0)],
                     workspace=ws, holder="w", actions=LoopActions(start_rollout=None))
    out = res.actions[0]
    assert out["outcome"] == "failed" and out["reason"] == "timeout", out
    failed = loop_events(ws, "points@production")[-1]
    assert failed.action == "monitor.action.failed" and failed.payload["reason"] == "timeout"
    assert gone(int(failed.payload["pid"]))
    assert [v.version for v in ws.metadata.list_model_versions("points")] == [1, 2]
