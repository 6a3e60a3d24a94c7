"""The rollout tables of the metadata store (issue 14), on SQLite and PostgreSQL: one
running rollout per alias, decisions applied by compare-and-set with their audit events
in the registry's chain, the promotion's alias move in the same transaction, additive
buckets, and leases; races between real processes."""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from reprise.core import ArtifactRecord, BucketRow, RolloutRecord, new_id
from reprise.core._rollout_types import LATENCY_BOUNDS_MS, empty_bucket
from reprise.core._types import ModelVersionRecord
from reprise.core.errors import UserError
from reprise.registry._audit import verify_events
from reprise.store import SqlMetadataStore
from reprise.store import _schema as s


@pytest.fixture
def store(store_url: str) -> Iterator[SqlMetadataStore]:
    st = SqlMetadataStore(store_url)
    for h in ("a" * 64, "b" * 64, "c" * 64):
        st.put_artifact(ArtifactRecord(h, 1, "model-package", "x", {}, time.time()))
    for h in ("a" * 64, "b" * 64, "c" * 64):
        st.add_model_version(ModelVersionRecord("m", 0, h, None, "ready"),
                             ("t", "register", "m", {}))
    st.set_alias("m", "production", 1, ("t", "promote", "m@production", {}))
    yield st
    st.close()


def rollout(candidate: int = 2, alias: str = "production", stable: int = 1,
            **kw: Any) -> RolloutRecord:
    now = time.time()
    fields: dict[str, Any] = dict(
        id=new_id(), name="m", alias=alias, stable=stable, candidate=candidate,
        strategy="canary", steps=[5, 50, 100], interval_s=60.0, policy={"threshold": 2},
        key={"header": "x-request-key"}, state="running", step=0, weight=5.0, phase="steps",
        step_started_at=now, created_at=now, ended_at=None, failures=0, decisions=0,
        reason=None, actor="t")
    fields.update(kw)
    return RolloutRecord(**fields)


def start(store: SqlMetadataStore, rec: RolloutRecord | None = None) -> RolloutRecord:
    rec = rec or rollout()
    return store.create_rollout(rec, ("t", "rollout.start", rec.ref, {"candidate": 2}))


def decide(store: SqlMetadataStore, rec: RolloutRecord, expected: int,
           **changes: Any) -> bool:
    return store.apply_rollout_decision(rec.id, expected, changes,
                                        ("t", "rollout.step", rec.ref, {"weight": 50}))


class TestRollouts:
    def test_create_read_back_and_list(self, store: SqlMetadataStore) -> None:
        rec = start(store)
        assert store.get_rollout(rec.id) == rec
        assert store.find_rollout("m", "production", running_only=True) == rec
        assert store.find_rollout("m", "staging") is None
        assert store.get_rollout("nope") is None
        assert [r.id for r in store.list_rollouts()] == [rec.id]
        event = store.list_audit_events()[-1]
        assert (event.action, event.subject, event.payload) == (
            "rollout.start", "m@production", {"candidate": 2, "rollout": rec.id})

    def test_one_running_rollout_per_alias(self, store: SqlMetadataStore) -> None:
        first = start(store)
        events = len(store.list_audit_events())
        with pytest.raises(UserError, match=f"already has a running rollout {first.id}"):
            start(store, rollout(candidate=3))
        assert len(store.list_audit_events()) == events  # nothing half written
        assert len(store.list_rollouts()) == 1
        assert decide(store, first, 0, state="aborted", weight=0.0, ended_at=time.time())
        second = start(store, rollout(candidate=3))
        assert [r.id for r in store.list_rollouts("m")] == [second.id, first.id]

    def test_the_database_itself_refuses_a_second_running_rollout(
            self, store: SqlMetadataStore) -> None:
        from reprise.store._sql_rollouts import _row

        start(store)
        with pytest.raises(sa.exc.IntegrityError), store.engine.begin() as conn:
            conn.execute(s.rollouts.insert().values(**_row(rollout(candidate=3))))

    def test_refused_when_the_alias_moved_meanwhile(self, store: SqlMetadataStore) -> None:
        with pytest.raises(UserError, match="moved to version 1"):
            start(store, rollout(candidate=3, stable=2))
        assert store.list_rollouts() == []

    def test_a_decision_applies_once_and_is_chained(self, store: SqlMetadataStore) -> None:
        rec = start(store)
        assert decide(store, rec, 0, step=1, weight=50.0, failures=0)
        assert not decide(store, rec, 0, step=2, weight=100.0)  # same token: refused
        now = store.get_rollout(rec.id)
        assert now is not None and (now.step, now.weight, now.decisions) == (1, 50.0, 1)
        steps = [e for e in store.list_audit_events() if e.action == "rollout.step"]
        assert [e.payload["decision"] for e in steps] == [1]
        assert steps[0].payload["rollout"] == rec.id
        assert verify_events(store.list_audit_events()).ok

    def test_an_ended_rollout_takes_no_decision(self, store: SqlMetadataStore) -> None:
        rec = start(store)
        assert decide(store, rec, 0, state="rolled_back", weight=0.0, reason="errors")
        assert not decide(store, rec, 1, weight=50.0)

    def test_a_decision_cannot_change_identity_fields(self, store: SqlMetadataStore) -> None:
        rec = start(store)
        with pytest.raises(ValueError, match="candidate"):
            decide(store, rec, 0, candidate=3)
        with pytest.raises(ValueError, match="colour"):
            decide(store, rec, 0, colour="red")

    def test_promotion_moves_the_alias_in_the_same_transaction(
            self, store: SqlMetadataStore) -> None:
        rec = start(store)
        assert store.apply_rollout_decision(
            rec.id, 0, {"state": "promoted", "weight": 100.0}, ("srv", "rollout.promote",
                                                                  rec.ref, {}),
            move_alias_to=2, package_hash="b" * 64)
        assert store.get_aliases("m") == {"production": 2}
        assert store.alias_history("m", "production") == [1, 2]
        last = store.list_audit_events()[-2:]
        assert [e.action for e in last] == ["rollout.promote", "promote"]
        assert last[1].actor == "srv" and last[1].payload == {
            "alias": "production", "version": 2, "previous": 1, "rollout": rec.id}
        assert verify_events(store.list_audit_events()).ok

    def test_a_refused_alias_move_leaves_everything_as_it_was(
            self, store: SqlMetadataStore) -> None:
        rec = start(store)
        events = len(store.list_audit_events())
        with pytest.raises(UserError, match="another package"):
            store.apply_rollout_decision(rec.id, 0, {"state": "promoted"},
                                         ("t", "rollout.promote", rec.ref, {}),
                                         move_alias_to=2, package_hash="c" * 64)
        again = store.get_rollout(rec.id)
        assert again is not None and (again.state, again.decisions) == ("running", 0)
        assert store.get_aliases("m") == {"production": 1}
        assert len(store.list_audit_events()) == events


def test_a_rollouts_events_are_found_by_the_database(store: SqlMetadataStore) -> None:
    store.set_alias("m", "staging", 1, ("t", "promote", "m@staging", {}))
    one, other = start(store, rollout(id="r_1")), start(store, rollout(id="rx1",
                                                                       alias="staging"))
    assert decide(store, one, 0, weight=50.0)
    assert decide(store, other, 0, weight=50.0)
    store.append_audit("t", "rollout.note", one.ref, {"rollout": "rx1"})  # another's id
    found = store.rollout_events("r_1", one.ref)
    assert [(e.action, e.payload["rollout"]) for e in found] == [("rollout.start", "r_1"),
                                                                  ("rollout.step", "r_1")]
    assert [e.action for e in store.rollout_events("rx1", other.ref)] == ["rollout.start",
                                                                          "rollout.step"]
    assert store.rollout_events("nope", one.ref) == []


def test_a_subjects_events_are_found_by_the_database(store: SqlMetadataStore,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """What the monitor loop asks for (issue 15.7): one subject's events of one action
    prefix, recent ones (by the events' time), or those naming given values."""
    from reprise.store import _sql_registry

    class Clock:
        now = 1_000.0

        def time(self) -> float:
            return self.now

    clock = Clock()
    monkeypatch.setattr(_sql_registry, "time", clock)
    store.append_audit("t", "monitor.alarm", "m@production", {"alarm": "a_1"})  # old
    clock.now = 5_000.0
    store.append_audit("t", "monitor.alarm", "m@production", {"alarm": "a%2"})
    store.append_audit("t", "monitor.action.started", "m@production",
                       {"action": "notify", "alarm": "a_1"})
    store.append_audit("t", "monitor.alarm", "m@staging", {"alarm": "a_1"})  # another subject
    store.append_audit("t", "monitorx", "m@production", {"alarm": "a_1"})  # another action
    store.append_audit("t", "monitor.alarm", "m@production", {"alarm": "aX1"})  # _ is literal
    every = store.subject_events("m@production", "monitor.")
    assert [e.payload["alarm"] for e in every] == ["a_1", "a%2", "a_1", "aX1"]
    assert [e.payload["alarm"] for e in store.subject_events(
        "m@production", "monitor.", since=4_000.0)] == ["a%2", "a_1", "aX1"]
    by_id = store.subject_events("m@production", "monitor.alarm",
                                 payload_in=("alarm", ["a_1", "a%2", "nope"]))
    assert [(e.action, e.payload["alarm"]) for e in by_id] == [("monitor.alarm", "a_1"),
                                                               ("monitor.alarm", "a%2")]
    assert store.subject_events("m@production", "monitor.", payload_in=("alarm", [])) == []
    assert verify_events(store.list_audit_events()).ok


class TestBuckets:
    def row(self, version: int = 1, bucket: int = 10, server: str = "s1", requests: int = 3,
            errors: int = 1, **kw: Any) -> BucketRow:
        latency = [0] * (len(LATENCY_BOUNDS_MS) + 1)
        latency[2] = requests
        return BucketRow("r1", version, bucket, server, requests, errors, latency,
                         kw.pop("outputs", {"0": requests}), **kw)

    def test_rows_of_one_key_add_up(self, store: SqlMetadataStore) -> None:
        start(store, rollout(id="r1"))
        store.add_buckets([self.row(shadow_compared=2, shadow_agreed=1)])
        store.add_buckets([self.row(outputs={"1": 2}, requests=2, errors=0,
                                    shadow_dropped=4), self.row(server="s2")])
        rows = store.window_buckets("r1", 10, 10)
        assert [(r.server, r.requests, r.errors) for r in rows] == [("s1", 5, 1), ("s2", 3, 1)]
        one = rows[0]
        assert one.outputs == {"0": 3, "1": 2} and one.latency[2] == 5
        assert (one.shadow_compared, one.shadow_agreed, one.shadow_dropped) == (2, 1, 4)

    def test_a_window_is_a_range_of_buckets(self, store: SqlMetadataStore) -> None:
        start(store, rollout(id="r1"))
        store.add_buckets([self.row(bucket=b, version=v) for b in (8, 9, 10, 11) for v in (1, 2)])
        rows = store.window_buckets("r1", 9, 10)
        assert sorted({(r.bucket, r.version) for r in rows}) == [(9, 1), (9, 2), (10, 1),
                                                                (10, 2)]
        assert store.window_buckets("other", 0, 100) == []

    def test_a_window_of_some_versions_is_a_range_of_the_key(
            self, store: SqlMetadataStore) -> None:
        start(store, rollout(id="r1"))
        store.add_buckets([self.row(bucket=b, version=v) for b in range(20) for v in (1, 2, 3)])
        rows = store.window_buckets("r1", 9, 10, versions=[2, 1])
        assert [(r.bucket, r.version) for r in rows] == [(9, 1), (9, 2), (10, 1), (10, 2)]
        assert store.window_buckets("r1", 9, 10, versions=[]) == []
        if store.dialect == "sqlite":  # the database seeks the range; it scans no other rows
            sql = ("EXPLAIN QUERY PLAN SELECT * FROM rollout_buckets WHERE rollout_id = 'r1' "
                   "AND version IN (1, 2) AND bucket >= 9 AND bucket <= 10")
            with store.engine.connect() as conn:
                plan = " ".join(str(r[-1]) for r in conn.exec_driver_sql(sql))
            assert "rollout_id=? AND version=? AND bucket>? AND bucket<?" in plan, plan

    def test_an_empty_bucket_merges_as_zero(self) -> None:
        e = empty_bucket("r1", 1, 10, "s1")
        assert e.merge(self.row()) == self.row()


class TestLeases:
    def test_take_renew_refuse_expire_release(self, store: SqlMetadataStore) -> None:
        assert store.acquire_lease("rollout:r1", "a", 10, now=100)
        assert store.acquire_lease("rollout:r1", "a", 10, now=105)  # renew: until 115
        assert not store.acquire_lease("rollout:r1", "b", 10, now=114)
        assert store.lease_holder("rollout:r1", 114) == "a"
        assert store.acquire_lease("rollout:r1", "b", 10, now=115)  # expired: taken over
        assert not store.acquire_lease("rollout:r1", "a", 10, now=116)
        store.release_lease("rollout:r1", "a")  # not a's any more: nothing happens
        assert store.lease_holder("rollout:r1", 116) == "b"
        store.release_lease("rollout:r1", "b")
        assert store.lease_holder("rollout:r1", 116) is None
        assert store.acquire_lease("rollout:r1", "a", 10, now=116)
        assert store.acquire_lease("rollout:r2", "b", 10, now=116)  # keys are independent


# -- races between processes -----------------------------------------------------------------

def _racer(url: str, rollout_id: str, holder: str, barrier: Any, out: Any) -> None:
    st = SqlMetadataStore(url)
    barrier.wait()
    won = st.apply_rollout_decision(rollout_id, 0, {"step": 1, "weight": 50.0},
                                    (holder, "rollout.step", "m@production", {}))
    barrier.wait()
    out.put((holder, won, st.acquire_lease("rollout:x", holder, 30, now=1000.0)))
    st.close()


def test_racing_processes_apply_one_decision_and_take_one_lease(
        store: SqlMetadataStore) -> None:
    """Three processes (spawned: each its own connections) apply the same decision at
    once, then race for one lease: exactly one wins each."""
    rec = start(store)
    ctx = multiprocessing.get_context("spawn")
    barrier, out = ctx.Barrier(3), ctx.Queue()
    procs = [ctx.Process(target=_racer, args=(store.url, rec.id, f"h{i}", barrier, out))
             for i in range(3)]
    for p in procs:
        p.start()
    results = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert sorted(won for _, won, _ in results) == [False, False, True]
    now = store.get_rollout(rec.id)
    assert now is not None and now.decisions == 1
    steps = [e for e in store.list_audit_events() if e.action == "rollout.step"]
    assert [e.actor for e in steps] == [h for h, won, _ in results if won]
    assert verify_events(store.list_audit_events()).ok
    leased = [h for h, _, got in results if got]
    assert len(leased) == 1 and store.lease_holder("rollout:x", 1001.0) == leased[0]
