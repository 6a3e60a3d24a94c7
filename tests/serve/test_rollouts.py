"""Rollouts from Python (issue 14.1, 14.4-14.6), on SQLite and PostgreSQL: a candidate is
refused before anything is written when it cannot serve the stable version's traffic;
``analyze_once`` (time injected, outcomes written as servers write them) steps, promotes
and rolls back, each decision audited once with its evidence even when two callers
decide at the same moment."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import reprise
from reprise.core import LATENCY_BOUNDS_MS, BucketRow, RolloutRecord
from reprise.core._rollout_types import bucket_of, bucket_seconds, latency_index
from reprise.core.errors import NotFoundError, UserError
from reprise.registry import (
    archive_model,
    audit_log,
    get_model,
    package_model,
    promote,
    register_package,
    verify_audit,
)
from reprise.serve import (
    abort_rollout,
    analyze_once,
    list_rollouts,
    promote_rollout,
    rollout_status,
    start_rollout,
)
from tests.registry.test_registry import pkg


def _workspace(tmp_path: Path, url: str | None, monkeypatch: pytest.MonkeyPatch) -> Any:
    if url is not None:
        monkeypatch.setenv("REPRISE_STORE_URL", url)
    monkeypatch.setenv("REPRISE_ACTOR", "tester")
    monkeypatch.chdir(tmp_path)
    w = reprise.init(tmp_path)
    register_package("churn", pkg(1.0), workspace=w)
    register_package("churn", pkg(0.5), workspace=w)
    promote("churn", 1, "production", workspace=w)
    return w


@pytest.fixture
def ws(tmp_path: Path, store_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A workspace (each backend) with churn:1 at production and a healthy churn:2."""
    w = _workspace(tmp_path, store_url, monkeypatch)
    yield w
    w.close()


@pytest.fixture
def local_ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The same on the embedded SQLite only (for checks made before the store is asked)."""
    w = _workspace(tmp_path, None, monkeypatch)
    yield w
    w.close()


def feed(ws: Any, rec: RolloutRecord, version: int, t: float, requests: int, errors: int = 0,
         ms: float = 3.0, outputs: dict[str, int] | None = None, server: str = "s1") -> None:
    """Record what a server saw of ``version`` at time ``t`` (as its flush would)."""
    latency = [0] * (len(LATENCY_BOUNDS_MS) + 1)
    latency[latency_index(ms)] = requests
    outputs = {"0": requests // 2, "1": requests - requests // 2} if outputs is None else outputs
    ws.metadata.add_buckets([BucketRow(rec.id, version, bucket_of(t, bucket_seconds(
        rec.interval_s)), server, requests, errors, latency, outputs)])


def nothing_written(ws: Any, events: int) -> None:
    assert list_rollouts(workspace=ws) == []
    assert len(audit_log(workspace=ws)) == events


class TestStart:
    def test_a_canary_starts_from_the_alias(self, ws: Any) -> None:
        rec = start_rollout("churn", 2, interval="30s", key_header="X-Request-Key",
                            workspace=ws)
        assert (rec.stable, rec.candidate, rec.strategy, rec.state) == (1, 2, "canary",
                                                                         "running")
        assert (rec.steps, rec.step, rec.weight, rec.phase) == ([5, 25, 50, 100], 0, 5.0,
                                                                 "steps")
        assert rec.interval_s == 30.0 and rec.key == {"header": "x-request-key"}
        assert rec.policy["analysis"]["min_requests"] == 200 and rec.actor == "tester"
        event = audit_log(workspace=ws)[-1]
        assert (event["action"], event["subject"]) == ("rollout.start", "churn@production")
        p = event["payload"]
        assert (p["rollout"], p["stable"], p["candidate"], p["gates_passed"]) == (rec.id, 1, 2,
                                                                                True)
        assert p["warm_up"]["rows"] > 0 and p["policy"] == rec.policy
        assert verify_audit(workspace=ws).ok

    @pytest.mark.parametrize(("strategy", "phase"), [("shadow", "shadow"),
                                                     ("blue-green", "shadow")])
    def test_shadow_and_blue_green_start_at_weight_zero(self, ws: Any, strategy: str,
                                                        phase: str) -> None:
        rec = start_rollout("churn", 2, strategy=strategy, workspace=ws)
        assert (rec.weight, rec.phase, rec.steps) == (0.0, phase, [])

    @pytest.mark.parametrize(("kwargs", "error", "message"), [
        ({"alias": "staging"}, NotFoundError, "has no alias 'staging'"),
        ({"candidate": 1}, UserError, "is version 1 already"),
        ({"candidate": 9}, NotFoundError, "has no version 9"),
        ({"strategy": "linear"}, UserError, "strategy must be one of canary, shadow"),
        ({"steps": [50, 25]}, UserError, "steps must be increasing"),
        ({"steps": [5, 150]}, UserError, "steps must be increasing whole percentages in "
                                         "1..100"),
        ({"strategy": "shadow", "steps": [5]}, UserError, "--steps applies to canary"),
        ({"interval": "soon"}, UserError, "is not a duration"),
        ({"policy": {"latency": {"p99": 1}}}, UserError, "unknown key latency.p99"),
        ({"key_header": "x", "key_column": "a"}, UserError, "not both"),
        ({"key_header": "bad header"}, UserError, "is not an HTTP header name"),
        ({"key_column": "zzz"}, UserError, "'zzz' is not an input of the model"),
        ({"force": True}, UserError, "--force needs --reason"),
    ])
    def test_refusals_write_nothing(self, local_ws: Any, kwargs: dict[str, Any], error: type,
                                    message: str) -> None:
        ws = local_ws
        events = len(audit_log(workspace=ws))
        kwargs = {"candidate": 2, **kwargs}
        with pytest.raises(error, match=message):
            start_rollout("churn", kwargs.pop("candidate"), workspace=ws, **kwargs)
        nothing_written(ws, events)

    def test_an_unknown_model(self, ws: Any) -> None:
        with pytest.raises(NotFoundError, match="no model 'nope'"):
            start_rollout("nope", 2, workspace=ws)

    def test_gates_as_for_promote(self, ws: Any) -> None:
        register_package("churn", pkg(0.2, gates=False), workspace=ws)
        events = len(audit_log(workspace=ws))
        with pytest.raises(UserError, match="churn:3 out to 'production': its evaluation gates "
                                            "failed"):
            start_rollout("churn", 3, workspace=ws)
        nothing_written(ws, events)
        rec = start_rollout("churn", 3, force=True, reason="hotfix", workspace=ws)
        assert rec.reason == "hotfix"
        assert audit_log(workspace=ws)[-1]["payload"]["force"] is True

    def test_an_archived_candidate(self, ws: Any) -> None:
        archive_model("churn", 2, workspace=ws)
        with pytest.raises(UserError, match="churn:2 is archived"):
            start_rollout("churn", 2, workspace=ws)

    def test_one_running_rollout_per_alias(self, ws: Any) -> None:
        register_package("churn", pkg(0.3), workspace=ws)
        first = start_rollout("churn", 2, workspace=ws)
        with pytest.raises(UserError, match=f"already has a running rollout {first.id}"):
            start_rollout("churn", 3, workspace=ws)
        abort_rollout("churn", "wrong version", workspace=ws)
        assert start_rollout("churn", 3, workspace=ws).candidate == 3

    def test_an_incompatible_signature_is_refused(self, ws: Any) -> None:
        from sklearn.linear_model import LogisticRegression

        rng = np.random.default_rng(0)
        x = pd.DataFrame({"a": rng.normal(size=40), "c": rng.normal(size=40)})
        model = LogisticRegression().fit(x, (x["a"] > 0).astype(int))
        ev = {"metrics": {}, "gates": {"passed": True, "results": []}}
        register_package("churn", package_model(model, sample=x, evaluation=ev), workspace=ws)
        events = len(audit_log(workspace=ws))
        with pytest.raises(UserError, match=r"churn:3's signature does not suit the requests "
                                            r"of churn:1.*does not take input 'b'.*the "
                                            r"candidate needs input 'c'"):
            start_rollout("churn", 3, workspace=ws)
        nothing_written(ws, events)

    def test_a_candidate_that_fails_to_load_is_refused(self, ws: Any) -> None:
        blob = ws.artifacts.local_path(get_model("churn:2", workspace=ws).package_hash)
        blob.chmod(0o644)
        raw = bytearray(blob.read_bytes())
        raw[600] ^= 0xFF
        blob.write_bytes(bytes(raw))
        events = len(audit_log(workspace=ws))
        with pytest.raises(UserError, match="candidate churn:2 failed to load"):
            start_rollout("churn", 2, workspace=ws)
        nothing_written(ws, events)

    def test_a_candidate_that_fails_its_warm_up_is_refused(self, ws: Any) -> None:
        from sklearn.linear_model import LogisticRegression

        broken = pkg(0.3)
        rng = np.random.default_rng(1)
        wide = pd.DataFrame(rng.normal(size=(40, 3)), columns=["a", "b", "z"])
        # fitted on three columns: predicting the two-column example raises
        broken.model = LogisticRegression().fit(wide, (wide["a"] > 0).astype(int))
        register_package("churn", broken, workspace=ws)
        events = len(audit_log(workspace=ws))
        with pytest.raises(UserError, match="candidate churn:3 failed its warm-up: predicting "
                                            "its example input raised ValueError"):
            start_rollout("churn", 3, workspace=ws)
        nothing_written(ws, events)


class TestDecisions:
    def test_a_healthy_canary_is_promoted_step_by_step(self, ws: Any) -> None:
        rec = start_rollout("churn", 2, steps=[10, 50, 100], interval="60s", workspace=ws)
        t = rec.created_at
        assert analyze_once("churn", "production", now=t + 30, workspace=ws).action == "wait"
        actions = []
        for _ in range(3):
            feed(ws, rec, 1, t + 20, 2000)
            feed(ws, rec, 2, t + 20, 300)
            t += 61
            d = analyze_once("churn", "production", now=t, workspace=ws)
            assert d.applied, d.reason
            actions.append((d.action, d.changes["weight"]))
            rec = ws.metadata.get_rollout(rec.id)
        assert actions == [("step", 50.0), ("step", 100.0), ("promote", 100.0)]
        assert (rec.state, rec.weight, rec.decisions) == ("promoted", 100.0, 3)
        assert get_model("churn@production", workspace=ws).version == 2
        events = [e for e in audit_log(workspace=ws) if e["payload"].get("rollout") == rec.id]
        assert [e["action"] for e in events] == ["rollout.start", "rollout.step", "rollout.step",
                                                 "rollout.promote", "promote"]
        assert [e["payload"].get("decision") for e in events[1:4]] == [1, 2, 3]
        step = events[1]["payload"]
        assert step["from"] == {"step": 0, "weight": 10.0, "phase": "steps"}
        assert step["evidence"]["versions"]["candidate"]["requests"] == 300
        assert {c["verdict"] for c in step["evidence"]["checks"]} == {"pass"}
        assert verify_audit(workspace=ws).ok

    def test_an_analysis_reads_only_the_current_windows_buckets(
            self, ws: Any, monkeypatch: pytest.MonkeyPatch) -> None:
        rec = start_rollout("churn", 2, steps=[10, 50, 100], interval="60s", workspace=ws)
        t = rec.created_at
        feed(ws, rec, 1, t + 20, 2000)
        feed(ws, rec, 2, t + 20, 300)
        assert analyze_once("churn", now=t + 61, workspace=ws).action == "step"
        rec = ws.metadata.get_rollout(rec.id)
        feed(ws, rec, 1, t + 90, 900, errors=9)
        feed(ws, rec, 2, t + 90, 600)
        reads: list[tuple[int, int, tuple[int, ...] | None]] = []
        window_buckets = ws.metadata.window_buckets

        def spy(rid: str, first: int, last: int, versions: Any = None) -> Any:
            reads.append((first, last, None if versions is None else tuple(versions)))
            return window_buckets(rid, first, last, versions=versions)
        monkeypatch.setattr(ws.metadata, "window_buckets", spy)
        d = analyze_once("churn", now=t + 125, workspace=ws)
        b = bucket_seconds(rec.interval_s)
        step = bucket_of(rec.step_started_at, b)
        assert reads == [(step, bucket_of(t + 125, b), (1, 2))]  # not from the start
        versions = d.evidence["versions"]
        assert (versions["stable"]["requests"], versions["candidate"]["requests"]) == (900, 600)
        assert d.evidence["window"]["stable_since"] == rec.step_started_at
        # at 100 % the stable version answers nothing now: its baseline is the whole rollout
        assert d.action == "step" and d.changes["weight"] == 100.0
        reads.clear()
        analyze_once("churn", now=t + 130, workspace=ws)
        rec = ws.metadata.get_rollout(rec.id)
        assert reads == [(bucket_of(t, b), bucket_of(t + 130, b), (1,)),
                         (bucket_of(rec.step_started_at, b), bucket_of(t + 130, b), (2,))]

    def test_a_failing_candidate_is_rolled_back_and_the_alias_stays(self, ws: Any) -> None:
        rec = start_rollout("churn", 2, interval="60s", workspace=ws)
        t = rec.created_at
        feed(ws, rec, 1, t + 10, 3000, errors=3)
        feed(ws, rec, 2, t + 10, 400, errors=80)  # 20 % errors: not a hard failure
        first = analyze_once("churn", now=t + 61, workspace=ws)
        assert first.action == "hold" and "failed analysis 1 of 2" in first.reason
        second = analyze_once("churn", now=t + 122, workspace=ws)
        assert second.action == "rollback" and second.applied
        after = ws.metadata.get_rollout(rec.id)
        assert (after.state, after.weight) == ("rolled_back", 0.0)
        assert after.reason.startswith("2 failed analyses in a row")
        assert get_model("churn@production", workspace=ws).version == 1
        assert audit_log(workspace=ws)[-1]["action"] == "rollout.rollback"
        with pytest.raises(NotFoundError, match="no running rollout.*is rolled_back"):
            analyze_once("churn", now=t + 200, workspace=ws)

    def test_a_hard_failure_rolls_back_before_the_interval(self, ws: Any) -> None:
        rec = start_rollout("churn", 2, interval="60s", workspace=ws)
        feed(ws, rec, 2, rec.created_at + 2, 15, errors=15)
        d = analyze_once("churn", now=rec.created_at + 3, workspace=ws)
        assert d.action == "rollback" and d.reason.startswith("hard failure")

    def test_insufficient_data_holds(self, ws: Any) -> None:
        rec = start_rollout("churn", 2, interval="60s", workspace=ws)
        feed(ws, rec, 1, rec.created_at + 5, 3000)
        feed(ws, rec, 2, rec.created_at + 5, 37)
        d = analyze_once("churn", now=rec.created_at + 61, workspace=ws)
        assert d.action == "hold" and d.applied
        assert "insufficient data: 37 of 200 requests (candidate v2)" in d.reason
        assert ws.metadata.get_rollout(rec.id).weight == 5.0

    def test_two_callers_deciding_at_once_apply_one_decision(
            self, ws: Any, monkeypatch: pytest.MonkeyPatch) -> None:
        import reprise.serve._rollouts as rollouts

        rec = start_rollout("churn", 2, interval="60s", workspace=ws)
        feed(ws, rec, 1, rec.created_at + 5, 3000)
        feed(ws, rec, 2, rec.created_at + 5, 400)
        barrier, decided, results = threading.Barrier(2), threading.Barrier(2), []
        real_decide = rollouts.decide

        def decide_together(*args: Any, **kwargs: Any) -> Any:
            # both callers decide on the same state before either applies: without this
            # a caller that starts late reads the step already taken and only waits
            d = real_decide(*args, **kwargs)
            decided.wait(timeout=30)
            return d
        monkeypatch.setattr(rollouts, "decide", decide_together)

        def decider(name: str) -> None:
            barrier.wait()
            results.append(analyze_once("churn", "production", now=rec.created_at + 61,
                                        actor=name, workspace=ws))
        threads = [threading.Thread(target=decider, args=(f"server-{i}",)) for i in range(2)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(timeout=60)
        assert sorted(d.applied for d in results) == [False, True]
        assert all(d.action == "step" for d in results)
        steps = [e for e in audit_log(workspace=ws) if e["action"] == "rollout.step"]
        assert len(steps) == 1 and ws.metadata.get_rollout(rec.id).weight == 25.0

    def test_the_rollout_ends_when_the_alias_is_moved_by_hand(self, ws: Any) -> None:
        register_package("churn", pkg(0.3), workspace=ws)
        rec = start_rollout("churn", 2, workspace=ws)
        promote("churn", 3, "production", workspace=ws)
        d = analyze_once("churn", now=rec.created_at + 1, workspace=ws)
        assert d.action == "abort" and d.applied
        assert "was moved to version 3 outside the rollout" in d.reason
        assert ws.metadata.get_rollout(rec.id).state == "aborted"

    def test_a_refused_promotion_aborts(self, ws: Any) -> None:
        rec = start_rollout("churn", 2, steps=[100], workspace=ws)
        feed(ws, rec, 1, rec.created_at + 5, 3000)
        feed(ws, rec, 2, rec.created_at + 5, 400)
        with ws.metadata.engine.begin() as conn:  # archived behind the rollout's back
            import sqlalchemy as sa
            conn.execute(sa.text("UPDATE model_versions SET status = 'archived' "
                                 "WHERE version = 2"))
        d = analyze_once("churn", now=rec.created_at + 61, workspace=ws)
        assert d.action == "abort" and "the promotion was refused" in d.reason
        assert get_model("churn@production", workspace=ws).version == 1


class TestByHand:
    def test_promote_skips_to_the_end(self, ws: Any) -> None:
        rec = start_rollout("churn", 2, workspace=ws)
        done = promote_rollout("churn", reason="looks fine", workspace=ws)
        assert (done.id, done.state, done.weight, done.reason) == (rec.id, "promoted", 100.0,
                                                                   "looks fine")
        assert get_model("churn@production", workspace=ws).version == 2
        last = audit_log(workspace=ws)[-2:]
        assert [e["action"] for e in last] == ["rollout.promote", "promote"]
        assert last[0]["payload"]["evidence"]["versions"]["candidate"]["requests"] == 0
        assert verify_audit(workspace=ws).ok
        with pytest.raises(NotFoundError, match="no running rollout"):
            promote_rollout("churn", workspace=ws)

    def test_abort_leaves_the_alias(self, ws: Any) -> None:
        start_rollout("churn", 2, workspace=ws)
        done = abort_rollout("churn", "not today", workspace=ws)
        assert (done.state, done.weight, done.reason) == ("aborted", 0.0, "not today")
        assert get_model("churn@production", workspace=ws).version == 1
        assert audit_log(workspace=ws)[-1]["action"] == "rollout.abort"

    def test_status_shows_weights_windows_checks_and_decisions(self, ws: Any) -> None:
        rec = start_rollout("churn", 2, interval="60s", workspace=ws)
        feed(ws, rec, 1, rec.created_at + 5, 3000, errors=3)
        feed(ws, rec, 2, rec.created_at + 5, 37)
        s = rollout_status("churn", now=rec.created_at + 20, workspace=ws)
        assert s["ref"] == "churn@production" and s["weights"] == {"1": 95.0, "2": 5.0}
        assert s["versions"]["stable"]["requests"] == 3000
        assert s["versions"]["stable"]["burn_rates"]["availability"] == pytest.approx(1.0)
        assert s["versions"]["candidate"]["requests"] == 37
        assert s["next_decision_in"] == pytest.approx(40.0, abs=0.01)
        assert s["next"]["action"] == "wait"
        checks = {c["name"]: c for c in s["checks"]}
        assert checks["error_rate"]["message"] == ("insufficient data: 37 of 200 requests "
                                                   "(candidate v2)")
        assert [d["action"] for d in s["decisions"]] == ["rollout.start"]
        abort_rollout("churn", workspace=ws)
        ended = rollout_status("churn", workspace=ws)
        assert ended["rollout"]["state"] == "aborted" and ended["next"] is None
        assert [d["action"] for d in ended["decisions"]] == ["rollout.start", "rollout.abort"]

    def test_status_reads_only_this_rollouts_events(self, ws: Any,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
        first = start_rollout("churn", 2, alias="production", workspace=ws)
        abort_rollout("churn", workspace=ws)
        promote("churn", 2, "staging", workspace=ws)
        start_rollout("churn", 1, alias="staging", force=True, reason="t", workspace=ws)
        rec = start_rollout("churn", 2, workspace=ws)
        abort_rollout("churn", "again", alias="production", workspace=ws)

        def whole_log() -> None:
            raise AssertionError("rollout status read the whole audit log")
        monkeypatch.setattr(ws.metadata, "list_audit_events", whole_log)
        s = rollout_status("churn", alias="production", workspace=ws)
        assert s["rollout"]["id"] == rec.id != first.id
        assert [d["action"] for d in s["decisions"]] == ["rollout.start", "rollout.abort"]
        assert s["decisions"][-1]["reason"] == "again"
        assert [e.action for e in ws.metadata.rollout_events(first.id, first.ref)] == [
            "rollout.start", "rollout.abort"]

    def test_tampering_with_a_rollout_event_is_detected(self, ws: Any) -> None:
        import sqlalchemy as sa

        rec = start_rollout("churn", 2, workspace=ws)
        abort_rollout("churn", workspace=ws)
        seq = next(e["seq"] for e in audit_log(workspace=ws) if e["action"] == "rollout.abort")
        with ws.metadata.engine.begin() as conn:
            conn.execute(sa.text("UPDATE audit_events SET payload = REPLACE(payload, "
                                 f"'{rec.id}', 'forged') WHERE seq = {seq}"))
        report = verify_audit(workspace=ws)
        assert [(p.kind, p.seq) for p in report.problems] == [("edited", seq)]
