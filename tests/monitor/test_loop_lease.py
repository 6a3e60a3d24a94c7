"""The watcher keeps its lease while an action runs (issue 15.7, hardening): a heartbeat
renews it, so a second watcher cannot take over a model whose retrain outlives the lease's
TTL; a watcher that loses the lease anyway stops its retrain and acts on nothing more."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from reprise.monitor._loop import LoopActions, lease_key, loop_events, watch_once
from reprise.monitor._retrain import run_bounded
from tests.monitor.test_loop import alarm, ws  # noqa: F401 (a fixture)
from tests.monitor.test_retrain_bounds import gone, sleeper, wait_for

KEY = lease_key("churn", "production")
POL = {"rules": [{"on": ["input_drift", "prediction_drift"], "do": "retrain"}],
       "cooldown": {"retrain": 0}, "retrain": {"timeout": "5m"}}


def test_a_second_watcher_cannot_take_the_lease_during_a_long_retrain(ws: Any) -> None:  # noqa: F811
    ttl = 1.2  # renewed every 0.4 s: a stall of 0.8 s would lose it
    running, finish = threading.Event(), threading.Event()

    def long_retrain(*a: Any, **kw: Any) -> dict[str, Any]:
        running.set()
        finish.wait(20)  # "retrains" until the test has tried to take over
        return {"version": 3}

    results: dict[str, Any] = {}
    first = threading.Thread(target=lambda: results.update(a=watch_once(
        "churn@production", POL, lambda: [alarm()], workspace=ws, holder="a",
        lease_ttl_s=ttl, actions=LoopActions(retrain=long_retrain))))
    first.start()
    try:
        assert running.wait(20)
        time.sleep(2.2 * ttl)  # the lease would have expired twice without renewals
        other = watch_once("churn@production", POL, lambda: [alarm("prediction_drift")],
                           workspace=ws, holder="b", lease_ttl_s=ttl,
                           actions=LoopActions(retrain=long_retrain))
        assert not other.leader
        assert ws.metadata.lease_holder(KEY, time.time()) == "a"
    finally:
        finish.set()
        first.join(20)
    res = results["a"]
    assert res.actions[0]["outcome"] == "succeeded" and not res.lease_lost


def test_a_watcher_that_loses_its_lease_stops_its_retrain_and_acting(
        ws: Any, tmp_path: Path) -> None:  # noqa: F811
    ttl = 0.6
    argv, pids = sleeper(tmp_path)
    calls: list[str] = []

    def retrain(*a: Any, cancelled: Any, **kw: Any) -> dict[str, Any]:
        calls.append("retrain")
        run_bounded(argv, timeout_s=60, grace_s=2.0, cancelled=cancelled)
        return {"version": 3}

    def steal() -> None:  # e.g. the watcher stalled past its TTL and another took over
        wait_for(pids)
        ws.metadata.release_lease(KEY, "a")
        assert ws.metadata.acquire_lease(KEY, "b", 60, time.time())

    thief = threading.Thread(target=steal)
    thief.start()
    res = watch_once("churn@production", POL,
                     lambda: [alarm(), alarm("prediction_drift", start=1.8e9)],
                     workspace=ws, holder="a", lease_ttl_s=ttl,
                     actions=LoopActions(retrain=retrain))
    thief.join(20)
    assert res.lease_lost and calls == ["retrain"]
    assert res.actions == [{"action": "retrain", "alarm": alarm().id, "outcome": "failed",
                            "error": res.actions[0]["error"], "reason": "lease_lost"}]
    assert res.new_alarms == [alarm().id]  # the second alarm is left to the new holder
    assert all(gone(p) for p in wait_for(pids))
    last = loop_events(ws, "churn@production")[-1]
    assert last.action == "monitor.action.failed" and last.payload["reason"] == "lease_lost"
    assert ws.metadata.lease_holder(KEY, time.time()) == "b"
