"""The closed loop (issue 15.7): the trigger policy's parser, cooldowns and the in-flight
limit (from the audit log, so across restarts), one watcher deciding at a time (the
lease), rollback of an alias, and the webhook against a loopback receiver."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest

import reprise
from reprise.core.errors import ConfigError
from reprise.monitor._alarm import Alarm, MonitorWindow
from reprise.monitor._loop import LoopActions, loop_events, watch, watch_once
from reprise.monitor._notify import notify, redact_url
from reprise.monitor._triggers import NotifySettings, load_trigger_policy
from reprise.registry import promote, register_package
from tests.registry.test_registry import pkg

T0 = 1_700_000_000.0


def alarm(kind: str = "input_drift", start: float = T0, version: int = 2) -> Alarm:
    return Alarm(model="churn", version=version, kind=kind, alias="production",
                 window=MonitorWindow(start=start, end=start + 60, rows=500),
                 message="x drifted (KS p=1e-9, Holm)", evidence={"x": {"p": 1e-9}})


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("REPRISE_ACTOR", "tester")
    w = reprise.init(tmp_path)
    register_package("churn", pkg(1.0), workspace=w)
    register_package("churn", pkg(0.5), workspace=w)
    promote("churn", 1, "production", workspace=w)
    promote("churn", 2, "production", workspace=w)
    yield w
    w.close()


# -- the policy ---------------------------------------------------------------------------

GOOD = {"rules": [{"on": ["input_drift"], "do": ["notify", "retrain"]},
                  {"on": "performance", "do": "rollback"}],
        "cooldown": {"retrain": "1h", "rollback": "10m"},
        "retrain": {"dataset": "latest", "target": "y",
                    "gates": {"accuracy": "no worse than baseline by 0.01"},
                    "rollout": {"strategy": "canary", "steps": [50, 100], "interval": "2s"}},
        "notify": {"url": "http://127.0.0.1:9/hook?token=secret", "timeout": "2s"}}


def test_policy_parses_from_yaml(tmp_path: Path) -> None:
    import yaml

    p = tmp_path / "loop.yaml"
    p.write_text(yaml.safe_dump(GOOD))
    pol = load_trigger_policy(p)
    assert pol.actions_for("input_drift") == ["notify", "retrain"]
    assert pol.actions_for("performance") == ["rollback"]
    assert pol.actions_for("prediction_drift") == []
    assert pol.cooldown_s["retrain"] == 3600 and pol.cooldown_s["notify"] == 300
    assert pol.retrain is not None and pol.retrain.rollout == {
        "strategy": "canary", "steps": [50, 100], "interval": 2.0,
        "policy": {"prediction_shift": {"max_distance": None}}}
    assert pol.repeat_s == 3600
    assert pol.notify is not None and pol.notify.timeout_s == 2.0
    assert "secret" not in json.dumps(pol.to_dict())


@pytest.mark.parametrize(("change", "words"), [
    ({"rulez": []}, ["unknown key(s) ['rulez']", "'rules'"]),
    ({"rules": []}, ["rules must be a non-empty list"]),
    ({"rules": [{"on": "drift", "do": "retrain"}]}, ["rules[0].on", "'drift'", "input_drift"]),
    ({"rules": [{"on": "input_drift", "do": "page"}]}, ["rules[0].do", "'page'", "rollback"]),
    ({"rules": [{"on": "input_drift"}]}, ["rules[0] needs both"]),
    ({"cooldown": {"retrain": "soon"}}, ["cooldown.retrain", "'soon'", "5m"]),
    ({"cooldown": {"deploy": "1m"}}, ["unknown key(s) ['deploy'] in cooldown"]),
    ({"retrain": {"gates": {"acc": ">= 1"}, "target": "y"}}, ["retrain.gates", "'acc'"]),
    ({"retrain": {"gates": {"accuracy": ">= 0.9"}}}, ["retrain.target"]),
    ({"retrain": {"rollout": {"strategy": "yolo"}}}, ["retrain.rollout.strategy", "canary"]),
    ({"retrain": {"rollout": {"steps": [0, 200]}}}, ["retrain.rollout.steps"]),
    ({"retrain": {"datset": "x@1"}}, ["unknown key(s) ['datset'] in retrain"]),
    ({"notify": {"url": "ftp://x"}}, ["notify.url", "http://"]),
    ({"notify": {"url": "http://x", "timeout": "5m"}}, ["notify.timeout", "at most 60s"]),
    ({"notify": None}, ["no notify.url"]),
    ({"window": 0}, ["window must be", "15m"]),
    ({"repeat": "often"}, ["repeat", "'often'"]),
])
def test_bad_policies_name_the_key_and_the_fix(change: dict[str, Any], words: list[str]) -> None:
    with pytest.raises(ConfigError) as err:
        load_trigger_policy({**GOOD, **change})
    for w in words:
        assert w in str(err.value)


def test_a_bare_yaml_on_key_is_read_as_on(tmp_path: Path) -> None:
    (tmp_path / "l.yaml").write_text("rules:\n  - on: input_drift\n    do: rollback\n")
    assert load_trigger_policy(tmp_path / "l.yaml").actions_for("input_drift") == ["rollback"]


def test_unreadable_and_non_mapping_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the trigger policy"):
        load_trigger_policy(tmp_path / "missing.yaml")
    (tmp_path / "l.yaml").write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="l.yaml: a trigger policy is a mapping"):
        load_trigger_policy(tmp_path / "l.yaml")


# -- the engine ---------------------------------------------------------------------------

def notify_only(cooldown: str = "5m") -> dict[str, Any]:
    return {"rules": [{"on": ["input_drift", "prediction_drift"], "do": "notify"}],
            "cooldown": {"notify": cooldown},
            "notify": {"url": "http://127.0.0.1:9/hook"}}


class Recorder:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def __call__(self, settings: Any, body: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(body)
        return {"ok": True}


def actions_of(ws: Any) -> list[tuple[str, str | None, str | None]]:
    return [(e.action, e.payload.get("action"), e.payload.get("reason"))
            for e in loop_events(ws, "churn@production")]


def test_an_alarm_is_acted_on_once_and_the_cooldown_holds_across_restarts(ws: Any) -> None:
    sent = Recorder()
    acts = LoopActions(notify=sent)
    a1 = alarm(start=T0)
    res = watch_once("churn@production", notify_only(), lambda: [a1], workspace=ws,
                     holder="w1", now=T0, actions=acts)
    assert res.leader and res.new_alarms == [a1.id]
    assert [a["outcome"] for a in res.actions] == ["succeeded"]
    # the same alarm again (re-detected, or after a restart): nothing new
    again = watch_once("churn@production", notify_only(), lambda: [a1], workspace=ws,
                       holder="w1", now=T0 + 10, actions=acts)
    assert again.new_alarms == [] and again.actions == []
    # a new alarm of another kind within the cooldown, seen by another process (a new
    # holder, the lease given up): recorded, the action skipped by the cooldown the audit
    # log remembers
    ws.metadata.release_lease("monitor:churn@production", "w1")
    a2 = alarm("prediction_drift", start=T0 + 60)
    res2 = watch_once("churn@production", notify_only(), lambda: [a2], workspace=ws,
                      holder="w2", now=T0 + 120, actions=LoopActions(notify=sent))
    assert res2.actions[0]["outcome"] == "skipped" and res2.actions[0]["reason"] == "cooldown"
    # the first incident goes on (the window slid: a new id), its action held back: a
    # repeat, counted but not recorded
    a1b = alarm(start=T0 + 30)
    res2b = watch_once("churn@production", notify_only(), lambda: [a1b], workspace=ws,
                       holder="w2", now=T0 + 130, actions=LoopActions(notify=sent))
    assert res2b.repeated == [a1b.id] and res2b.new_alarms == [] and res2b.actions == []
    # after the cooldown, a third alarm is acted on
    a3 = alarm(start=T0 + 600)
    res3 = watch_once("churn@production", notify_only(), lambda: [a3], workspace=ws,
                      holder="w2", now=T0 + 700, actions=LoopActions(notify=sent))
    assert res3.actions[0]["outcome"] == "succeeded"
    assert len(sent.calls) == 2 and sent.calls[0]["alarm"]["id"] == a1.id
    assert actions_of(ws) == [
        ("monitor.alarm", None, None), ("monitor.action.started", "notify", None),
        ("monitor.action.succeeded", "notify", None),
        ("monitor.alarm", None, None), ("monitor.action.skipped", "notify", "cooldown"),
        ("monitor.alarm", None, None), ("monitor.action.started", "notify", None),
        ("monitor.action.succeeded", "notify", None)]
    ev = [e for e in loop_events(ws, "churn@production") if e.action == "monitor.alarm"][0]
    assert ev.payload["alarm"] == a1.id and ev.payload["evidence"] == {"x": {"p": 1e-9}}
    assert ev.payload["window"]["rows"] == 500


def test_one_retrain_in_flight_at_a_time(ws: Any) -> None:
    """A retrain started (by a watcher that died before it finished) blocks another until
    it ends or its timeout passes; cooldown 0, so only the in-flight limit holds."""
    pol = {"rules": [{"on": "input_drift", "do": "retrain"}], "cooldown": {"retrain": 0},
           "retrain": {"timeout": "30m"}}
    ws.metadata.append_audit("dead-watcher", "monitor.action.started", "churn@production",
                             {"action": "retrain", "alarm": "alarm-old"})
    started_at = loop_events(ws, "churn@production")[-1].time
    calls: list[str] = []

    def fake_retrain(*args: Any, **kw: Any) -> dict[str, Any]:
        calls.append("retrain")
        return {"version": 3}

    acts = LoopActions(retrain=fake_retrain)
    res = watch_once("churn@production", pol, lambda: [alarm()], workspace=ws, holder="w",
                     now=started_at + 60, actions=acts)
    assert res.actions[0] == {"action": "retrain", "alarm": alarm().id, "outcome": "skipped",
                              "reason": "in_flight"}
    skipped = loop_events(ws, "churn@production")[-1].payload
    assert skipped["alarm_in_flight"] == "alarm-old" and skipped["evidence"]
    later = alarm(start=T0 + 3600)
    res2 = watch_once("churn@production", pol, lambda: [later], workspace=ws, holder="w",
                      now=started_at + 31 * 60, actions=acts)
    assert res2.actions[0]["outcome"] == "succeeded" and calls == ["retrain"]


def test_two_watchers_one_acts(ws: Any) -> None:
    """Both ask at the same moment: one holds the lease and acts, the other does nothing
    (not even ask its detector); the lease passes on when the first gives it up."""
    sent = Recorder()
    asked: list[str] = []

    def detector(who: str) -> Any:
        def detect() -> list[Alarm]:
            asked.append(who)
            return [alarm()]
        return detect

    barrier = threading.Barrier(2)
    results: dict[str, Any] = {}

    def run(who: str) -> None:
        barrier.wait()
        results[who] = watch_once("churn@production", notify_only(), detector(who),
                                  workspace=ws, holder=who, now=T0,
                                  actions=LoopActions(notify=sent))

    threads = [threading.Thread(target=run, args=(w,)) for w in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    leaders = [w for w, r in results.items() if r.leader]
    assert len(leaders) == 1 and asked == leaders and len(sent.calls) == 1
    other = "b" if leaders == ["a"] else "a"
    ws.metadata.release_lease("monitor:churn@production", leaders[0])
    assert watch_once("churn@production", notify_only(), detector(other), workspace=ws,
                      holder=other, now=T0 + 1).leader


def test_watch_loops_and_gives_the_lease_up(ws: Any) -> None:
    ticks: list[Any] = []
    watch("churn@production", notify_only(), lambda: [], workspace=ws, interval_s=0.01,
          holder="w", max_ticks=3, on_tick=ticks.append)
    assert len(ticks) == 3 and all(t.leader for t in ticks)
    assert ws.metadata.lease_holder("monitor:churn@production", time.time()) is None


def test_rollback_moves_the_alias_back_and_is_audited(ws: Any) -> None:
    pol = {"rules": [{"on": "performance", "do": "rollback"}]}
    res = watch_once("churn@production", pol, lambda: [alarm("performance")], workspace=ws,
                     holder="w", now=T0)
    assert res.actions[0]["outcome"] == "succeeded"
    assert res.actions[0]["result"] == {"from": 2, "to": 1}
    assert ws.metadata.get_aliases("churn")["production"] == 1
    assert [e.action for e in ws.metadata.list_audit_events()][-4:] == [
        "monitor.alarm", "monitor.action.started", "rollback", "monitor.action.succeeded"]
    # an alarm about a version the alias no longer holds rolls nothing back
    res2 = watch_once("churn@production", {**pol, "cooldown": {"rollback": 0}},
                      lambda: [alarm("performance", start=T0 + 99)], workspace=ws,
                      holder="w", now=T0 + 700)
    assert res2.actions[0]["outcome"] == "failed"
    assert "not the alarm's version 2" in res2.actions[0]["result"]["error"]
    assert ws.metadata.get_aliases("churn")["production"] == 1


def test_rollback_aborts_a_running_rollout_through_the_injected_call(ws: Any) -> None:
    from reprise.serve import start_rollout

    rec = start_rollout("churn", 1, interval="1s", workspace=ws)
    aborted: list[tuple[str, str, str]] = []
    acts = LoopActions(abort_rollout=lambda n, a, r: aborted.append((n, a, r)))
    pol = {"rules": [{"on": "prediction_drift", "do": "rollback"}]}
    res = watch_once("churn@production", pol, lambda: [alarm("prediction_drift", version=1)],
                     workspace=ws, holder="w", now=T0, actions=acts)
    assert res.actions[0]["result"]["aborted_rollout"] == rec.id
    assert aborted and aborted[0][:2] == ("churn", "production") and "alarm-" in aborted[0][2]
    # an alarm about the stable version aborts nothing (the candidate is not at fault)
    res2 = watch_once("churn@production", {**pol, "cooldown": {"rollback": 0}},
                      lambda: [alarm("prediction_drift", version=2)], workspace=ws,
                      holder="w", now=T0 + 5, actions=acts)
    assert res2.actions[0]["outcome"] == "failed" and len(aborted) == 1
    assert "not its candidate" in res2.actions[0]["result"]["error"]


def test_a_failing_action_is_a_recorded_failure(ws: Any) -> None:
    def boom(*a: Any, **k: Any) -> dict[str, Any]:
        raise RuntimeError("disk full")

    pol = {"rules": [{"on": "input_drift", "do": "retrain"}]}
    res = watch_once("churn@production", pol, lambda: [alarm()], workspace=ws, holder="w",
                     now=T0, actions=LoopActions(retrain=boom))
    assert res.actions[0] == {"action": "retrain", "alarm": alarm().id, "outcome": "failed",
                              "error": "disk full"}
    last = loop_events(ws, "churn@production")[-1]
    assert last.action == "monitor.action.failed" and last.payload["error"] == "disk full"


# -- the webhook --------------------------------------------------------------------------

class Receiver:
    """A loopback HTTP server that records POSTed JSON and answers ``status``."""

    def __init__(self, status: int = 200, delay: float = 0.0) -> None:
        self.bodies: list[Any] = []
        self.paths: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                n = int(self.headers.get("Content-Length") or 0)
                outer.bodies.append(json.loads(self.rfile.read(n)))
                outer.paths.append(self.path)
                time.sleep(delay)
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook?token=s3cret"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


def test_webhook_posts_the_alarm_and_the_action(ws: Any, caplog: pytest.LogCaptureFixture) -> None:
    with Receiver() as rx:
        pol = {"rules": [{"on": "input_drift", "do": "notify"}], "notify": {"url": rx.url}}
        res = watch_once("churn@production", pol, lambda: [alarm()], workspace=ws,
                         holder="w", now=T0)
    assert res.actions[0]["outcome"] == "succeeded"
    assert rx.paths == ["/hook?token=s3cret"]
    body = rx.bodies[0]
    assert body["action"] == "notify" and body["alarm"]["id"] == alarm().id
    assert body["alarm"]["evidence"] == {"x": {"p": 1e-9}} and body["model"] == "churn@production"
    logged = caplog.text + json.dumps([e.payload for e in ws.metadata.list_audit_events()])
    assert "s3cret" not in logged and "127.0.0.1" in logged


def test_webhook_failures_are_bounded_and_reported() -> None:
    with Receiver(status=500) as rx:
        out = notify(NotifySettings(url=rx.url, timeout_s=2), {"alarm": {"id": "a"}})
    assert out["ok"] is False and "HTTP 500" in out["error"] and "s3cret" not in out["url"]
    with Receiver(delay=2.0) as rx:
        t0 = time.monotonic()
        out = notify(NotifySettings(url=rx.url, timeout_s=0.3), {"alarm": {"id": "a"}})
        assert time.monotonic() - t0 < 1.5
    assert out["ok"] is False and "timed out" in out["error"]
    with Receiver() as rx:
        dead = rx.url
    out = notify(NotifySettings(url=dead, timeout_s=1), {"alarm": {"id": "a"}})
    assert out["ok"] is False and "could not reach" in out["error"]
    assert redact_url("https://u:p@h.example:8443/x?token=1#f") == "https://h.example:8443/x"
