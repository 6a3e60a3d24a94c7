"""Two ``reprise serve`` processes share one rollout (issue 14.6), on SQLite and PostgreSQL:
both route by it and record their outcomes, exactly one decides (the lease); a SIGKILL
of the decider mid-rollout hands the decisions to the other once the lease expires, the
killed server started again resumes at the recorded step, and the audit chain holds
each decision exactly once."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import reprise
from reprise.registry import audit_log, promote, register_package, verify_audit
from reprise.serve import start_rollout
from tests.registry.test_registry import pkg
from tests.serve._e2e import Load, Server, wait_for

STEPS = [20, 40, 60, 80, 100]
# samples large enough that a healthy candidate's noise does not fail the checks
POLICY = {"analysis": {"min_requests": 100}}


@pytest.fixture
def ws(tmp_path: Path, store_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("REPRISE_STORE_URL", store_url)
    monkeypatch.chdir(tmp_path)
    w = reprise.init(tmp_path)
    register_package("churn", pkg(1.0), workspace=w)
    register_package("churn", pkg(0.5), workspace=w)
    promote("churn", 1, "production", workspace=w)
    yield w
    w.close()


def _pid(holder: str | None) -> int | None:
    """The process id in a server's name (``HOST:PID:RANDOM``)."""
    return None if holder is None else int(holder.split(":")[-2])


def test_two_servers_one_decider_survive_a_sigkill_and_decide_each_step_once(
        ws: Any, tmp_path: Path, store_url: str) -> None:
    servers = [Server(tmp_path, {}, store_url=store_url).start() for _ in range(2)]
    try:
        for s in servers:
            s.wait_ready()
        rec = start_rollout("churn", 2, steps=STEPS, interval="2s", policy=POLICY,
                            workspace=ws)
        lease = f"rollout:{rec.id}"
        with Load([s.url for s in servers], threads=6) as first:
            for s in servers:
                wait_for(lambda s=s: (s.rollout() or {}).get("id") == rec.id, 60,
                         "both servers to route by the rollout")
            wait_for(lambda: ws.metadata.get_rollout(rec.id).step >= 1, 60, "a first step")
            holder = wait_for(lambda: ws.metadata.lease_holder(lease, time.time()), 10,
                              "a decider")
            decider = next(s for s in servers if s.pid == _pid(holder))
            other = next(s for s in servers if s is not decider)
            killed_pid = decider.pid
            decider.kill()
            killed_at, step_then = time.time(), ws.metadata.get_rollout(rec.id).step
            # the other takes over once the lease (3 polls) has expired, and goes on
            wait_for(lambda: _pid(ws.metadata.lease_holder(lease, time.time())) == other.pid,
                     10, "the other server to take the lease")
            wait_for(lambda: ws.metadata.get_rollout(rec.id).step > step_then, 60,
                     "a step decided by the other server")
        # without traffic the rollout holds (insufficient data) while the killed server
        # starts again; it then routes by the recorded step at once
        restarted_at = time.time()
        decider.start().wait_ready()
        resumed = wait_for(lambda: (r := decider.rollout()) and r["step"] == ws.metadata
                           .get_rollout(rec.id).step and r, 30, "the restarted server to "
                           "resume at the recorded step")
        assert resumed["id"] == rec.id and resumed["step"] >= step_then + 1
        assert resumed["weight"] == STEPS[resumed["step"]]
        with Load([s.url for s in servers], threads=6) as second:
            final = wait_for(lambda: (r := ws.metadata.get_rollout(rec.id)).state
                             != "running" and r, 180, "the rollout to end", every=0.2)
            for s in servers:
                wait_for(lambda s=s: s.rollout() is None, 10, "both servers to apply it")
    finally:
        codes = [s.stop() for s in servers]
    assert final.state == "promoted", (final.reason, servers[0].tail(), servers[1].tail())
    assert ws.metadata.get_aliases("churn")["production"] == 2
    assert codes == [0, 0]
    events = [e for e in audit_log(workspace=ws) if e["payload"].get("rollout") == rec.id]
    decisions = [e for e in events if e["action"] not in ("rollout.start", "promote")]
    assert [e["payload"]["decision"] for e in decisions] == list(range(1, len(decisions) + 1))
    steps = [e for e in decisions if e["action"] == "rollout.step"]
    assert [e["payload"]["step"] for e in steps] == list(range(1, len(STEPS)))
    assert [e["action"] for e in events].count("promote") == 1
    actors = {e["actor"] for e in decisions}
    assert len(actors) >= 2  # before and after the kill
    # the killed server decided nothing more; until its restart, the other decided all
    assert all(e["actor"].split(":")[-2] != str(killed_pid)
               for e in decisions if e["time"] > killed_at)
    assert all(e["actor"].split(":")[-2] == str(other.pid)
               for e in decisions if killed_at < e["time"] < restarted_at)
    assert verify_audit(workspace=ws).ok
    # every request reached a server and got an answer, but those the kill cut off
    answers = first.answers + second.answers
    cut = [a for a in answers if a.status != 200]
    assert all(a.status == 0 and killed_at - 1 < a.t < restarted_at for a in cut)
    assert all(a.status == 200 for a in second.answers)
    assert {a.version for a in answers if a.status == 200} == {1, 2}
