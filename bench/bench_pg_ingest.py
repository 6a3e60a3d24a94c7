"""Metric ingestion by writer count on PostgreSQL: Reprise vs MLflow's tracking store.

W processes (1, 4, 16) each log P points of one key at once. Reprise: ``start_run`` /
``log_metric`` through the journal, ingested into the database by the run's flusher and
at the run's end (the figure counts until every run has ended, so every point is in the
database). MLflow: ``MlflowClient(tracking_uri="postgresql+psycopg://...")``, a run per
process, ``log_batch`` of 1,000 points (MLflow's per-call limit), then
``set_terminated``. Same PostgreSQL server, one scratch database per tool (made fresh
for each writer count), processes started and imported before the clock starts (a
"go" file), points/s = W * P / (last writer done - go). Every point is counted back
from each store afterwards. Reprise on SQLite is measured too, for contrast (one
file, writers serialised by its lock). ``store_ingest``: the database side alone, one
batch of 10 x P points through ``SqlMetadataStore.ingest`` (COPY on PostgreSQL). MLflow is given ``postgresql+psycopg://``
because psycopg2, its default driver, is not installed here.

    python bench/bench_pg_ingest.py [--quick] [--points N] [--writers 1,4,16]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from _common import WORK, finish

ROOT = Path(__file__).resolve().parents[1]
PG_ADMIN = os.environ.get("REPRISE_BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")

_REPRISE = '''
import json, sys, time
from pathlib import Path
import reprise
root, sync, i, points = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
ws = reprise.open_workspace(root)
ws.metadata  # connect (and recover) before the clock starts, as a long-lived trainer has
from reprise.tracking._api import environment
environment(ws)  # the environment fingerprint: computed once per process, not ingestion
(sync / f"ready.{i}").touch()
while not (sync / "go").exists():
    time.sleep(0.001)
with reprise.start_run(f"w{i}", workspace=ws) as run:
    log = run.log_metric
    for step in range(points):
        log("loss", 1.0 / (step + 1), step=step)
(sync / f"done.{i}").write_text(json.dumps({"t": time.time(), "run": run.id}))
'''

_MLFLOW = '''
import json, logging, sys, time, warnings
from pathlib import Path
warnings.filterwarnings("ignore")
logging.getLogger("mlflow").setLevel(logging.ERROR)
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient
url, sync, i, points = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
client = MlflowClient(tracking_uri=url)
exp = client.get_experiment_by_name("bench").experiment_id
(sync / f"ready.{i}").touch()
while not (sync / "go").exists():
    time.sleep(0.001)
run = client.create_run(exp, run_name=f"w{i}")
rid = run.info.run_id
for start in range(0, points, 1000):
    ts = int(time.time() * 1000)
    client.log_batch(rid, metrics=[Metric("loss", 1.0 / (s + 1), ts, s)
                                   for s in range(start, min(points, start + 1000))])
client.set_terminated(rid)
(sync / f"done.{i}").write_text(json.dumps({"t": time.time(), "run": rid}))
'''


def _env() -> dict[str, str]:
    path = os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    for var in ("REPRISE_WORKSPACE", "REPRISE_STORE_URL", "REPRISE_ARTIFACTS_URL"):
        env.pop(var, None)
    return env


def _pg_db() -> str:
    import psycopg

    name = f"reprise_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return f"{PG_ADMIN.rsplit('/', 1)[0]}/{name}"


def _drop_db(url: str) -> None:
    import psycopg

    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{url.rsplit("/", 1)[1]}" WITH (FORCE)')


def _race(argv_of: list[list[str]], sync: Path, timeout: float = 900) -> list[dict[str, Any]]:
    """Start the writers, wait until all are ready, say go; their done records."""
    sync.mkdir(parents=True)
    procs = [subprocess.Popen(argv, env=_env(), cwd=ROOT, stderr=subprocess.PIPE,
                              start_new_session=True) for argv in argv_of]
    deadline = time.monotonic() + timeout
    try:
        n = len(procs)
        while not all((sync / f"ready.{i}").exists() for i in range(n)):
            _check_alive(procs, deadline)
            time.sleep(0.01)
        go = time.time()
        (sync / "go").touch()
        while not all((sync / f"done.{i}").exists() for i in range(n)):
            _check_alive(procs, deadline)
            time.sleep(0.002)
        for p in procs:
            p.wait(timeout=60)
        done = [json.loads((sync / f"done.{i}").read_text()) for i in range(n)]
        for d in done:
            d["seconds"] = d["t"] - go
        return done
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait()


def _check_alive(procs: list[subprocess.Popen[bytes]], deadline: float) -> None:
    for p in procs:
        if p.poll() not in (None, 0):
            err = p.stderr.read().decode(errors="replace") if p.stderr else ""
            raise RuntimeError(f"a writer exited {p.returncode}:\n{err[-3000:]}")
    if time.monotonic() > deadline:
        raise RuntimeError("the writers did not finish in time")


def reprise_round(store_url: str, work: Path, writers: int, points: int) -> float:
    """Points/s of ``writers`` Reprise processes on ``store_url``; every point checked."""
    from reprise.core import create_workspace
    from reprise.store import SqlMetadataStore

    if work.exists():
        shutil.rmtree(work)
    root = work / "ws"
    create_workspace(root)
    (root / ".reprise" / "config.toml").write_text(
        f'[store]\nurl = "{store_url}"\n\n[tracking]\nsystem_metrics_interval = 0\n')
    argv = [[sys.executable, "-c", _REPRISE, str(root), str(work / "sync"), str(i),
             str(points)] for i in range(writers)]
    done = _race(argv, work / "sync")
    store = SqlMetadataStore(store_url)
    try:
        for d in done:
            got = len(store.get_metrics(d["run"], "loss"))
            if got != points:
                raise AssertionError(f"reprise stored {got} of {points} points")
    finally:
        store.close()
    return writers * points / max(d["seconds"] for d in done)


def mlflow_round(url: str, work: Path, writers: int, points: int) -> float:
    from mlflow.tracking import MlflowClient

    if work.exists():
        shutil.rmtree(work)
    argv = [[sys.executable, "-c", _MLFLOW, url, str(work / "sync"), str(i), str(points)]
            for i in range(writers)]
    done = _race(argv, work / "sync")
    client = MlflowClient(tracking_uri=url)
    for d in done:
        got = len(client.get_metric_history(d["run"], "loss"))
        if got != points:
            raise AssertionError(f"mlflow stored {got} of {points} points")
    return writers * points / max(d["seconds"] for d in done)


def store_ingest(url: str, points: int) -> float:
    """Points/s of ``SqlMetadataStore.ingest`` of one batch of ``points`` (the database
    side of ingestion alone: no journal file, no tracking process)."""
    from reprise.core import new_id
    from reprise.store import JournalBatch, SqlMetadataStore

    store = SqlMetadataStore(url)
    try:
        rid = new_id()
        store.ingest(rid, 0, JournalBatch(header={"id": rid, "name": "b", "started_at": 1.0},
                                          end_offset=1))
        now = time.time()
        batch = JournalBatch(metrics=[("loss", i, 1.0 / (i + 1), now) for i in range(points)],
                             end_offset=2)
        t = time.perf_counter()
        if not store.ingest(rid, 1, batch):
            raise AssertionError("the batch was not applied")
        dt = time.perf_counter() - t
        if len(store.get_metrics(rid, "loss")) != points:
            raise AssertionError("points missing after ingest")
        return points / dt
    finally:
        store.close()


def _mlflow_db() -> str:
    """A scratch database with MLflow's schema (its migrations run once, here)."""
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.getLogger("mlflow").setLevel(logging.ERROR)
    logging.getLogger("alembic").setLevel(logging.ERROR)
    from mlflow.tracking import MlflowClient

    url = _pg_db().replace("postgresql://", "postgresql+psycopg://", 1)
    MlflowClient(tracking_uri=url).create_experiment("bench")
    return url


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--points", type=int, default=20_000, help="points per writer")
    ap.add_argument("--writers", default="1,4,16")
    ap.add_argument("--no-mlflow", action="store_true")
    ap.add_argument("--quick", action="store_true", help="small sizes, no result file")
    ap.add_argument("--write", action="store_true",
                    help="write the result file even with --quick (a smoke run, marked)")
    args = ap.parse_args(argv)
    # A bench stopped by SIGTERM (kill, a CI timeout) stops its writers too: they run in
    # sessions of their own, so only _race's `finally` reaches them, which SIGTERM's
    # default action skips (16 writers outlived a killed run, spinning on their "go" file)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.quick:
        args.repeats, args.points = 1, 2_000
    counts = [int(w) for w in args.writers.split(",")]
    work = WORK / "pg_ingest"
    samples: dict[str, list[float]] = {}
    load_before = os.getloadavg()
    direct = []
    for _ in range(args.repeats):
        pg = _pg_db()
        try:
            direct.append(store_ingest(pg, 10 * args.points))
        finally:
            _drop_db(pg)
    samples["store_ingest"] = direct
    for w in counts:
        for r in range(args.repeats):  # tools interleaved so drift hits all alike
            pg = _pg_db()
            try:
                samples.setdefault(f"reprise_pg_{w}", []).append(
                    reprise_round(pg, work / "rp", w, args.points))
            finally:
                _drop_db(pg)
            sqlite = f"sqlite:///{work / 'sqlite' / 'meta.db'}"
            shutil.rmtree(work / "sqlite", ignore_errors=True)
            samples.setdefault(f"reprise_sqlite_{w}", []).append(
                reprise_round(sqlite, work / "rs", w, args.points))
            if not args.no_mlflow:
                ml = _mlflow_db()
                try:
                    samples.setdefault(f"mlflow_pg_{w}", []).append(
                        mlflow_round(ml, work / "ml", w, args.points))
                finally:
                    _drop_db(ml)
            print(f"  writers={w} repeat={r}: " + ", ".join(
                f"{k}={v[-1]:,.0f}" for k, v in samples.items() if k.endswith(f"_{w}")))
    shutil.rmtree(work, ignore_errors=True)
    figures = {f"{k}_points_per_s": statistics.median(v) for k, v in samples.items()}
    # store_ingest_points_per_s: one batch of 10 x points through SqlMetadataStore.ingest
    ratios: dict[str, float] = {}
    for w in counts:
        if not args.no_mlflow:
            ratios[f"reprise_vs_mlflow_pg_{w}_writers"] = (
                figures[f"reprise_pg_{w}_points_per_s"] / figures[f"mlflow_pg_{w}_points_per_s"])
        ratios[f"reprise_pg_vs_sqlite_{w}_writers"] = (
            figures[f"reprise_pg_{w}_points_per_s"] / figures[f"reprise_sqlite_{w}_points_per_s"])
        if w != counts[0]:
            ratios[f"reprise_pg_scaling_{w}_vs_{counts[0]}_writers"] = (
                figures[f"reprise_pg_{w}_points_per_s"]
                / figures[f"reprise_pg_{counts[0]}_points_per_s"])
    import mlflow

    result = {"figures": figures, "ratios": ratios, "repeats": args.repeats,
              "samples": samples, "points_per_writer": args.points, "writers": counts,
              "peer": f"mlflow {mlflow.__version__} (SqlAlchemyStore, log_batch of 1,000)",
              "load_average_before": load_before, "load_average_after": os.getloadavg(),
              "smoke_run": bool(args.quick)}
    return finish("pg_ingest", result, quick=args.quick and not args.write,
                  fmt=lambda k, v: f"{v:>14,.0f}")


if __name__ == "__main__":
    main()
