"""The closed loop end to end on loopback (issue 15, "tests that must exist"): a real
``reprise serve points@production --monitor loop.yaml`` serves version 1 and runs the
watcher in its process. In-distribution traffic raises no alarm; shifted traffic raises
an input-drift alarm, the loop retrains the production pipeline on the prepared newer
dataset version, the candidate passes its gates against production, a canary rollout
starts, and the server's rollout decider promotes it; the new version's lineage names
the alarm. In the second test the retrained model fails its gate against production:
nothing is registered or rolled out, and the audit log holds the alarm and the failed gate."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import yaml

from reprise.tracking._api import open_workspace
from tests.pipeline.test_pipelines import cli
from tests.registry.test_cli import js, make_project, points
from tests.serve._e2e import Server, wait_for

LOOP: dict[str, Any] = {"window": 150,
        "rules": [{"on": ["input_drift", "prediction_drift"], "do": ["retrain"]}],
        "cooldown": {"retrain": "1h"},
        "retrain": {"dataset": "latest", "target": "y",
                    "gates": {"accuracy": "no worse than baseline by 0.05"},
                    "rollout": {"strategy": "canary", "steps": [50, 100], "interval": "1s",
                                "policy": {"analysis": {"min_requests": 20}}}}}


class Traffic:
    """A thread posting single-row requests with ``a ~ N(shift, 1)``, ``b ~ N(0, 1)``."""

    def __init__(self, url: str, shift: float, seed: int) -> None:
        self.url, self.shift, self.seed = url + "/v1/models/points/predict", shift, seed
        self.codes: list[int] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        rng = np.random.default_rng(self.seed)
        with httpx.Client(timeout=30) as client:
            while not self.stop.is_set():
                row = {"a": float(rng.normal(self.shift, 1)), "b": float(rng.normal())}
                self.codes.append(client.post(self.url, json=[row]).status_code)

    def __enter__(self) -> Traffic:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop.set()
        self.thread.join(30)


def loop_actions(ws: Any) -> list[str]:
    return [e.action for e in ws.metadata.list_audit_events()
            if e.action.startswith("monitor.")]


def serving_project(tmp_path: Path, sign: float, loop: dict[str, Any]) -> tuple[Path, Server]:
    """points:1 trained, registered and in production; points@2 prepared: the shifted
    population, labelled ``a - 2 + sign * b > 0`` (-1: the concept points:1 learned, +1:
    another); ``loop.yaml``; a server (not started) watching with it, every request logged
    (at the default cap of 100 a second a fast client's 200 requests left 130 logged rows,
    never a full window of 150)."""
    root = make_project(tmp_path)
    run1 = js(root, "run", "flow.py:flow")["run_id"]
    js(root, "models", "register", "points", "--run", run1)
    cli(root, "models", "promote", "points", "1", "--alias", "production")
    newer = points(300, seed=5)
    newer["a"] += 2.0
    newer["y"] = (newer["a"] - 2.0 + sign * newer["b"] > 0).astype(int)
    newer.to_csv(root / "points.csv", index=False)
    cli(root, "data", "add", "points", "points.csv")
    (root / "loop.yaml").write_text(yaml.safe_dump(loop))
    return root, Server(root, {}, name="points", args=(
        "--monitor", "loop.yaml", "--monitor-interval", "0.5", "--log-sample", "1",
        "--log-cap", "100000", "--log-flush-s", "0.3"))


@pytest.mark.timeout(300)
def test_drift_retrains_gates_canaries_promotes_and_the_lineage_names_the_alarm(
        tmp_path: Path) -> None:
    root, server = serving_project(tmp_path, -1.0, LOOP)  # points@2: the same concept
    ws = open_workspace(root)
    server.start()
    try:
        server.wait_ready()
        with Traffic(server.url, 0.0, seed=1) as calm:
            wait_for(lambda: len(calm.codes) >= 200, 60, "200 in-distribution requests")
        # the watcher judged a full window of it: no drift, no alarm
        wait_for(lambda: any(w.rows >= 150 for w in ws.metadata.list_monitor_windows(
            "points", version=1)), 30, "a judged window of in-distribution traffic")
        assert set(calm.codes) == {200}
        assert loop_actions(ws) == []
        assert ws.metadata.lease_holder("monitor:points@production", time.time())

        with Traffic(server.url, 2.0, seed=2) as shifted:
            wait_for(lambda: ws.metadata.get_aliases("points")["production"] == 2, 180,
                     "the loop to retrain and the rollout to promote version 2", every=0.5)
        assert set(shifted.codes) == {200}, "no request failed along the way"
    finally:
        server.stop()
        print(server.tail())

    acts = loop_actions(ws)
    assert acts[:3] == ["monitor.alarm", "monitor.action.started",
                        "monitor.action.succeeded"], acts
    events = ws.metadata.list_audit_events()
    alarm = next(e for e in events if e.action == "monitor.alarm").payload
    assert alarm["kind"] in ("input_drift", "prediction_drift") and alarm["version"] == 1
    done = next(e for e in events if e.action == "monitor.action.succeeded").payload
    assert done["result"]["version"] == 2 and done["result"]["dataset"] == "points@2"
    assert all(g["passed"] for g in done["result"]["gates"])
    rollout = ws.metadata.get_rollout(done["result"]["rollout"])
    assert rollout.state == "promoted" and rollout.candidate == 2
    # the order the audit log tells: alarm -> retrain -> rollout start -> promotion
    actions = [e.action for e in events]
    first_alarm = actions.index("monitor.alarm")
    start = actions.index("rollout.start", first_alarm)
    assert first_alarm < start < actions.index("promote", start)
    assert actions.index("monitor.action.succeeded", first_alarm) < actions.index(
        "promote", start)
    assert "monitor.action.failed" not in actions
    trig = js(root, "lineage", "points:2")["summary"]["trigger"]
    assert trig["alarm"]["id"] == alarm["alarm"] and trig["retrain_of"] == "points:1"


@pytest.mark.timeout(300)
def test_a_retrained_model_failing_its_gate_is_never_registered_nor_rolled_out(
        tmp_path: Path) -> None:
    """The second scenario through a real server: the newest dataset version holds another
    concept, so the retrained model, scored beside production on the original rows, fails
    "no worse than baseline"; nothing is registered, no rollout starts, production keeps
    serving version 1, and the alarm and the failed gate are in the audit log."""
    loop = {**LOOP, "retrain": {**LOOP["retrain"], "eval_dataset": "points@1"}}
    root, server = serving_project(tmp_path, 1.0, loop)  # points@2: another concept
    ws = open_workspace(root)
    server.start()
    try:
        server.wait_ready()
        with Traffic(server.url, 2.0, seed=2) as shifted:
            wait_for(lambda: "monitor.action.failed" in loop_actions(ws), 180,
                     "the loop to retrain and the candidate to fail its gate", every=0.5)
            codes = len(shifted.codes)
            wait_for(lambda: len(shifted.codes) > codes + 20, 30, "answers after the failure")
        assert set(shifted.codes) == {200}, "the server kept answering"
    finally:
        server.stop()
        print(server.tail())

    assert [v.version for v in ws.metadata.list_model_versions("points")] == [1]
    assert ws.metadata.get_aliases("points")["production"] == 1
    assert ws.metadata.list_rollouts("points") == []
    events = ws.metadata.list_audit_events()
    acts = [e.action for e in events]
    assert acts.index("monitor.alarm") < acts.index("monitor.action.started") < \
        acts.index("monitor.action.failed")
    assert "monitor.action.succeeded" not in acts and "rollout.start" not in acts
    failed = next(e for e in events if e.action == "monitor.action.failed").payload
    alarm = next(e for e in events if e.action == "monitor.alarm").payload
    assert failed["alarm"] == alarm["alarm"]
    gate = next(g for g in failed["result"]["gates"] if g["source"] == "policy")
    assert gate["passed"] is False and gate["actual"] < gate["baseline"] - 0.05
