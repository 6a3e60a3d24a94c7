"""The dashboard's rollouts, monitoring and trade-offs API through httpx, on SQLite and
PostgreSQL, over records made by the layers' own functions: a model trained and logged
as the server logs its traffic (tests/monitor/_live_setup.py), live windows judged by
``live_report``, the closed loop's round (``watch_once``), rollouts started and decided
by ``reprise.serve`` (outcome buckets written as servers flush them, time injected).
Bad input is a 400 or 404 with a message, never a 500."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")

from reprise.ui import create_app  # noqa: E402
from tests.ui.test_api import Api  # noqa: E402


def _feed(ws: Any, rec: Any, version: int, t: float, requests: int, errors: int = 0,
          ms: float = 3.0, outputs: dict[str, int] | None = None) -> None:
    from tests.serve.test_rollouts import feed

    feed(ws, rec, version, t, requests, errors=errors, ms=ms, outputs=outputs)


@pytest.fixture
def made(tmp_path: Path, store_url: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """churn:1 at production with four monitored windows (the last drifted, its alarm
    acted on by the loop), then churn:2 rolled out twice: a canary rolled back (a step,
    then errors), and a second one left running."""
    from reprise.monitor import live_report, watch_once
    from reprise.monitor._loop import LoopActions
    from reprise.registry import package_model, register_package
    from reprise.serve import analyze_once, start_rollout
    from tests.monitor._live_setup import log_traffic, setup_model, traffic

    monkeypatch.setenv("REPRISE_STORE_URL", store_url)
    monkeypatch.setenv("REPRISE_ACTOR", "tester")
    monkeypatch.delenv("REPRISE_UI_TOKEN", raising=False)
    monkeypatch.chdir(tmp_path)
    ws, model = setup_model(tmp_path)
    log_traffic(ws, model, traffic(900, seed=2), at=1000.0, prefix="a")
    log_traffic(ws, model, traffic(300, seed=3, shift=2.0), at=2000.0, prefix="b")
    live_report("churn@production", window=300, windows=4, now=3000.0, reference="train@1",
                workspace=ws)
    notes: list[Any] = []
    watch_once("churn@production", {"window": 300, "reference": "train@1", "rules": [
        {"on": "input_drift", "do": ["notify"]}], "notify": {"url": "http://127.0.0.1:9/x"}},
        lambda: live_report("churn@production", window=300, now=3000.0, reference="train@1",
                            workspace=ws).alarms,
        workspace=ws, now=3001.0,
        actions=LoopActions(notify=lambda *a, **k: notes.append(a) or {"ok": True}))
    assert notes, "the loop acted on the alarm"

    from sklearn.linear_model import LogisticRegression

    x = traffic(200, seed=4)
    lr = LogisticRegression().fit(x, (x["a"] > 0).astype(int))
    evaluation = {"metrics": {"accuracy": {"value": 0.5}}, "gates": {"passed": True,
                                                                    "results": []}}
    register_package("churn", package_model(lr, sample=x, evaluation=evaluation), workspace=ws)
    rec = start_rollout("churn", 2, interval="60s", workspace=ws)
    t = rec.created_at
    _feed(ws, rec, 1, t + 10, 3000)
    _feed(ws, rec, 2, t + 10, 400, ms=4.0)
    assert analyze_once("churn", now=t + 61, workspace=ws).action == "step"
    _feed(ws, rec, 1, t + 70, 3000, errors=3)
    _feed(ws, rec, 2, t + 70, 400, errors=80)
    assert analyze_once("churn", now=t + 122, workspace=ws).action == "hold"
    assert analyze_once("churn", now=t + 183, workspace=ws).action == "rollback"
    running = start_rollout("churn", 2, strategy="shadow", interval="60s", workspace=ws)
    _feed(ws, running, 1, running.created_at, 50)
    yield {"ws": ws, "rolled_back": rec.id, "running": running.id,
           "client": Api(create_app(ws))}
    ws.close()


def test_openapi_documents_the_parts(made: Any) -> None:
    paths = made["client"].get("/openapi.json").json()["paths"]
    for path in ("/api/rollouts", "/api/rollouts/{rollout_id}", "/api/monitoring",
                 "/api/tradeoffs"):
        assert paths[path]["get"]["summary"], path
    params = {p["name"]: p for p in paths["/api/tradeoffs"]["get"]["parameters"]}
    assert "cost per 1,000" in params["usd_per_hour"]["description"]


def test_rollouts_list_and_filters(made: Any) -> None:
    c = made["client"]
    body = c.get("/api/rollouts").json()
    assert [(r["id"], r["state"]) for r in body["rollouts"]] == [
        (made["running"], "running"), (made["rolled_back"], "rolled_back")]
    row = body["rollouts"][1]
    assert row["ref"] == "churn@production" and (row["stable"], row["candidate"]) == (1, 2)
    assert row["strategy"] == "canary" and "failed analyses" in row["reason"]
    assert [r["id"] for r in c.get("/api/rollouts", params={"state": "rolled_back"}
                                    ).json()["rollouts"]] == [made["rolled_back"]]
    assert c.get("/api/rollouts", params={"model": "churn"}).json()["total"] == 2
    res = c.get("/api/rollouts", params={"state": "exploded"})
    assert res.status_code == 400 and "unknown state 'exploded'" in res.json()["detail"]
    res = c.get("/api/rollouts", params={"model": "nope"})
    assert res.status_code == 404 and "no model named 'nope'" in res.json()["detail"]


def test_an_ended_rollout_weights_window_and_decisions(made: Any) -> None:
    body = made["client"].get(f"/api/rollouts/{made['rolled_back']}").json()
    assert body["rollout"]["state"] == "rolled_back" and body["next_decision_in"] is None
    assert [(p["action"], p["weight"]) for p in body["progress"]] == [
        ("rollout.start", 5.0), ("rollout.step", 25.0), ("rollout.hold", 25.0),
        ("rollout.rollback", 0.0)]
    assert [d["action"] for d in body["decisions"]] == [
        "rollout.start", "rollout.step", "rollout.hold", "rollout.rollback"]
    step = body["decisions"][1]
    assert step["from"]["weight"] == 5.0 and step["checks"]
    assert all(c["verdict"] == "pass" for c in step["checks"])
    last = body["decisions"][-1]
    failed = {c["name"] for c in last["checks"] if c["verdict"] == "fail"}
    assert "error_rate" in failed and last["versions"]["candidate"]["errors"] == 80
    assert body["checks"] == last["checks"] and body["checks_at"] == last["time"]
    cand, stable = body["versions"]["candidate"], body["versions"]["stable"]
    assert (cand["requests"], cand["errors"]) == (400, 80)
    assert cand["error_rate"] == pytest.approx(0.2) and cand["p99_ms"] >= cand["p50_ms"]
    assert cand["prediction_shift"] is not None and stable["prediction_shift"] is None
    assert body["weights"] == {"stable": 100.0, "candidate": 0.0}
    assert body["runs"] == {"stable": None, "candidate": None}  # registered from packages


def test_a_running_rollout_has_its_checks_now(made: Any) -> None:
    body = made["client"].get(f"/api/rollouts/{made['running']}").json()
    assert body["rollout"]["running"] and body["rollout"]["strategy"] == "shadow"
    assert body["next_decision_in"] is not None and body["checks"]
    assert all(c["verdict"] == "insufficient" for c in body["checks"]
               if c["name"].startswith("error_rate") and c["name"] != "error_rate_hard")
    assert body["progress"][-1]["action"] == "now"
    assert body["versions"]["stable"]["requests"] == 50


def test_an_unknown_rollout_is_404(made: Any) -> None:
    res = made["client"].get("/api/rollouts/0123456789abcdef")
    assert res.status_code == 404 and "no rollout with id" in res.json()["detail"]


def test_monitoring_windows_drift_alarms_and_actions(made: Any) -> None:
    c = made["client"]
    body = c.get("/api/monitoring").json()
    assert (body["model"], body["version"]) == ("churn", 1)
    assert body["monitored"] == [{"model": "churn", "version": 1,
                                  "newest_end": body["windows"][-1]["end"]}]
    assert len(body["windows"]) == 4 and all(w["rows"] == 300 for w in body["windows"])
    ends = [w["end"] for w in body["windows"]]
    assert ends == sorted(ends)
    assert [w["verdicts"]["input_drift"] for w in body["windows"]] == [
        "no_drift", "no_drift", "no_drift", "drift"]
    a = body["drift"]["input"]["a"]
    assert a["time"] == ends and a["verdict"][-1] == "drift" and a["method"][0] == "ks"
    assert a["js"][-1] > max(a["js"][:-1]) and a["p_adjusted"][-1] < 0.001
    assert body["reference"]["dataset"] == "train@1"
    alarms = {a["kind"]: a for a in body["alarms"]}
    assert sorted(alarms) == ["input_drift", "prediction_drift"]
    alarm = alarms["input_drift"]
    assert "drift in a over 300 rows" in alarm["message"]
    assert sorted(body["windows"][-1]["alarms"]) == sorted(a["id"] for a in body["alarms"])
    # the loop records both alarms; the policy acts on input drift only (notify)
    events = [(e["action"], e["alarm"], e["do"]) for e in body["events"]]
    assert sorted(events, key=str) == sorted([
        ("monitor.alarm", alarm["id"], None),
        ("monitor.alarm", alarms["prediction_drift"]["id"], None),
        ("monitor.action.started", alarm["id"], "notify"),
        ("monitor.action.succeeded", alarm["id"], "notify")], key=str)
    assert [e["seq"] for e in body["events"]] == sorted(e["seq"] for e in body["events"])
    same = c.get("/api/monitoring", params={"model": "churn", "version": 1}).json()
    assert same["windows"] == body["windows"]
    few = c.get("/api/monitoring", params={"model": "churn", "limit": 2}).json()
    assert [w["end"] for w in few["windows"]] == ends[-2:]


def test_monitoring_without_data_and_bad_input(made: Any) -> None:
    c = made["client"]
    empty = c.get("/api/monitoring", params={"model": "churn", "version": 2}).json()
    assert empty["windows"] == [] and empty["alarms"] == [] and empty["drift"]["input"] == {}
    res = c.get("/api/monitoring", params={"model": "nope"})
    assert res.status_code == 404 and "no model named 'nope'" in res.json()["detail"]
    res = c.get("/api/monitoring", params={"model": "churn", "version": 9})
    assert res.status_code == 404 and "has no version 9" in res.json()["detail"]
    res = c.get("/api/monitoring", params={"version": 1})
    assert res.status_code == 400 and "version needs model" in res.json()["detail"]
    assert c.get("/api/monitoring", params={"version": 0}).status_code == 422


def test_tradeoffs_of_versions(made: Any) -> None:
    c = made["client"]
    body = c.get("/api/tradeoffs", params={"model": "churn", "usd_per_hour": 3.6}).json()
    v1, v2 = body["points"]
    assert (v1["label"], v2["label"]) == ("churn:1", "churn:2")
    assert v2["metric"] == 0.5 and v1["metric"] == pytest.approx(
        made["ws"].metadata.get_model_version("churn", 1).metrics["metrics"]["accuracy"]["value"])
    # the latency of both: the newest rollout window with requests of each version
    assert v1["latency_source"] == f"rollout {made['running']} (its last window)"
    assert v1["requests"] == 50
    assert v2["latency_source"] == f"rollout {made['rolled_back']} (its last window)"
    assert v2["p50_ms"] is not None and v2["p99_ms"] >= v2["p50_ms"]
    # $3.6/hour: a millisecond costs $0.001 per 1,000 requests
    assert v2["cost_per_1k"] == pytest.approx(v2["p50_ms"] * 0.001)
    # registered from packages, not from runs: no training energy measured
    assert v1["energy_joules"] is None and v1["run_id"] is None
    assert "accuracy" in body["metrics_available"] and body["models"] == ["churn"]
    assert body["studies"] == [] and "usd_per_hour" in body["cost_formula"]


def test_a_version_without_rollouts_takes_its_request_log_latency(
        tmp_path: Path, store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.monitor._live_setup import log_traffic, setup_model, traffic

    monkeypatch.setenv("REPRISE_STORE_URL", store_url)
    monkeypatch.chdir(tmp_path)
    ws, model = setup_model(tmp_path)
    try:
        c = Api(create_app(ws))
        (point,) = c.get("/api/tradeoffs").json()["points"]
        assert point["p99_ms"] is None and point["cost_per_1k"] is None  # not measured
        log_traffic(ws, model, traffic(100), at=1000.0)  # 10 requests of 10 rows, 1 ms each
        (point,) = c.get("/api/tradeoffs", params={"metric": "nope"}).json()["points"]
        assert point["latency_source"] == "request log (10 requests)"
        assert point["p99_ms"] == 1.0 and point["metric"] is None
        assert point["cost_per_1k"] == pytest.approx(1.0 / 3600)
    finally:
        ws.close()


def test_tradeoffs_bad_input(made: Any) -> None:
    c = made["client"]
    res = c.get("/api/tradeoffs", params={"model": "nope"})
    assert res.status_code == 404 and "no model named 'nope'" in res.json()["detail"]
    res = c.get("/api/tradeoffs", params={"study": "nope"})
    assert res.status_code == 404 and "no study 'nope'" in res.json()["detail"]
    res = c.get("/api/tradeoffs", params={"usd_per_hour": -1})
    assert res.status_code == 400 and "usd_per_hour" in res.json()["detail"]
    assert c.get("/api/tradeoffs", params={"usd_per_hour": "nan"}).status_code == 400
    assert c.get("/api/tradeoffs", params={"usd_per_hour": "x"}).status_code == 422
