"""The metadata store under many writers (issue 16, point 5).

Plain processes log metric points through the public tracking API (``start_run`` /
``log_metric``, ingested by each run's background flusher and at its end) while other
processes register model versions, move an alias and add dataset versions on the same
store. Afterwards every point must be in the database exactly once with its step and
value, every registry and dataset operation must have succeeded in order, the audit
chain must verify, and no process may have seen (or logged) a lock error, a
serialization failure or a deadlock. All of it within a bounded time.

A small run (4 writers x 1,000 points) on SQLite and PostgreSQL in the normal suite;
the issue's size (16 writers x 10,000 points) on PostgreSQL, and 8 x 5,000 on SQLite,
under ``make test-reliability``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import reprise

ROOT = Path(__file__).resolve().parents[2]

# Each writer logs `points` points of one key; the value encodes (writer, step) exactly,
# so a point ingested twice, lost, or given to the wrong run shows.
_WRITER = '''
import json, sys, time
from pathlib import Path
import reprise

root, index, points = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
ws = reprise.open_workspace(root)
(root / "sync" / f"ready.w{index}").touch()
while not (root / "sync" / "go").exists():
    time.sleep(0.005)
t0 = time.perf_counter()
with reprise.start_run(f"load-{index}", params={"writer": index}, workspace=ws) as run:
    for step in range(points):
        reprise.log_metric("x", index * 1e6 + step + 0.25, step=step)
        if step % 250 == 249:  # spread the points over several background ingestions
            time.sleep(0.01)
(root / "sync" / f"w{index}.json").write_text(json.dumps(
    {"run": run.id, "seconds": time.perf_counter() - t0}))
ws.close()
'''

# Registers `ops` model versions one by one (each a distinct package), moving the
# `production` alias to each new version, and back with a rollback every third time; every
# such process works on the same model, so their registrations and moves interleave.
_REGISTRY = '''
import json, sys, time
from pathlib import Path
import numpy as np, pandas as pd
from sklearn.linear_model import LogisticRegression
import reprise
from reprise.registry import package_model, promote, register_package, rollback

root, index, ops = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
ws = reprise.open_workspace(root)
rng = np.random.default_rng(index)
x = pd.DataFrame({"a": rng.normal(size=40), "b": rng.normal(size=40)})
y = (x["a"] + x["b"] > 0).astype(int)
evaluation = {"metrics": {"accuracy": {"value": 0.9}}, "gates": {"passed": True, "results": []}}
(root / "sync" / f"ready.r{index}").touch()
while not (root / "sync" / "go").exists():
    time.sleep(0.005)
name, done = "model", []  # every registry process on the same model and alias
for k in range(ops):
    pkg = package_model(LogisticRegression(C=0.1 * (k + 1)).fit(x, y), sample=x,
                        evaluation=evaluation)
    v = register_package(name, pkg, workspace=ws).version
    promote(name, v, "production", workspace=ws)
    if k % 3 == 2:
        rollback(name, "production", workspace=ws)
    done.append(v)
(root / "sync" / f"r{index}.json").write_text(json.dumps({"versions": done}))
ws.close()
'''

# Adds `ops` versions of one dataset (the same one in every such process), each with
# different content.
_DATASETS = '''
import json, sys, time
from pathlib import Path
import pandas as pd
import reprise
from reprise.data import add_dataset

root, index, ops = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
ws = reprise.open_workspace(root)
(root / "sync" / f"ready.d{index}").touch()
while not (root / "sync" / "go").exists():
    time.sleep(0.005)
done = []
for k in range(ops):
    frame = pd.DataFrame({"k": [k] * 20, "writer": [index] * 20, "i": range(20)})
    done.append(add_dataset("data", frame, workspace=ws).record.version)
(root / "sync" / f"d{index}.json").write_text(json.dumps({"versions": done}))
ws.close()
'''

# What a process must never print: the store retries these, a user never sees them.
_FORBIDDEN = ("Traceback", "could not ingest", "could not recover", "locked", "deadlock",
              "could not serialize", "SerializationFailure", "OperationalError")


def _env() -> dict[str, str]:
    path = os.pathsep.join([str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path}


def load(root: Path, store_url: str, *, writers: int, points: int, registries: int,
         datasets: int, ops: int, timeout: float) -> dict[str, Any]:
    """Run the writers and the registry/dataset processes at once; check everything."""
    from reprise.core import create_workspace

    create_workspace(root)  # not opened here: this process reads the config below
    # a short flush interval: many ingestion transactions per run, not one at its end
    (root / ".reprise" / "config.toml").write_text(
        f'[store]\nurl = "{store_url}"\n\n[tracking]\nflush_interval = 0.05\n'
        'system_metrics_interval = 0\n')
    sync = root / "sync"
    sync.mkdir()
    roles = ([("w", i, _WRITER, points) for i in range(writers)]
             + [("r", i, _REGISTRY, ops) for i in range(registries)]
             + [("d", i, _DATASETS, ops) for i in range(datasets)])
    logs = root / "logs"
    logs.mkdir()
    procs: dict[str, subprocess.Popen[bytes]] = {}
    deadline = time.monotonic() + timeout
    try:
        for kind, i, script, n in roles:
            with open(logs / f"{kind}{i}.err", "wb") as err:
                procs[f"{kind}{i}"] = subprocess.Popen(
                    [sys.executable, "-c", script, str(root), str(i), str(n)],
                    env=_env(), cwd=ROOT, stdout=err, stderr=subprocess.STDOUT,
                    start_new_session=True)
        _wait(lambda: all((sync / f"ready.{k}").exists() for k in procs), procs, deadline, logs)
        start = time.monotonic()
        (sync / "go").touch()
        _wait(lambda: all(p.poll() is not None for p in procs.values()), procs, deadline, logs)
        wall = time.monotonic() - start
    finally:
        for p in procs.values():  # each in its own session: stop it and its children
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    for key, p in procs.items():
        text = (logs / f"{key}.err").read_text(errors="replace")
        assert p.returncode == 0, f"{key} exited {p.returncode}:\n{text[-3000:]}"
        bad = [w for w in _FORBIDDEN if w.lower() in text.lower()]
        assert not bad, f"{key} printed {bad}:\n{text[-3000:]}"
    return {"wall": wall, **_check(root, writers, points, registries, datasets, ops)}


def _wait(done: Any, procs: dict[str, subprocess.Popen[bytes]], deadline: float,
          logs: Path) -> None:
    while not done():
        failed = {k: p.returncode for k, p in procs.items() if p.poll() not in (None, 0)}
        if failed:
            key = next(iter(failed))
            text = (logs / f"{key}.err").read_text(errors="replace")
            pytest.fail(f"processes failed: {failed}; {key} wrote:\n{text[-3000:]}")
        assert time.monotonic() < deadline, "the load did not finish in time (a deadlock?)"
        time.sleep(0.02)


def _check(root: Path, writers: int, points: int, registries: int, datasets: int,
           ops: int) -> dict[str, Any]:
    from reprise.registry import verify_audit

    sync = root / "sync"
    ws = reprise.open_workspace(root)
    try:
        store = ws.metadata
        assert not list(ws.journals_dir.glob("*.jrnl")), "a journal was left un-archived"
        rates = []
        for i in range(writers):
            out = json.loads((sync / f"w{i}.json").read_text())
            run = store.get_run(out["run"])
            assert (run.name, run.status.value, run.params) == (
                f"load-{i}", "finished", {"writer": i})
            got = [(p.step, p.value) for p in store.get_metrics(run.id, "x")]
            want = [(st, i * 1e6 + st + 0.25) for st in range(points)]
            if got != want:
                missing = sorted(set(want) - set(got))[:5]
                extra = len(got) - len(set(got))
                pytest.fail(f"writer {i}: {len(got)} points stored of {points}; "
                            f"missing e.g. {missing}, duplicates {extra}")
            rates.append(points / out["seconds"])
        with store.engine.connect() as conn:
            import sqlalchemy as sa

            total = conn.execute(sa.text("SELECT COUNT(*) FROM metrics")).scalar()
        assert total == writers * points  # nothing extra anywhere (no run got twice)
        _check_versions(sync, "r", registries, ops,
                        [v.version for v in store.list_model_versions("model")])
        if registries:
            # every promotion is in the history, every third popped by its rollback
            assert len(store.alias_history("model", "production")) == \
                registries * (ops - ops // 3)
        _check_versions(sync, "d", datasets, ops,
                        [d.version for d in store.list_dataset_versions("data")])
        if registries:
            report = verify_audit(workspace=ws)
            assert report.ok, report
            assert len(store.list_audit_events()) == registries * (2 * ops + ops // 3)
        return {"writer_points_per_s": rates}
    finally:
        ws.close()


def _check_versions(sync: Path, kind: str, procs: int, ops: int, stored: list[int]) -> None:
    """Each process got increasing version numbers; together, 1..N once each."""
    every: list[int] = []
    for i in range(procs):
        versions = json.loads((sync / f"{kind}{i}.json").read_text())["versions"]
        assert len(versions) == ops and versions == sorted(set(versions)), versions
        every += versions
    assert sorted(every) == stored == list(range(1, procs * ops + 1))


@pytest.mark.postgres
def test_many_writers_small_postgresql(tmp_path: Path, pg_url: str) -> None:
    load(tmp_path / "ws", pg_url, writers=4, points=1000, registries=2, datasets=2, ops=3,
         timeout=120)


@pytest.mark.postgres
@pytest.mark.parametrize("isolation", [
    "serializable", pytest.param("repeatable read", marks=pytest.mark.reliability)])
def test_many_writers_on_a_server_defaulting_to_strict_isolation(
        tmp_path: Path, pg_url: str, isolation: str) -> None:
    """A DBA may set default_transaction_isolation; the store's locking needs READ
    COMMITTED (under SERIALIZABLE, concurrent registrations failed with "could not
    serialize access" before the store pinned its own level)."""
    import psycopg

    name = pg_url.rsplit("/", 1)[1]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"ALTER DATABASE \"{name}\" SET default_transaction_isolation = "
                     f"'{isolation}'")
    load(tmp_path / "ws", pg_url, writers=2, points=500, registries=2, datasets=2, ops=3,
         timeout=120)


@pytest.mark.postgres
@pytest.mark.parametrize("error", ["SerializationFailure", "DeadlockDetected",
                                   "LockNotAvailable"])
def test_contention_errors_are_retried_with_back_off(pg_url: str, error: str) -> None:
    import psycopg.errors
    from sqlalchemy.exc import IntegrityError, OperationalError

    from reprise.store import SqlMetadataStore

    store = SqlMetadataStore(pg_url)
    calls = []

    def flaky() -> str:
        calls.append(time.monotonic())
        if len(calls) < 4:
            raise OperationalError("UPDATE ...", {}, getattr(psycopg.errors, error)("boom"))
        return "done"

    try:
        assert store._retry(flaky) == "done"
        assert len(calls) == 4
        gaps = [b - a for a, b in zip(calls, calls[1:], strict=False)]
        assert gaps[-1] >= 0.04  # backs off (10 ms, doubling, with jitter)

        def broken() -> None:  # not contention: raised at once, never retried
            calls.append(0.0)
            raise IntegrityError("INSERT ...", {}, psycopg.errors.UniqueViolation("dup"))

        calls.clear()
        with pytest.raises(IntegrityError):
            store._retry(broken)
        assert len(calls) == 1
    finally:
        store.close()


def test_many_writers_small_sqlite(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'meta.db'}"
    load(tmp_path / "ws", url, writers=4, points=1000, registries=2, datasets=2, ops=3,
         timeout=120)


@pytest.mark.reliability
@pytest.mark.postgres
def test_many_writers_full_postgresql(tmp_path: Path, pg_url: str) -> None:
    out = load(tmp_path / "ws", pg_url, writers=16, points=10_000, registries=2, datasets=2,
               ops=12, timeout=600)
    print(f"16 writers x 10,000 points on PostgreSQL: {out['wall']:.1f} s")


@pytest.mark.reliability
def test_many_writers_full_sqlite(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'meta.db'}"
    out = load(tmp_path / "ws", url, writers=8, points=5_000, registries=2, datasets=2,
               ops=8, timeout=600)
    print(f"8 writers x 5,000 points on SQLite: {out['wall']:.1f} s")


def test_concurrent_bucket_flushes_lose_no_count(store_url: str) -> None:
    """Serving replicas flush outcome buckets at once, some under one server name (several
    workers of one host), some under their own: every count arrives, none twice."""
    import threading

    import sqlalchemy as sa

    from reprise.core._rollout_types import LATENCY_BOUNDS_MS, BucketRow
    from reprise.store import SqlMetadataStore
    from reprise.store import _schema as sch

    stores = [SqlMetadataStore(store_url) for _ in range(6)]
    now = time.time()
    with stores[0].engine.begin() as conn:
        conn.execute(sa.insert(sch.rollouts).values(
            id="r1", name="m", alias="production", stable=1, candidate=2, strategy="canary",
            steps="[0.1]", interval_s=60.0, policy="{}", key="{}", state="running", step=0,
            weight=0.1, phase="observe", step_started_at=now, created_at=now, failures=0,
            decisions=0, actor="test"))
    servers = ["shared", "shared", "shared", "own-3", "own-4", "own-5"]
    flushes, start = 25, threading.Barrier(len(stores))
    errors: list[BaseException] = []

    def flush(store: SqlMetadataStore, server: str) -> None:
        try:
            start.wait()
            for k in range(flushes):
                store.add_buckets([BucketRow("r1", 1 + k % 2, 7, server, 1, k % 2,
                                             [1] * (len(LATENCY_BOUNDS_MS) + 1), {"yes": 1})])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=flush, args=(st, sv))
               for st, sv in zip(stores, servers, strict=True)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=120)
    try:
        assert not errors, errors
        rows = {(r.server, r.version): r for r in stores[0].window_buckets("r1", 7, 7)}
        per = {1: (flushes + 1) // 2, 2: flushes // 2}  # flushes of each version
        for server in set(servers):
            n = servers.count(server)
            for version, count in per.items():
                r = rows[(server, version)]
                assert r.requests == n * count and r.outputs == {"yes": n * count}
                assert r.latency == [n * count] * (len(LATENCY_BOUNDS_MS) + 1)
                assert r.errors == (n * count if version == 2 else 0)
    finally:
        for st in stores:
            st.close()
