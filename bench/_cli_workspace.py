"""A large workspace for the CLI benchmark: 10,000 runs and 10 million metric points.

Built once and cached under ``bench/.work/cli-<sizes>/``. The database is created
by Reprise itself (``reprise.init`` and the Alembic migrations), so its tables and
indices are the real ones; the rows are then bulk-inserted with ``sqlite3``
(the tracking API would take hours for 10 M points). The metrics index is dropped
during the insert and re-created from the exact DDL the migration wrote.

The MLflow peer store holds the same runs, params, tags and metric points, written
the same way into a database created by MLflow's own migrations.
"""

from __future__ import annotations

import json
import random
import shutil
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

KEYS = ("train/loss", "train/acc", "val/loss", "val/acc", "lr")
NAMES = [f"experiment-{i:02d}" for i in range(20)]
_VERSION = 1  # bump when the generated content changes


def workspace(root: Path, runs: int, points: int) -> Path:
    """The cached workspace folder (created on the first call)."""
    folder = root / f"cli-{runs}-{points}"
    marker = folder / "reprise.done"
    if marker.exists() and marker.read_text() == str(_VERSION):
        return folder / "reprise"
    shutil.rmtree(folder / "reprise", ignore_errors=True)
    t0 = time.perf_counter()
    _build_reprise(folder / "reprise", runs, points)
    folder.mkdir(parents=True, exist_ok=True)
    marker.write_text(str(_VERSION))
    print(f"   generated the Reprise workspace in {time.perf_counter() - t0:.0f} s")
    return folder / "reprise"


def mlflow_store(root: Path, runs: int, points: int) -> Path:
    """The cached MLflow store folder holding ``mlflow.db`` (created on the first call)."""
    folder = root / f"cli-{runs}-{points}"
    marker = folder / "mlflow.done"
    if marker.exists() and marker.read_text() == str(_VERSION):
        return folder / "mlflow"
    shutil.rmtree(folder / "mlflow", ignore_errors=True)
    t0 = time.perf_counter()
    _build_mlflow(folder / "mlflow", runs, points)
    marker.write_text(str(_VERSION))
    print(f"   generated the MLflow store in {time.perf_counter() - t0:.0f} s")
    return folder / "mlflow"


def _plan(runs: int, points: int) -> Iterator[dict[str, Any]]:
    """The runs, oldest first: every fifth is a nested trial of the run before it."""
    from reprise.core._ids import new_id

    rng = random.Random(13)
    steps = max(1, points // (runs * len(KEYS)))
    start = time.time() - runs * 60.0
    parent: str | None = None
    for i in range(runs):
        t = start + i * 60.0
        rid = new_id(int(t * 1000))
        child = i % 5 != 0 and parent is not None
        yield {"id": rid, "parent_id": parent if child else None, "name": NAMES[i % 20],
               "kind": "trial" if child else "run",
               "status": "failed" if rng.random() < 0.05 else "finished",
               "started_at": t, "ended_at": t + rng.uniform(5, 50), "seed": i,
               "params": {"lr": rng.choice([1e-2, 1e-3, 3e-4]), "batch": 256,
                          "layers": rng.randint(1, 4), "opt": "adam", "wd": 1e-4},
               "tags": {"team": f"t{i % 3}", "git": "main"}, "steps": steps}
        if not child:
            parent = rid


def _metric_rows(run: dict[str, Any]) -> Iterator[tuple[Any, ...]]:
    t = run["started_at"]
    for key in KEYS:
        for s in range(run["steps"]):
            yield run["id"], key, s, 1.0 / (s + 1) if "loss" in key else s / run["steps"], t + s


def _build_reprise(root: Path, runs: int, points: int) -> None:
    import reprise

    root.mkdir(parents=True, exist_ok=True)
    ws = reprise.init(root)
    _ = ws.metadata  # runs the real migrations
    db = ws.config.store_url.removeprefix("sqlite:///")
    ws.close()
    con = sqlite3.connect(db)
    (ddl,) = con.execute("SELECT sql FROM sqlite_master WHERE name='ix_metrics_run_key_step'"
                         ).fetchone()
    con.execute("DROP INDEX ix_metrics_run_key_step")
    plan = list(_plan(runs, points))
    con.execute("INSERT INTO environments VALUES ('e' || hex(randomblob(31)), '{}', 0)")
    env = con.execute("SELECT hash FROM environments").fetchone()[0]
    con.executemany(
        "INSERT INTO runs (id, parent_id, kind, name, status, started_at, ended_at, seed, "
        "env_hash, host, user, journal_offset) VALUES (?,?,?,?,?,?,?,?,?,'bench','bench',0)",
        [(r["id"], r["parent_id"], r["kind"], r["name"], r["status"], r["started_at"],
          r["ended_at"], r["seed"], env) for r in plan])
    con.executemany("INSERT INTO params VALUES (?,?,?)",
                    [(r["id"], k, json.dumps(v)) for r in plan for k, v in r["params"].items()])
    con.executemany("INSERT INTO tags VALUES (?,?,?)",
                    [(r["id"], k, v) for r in plan for k, v in r["tags"].items()])
    con.executemany("INSERT INTO metrics (run_id, key, step, value, timestamp) "
                    "VALUES (?,?,?,?,?)", (row for r in plan for row in _metric_rows(r)))
    con.execute(ddl)
    _registry_rows(con, [r["id"] for r in plan if r["parent_id"] is None])
    con.commit()
    con.close()


def _registry_rows(con: sqlite3.Connection, run_ids: list[str]) -> None:
    """20 datasets of 5 versions with 20-column profiles; 10 models of 10 versions."""
    now = time.time()
    profile = json.dumps({"rows": 100000, "columns": {
        f"c{i}": {"type": "float", "nulls": 0, "min": 0.0, "max": 1.0, "mean": 0.5}
        for i in range(20)}})
    for n in range(20):
        for v in range(1, 6):
            h = f"{n:032x}{v:032x}"
            con.execute("INSERT INTO artifacts VALUES (?, 1000, 'table', 'parquet', '{}', ?)",
                        (h, now))
            con.execute("INSERT INTO datasets (name, version, artifact_hash, schema, profile, "
                        "created_at, format, rows, meta) VALUES (?,?,?,NULL,?,?, 'parquet', "
                        "100000, ?)", (f"data-{n:02d}", v, h, profile, now + v,
                                       json.dumps({"size": 1000 * v})))
    for n in range(10):
        con.execute("INSERT INTO models VALUES (?, NULL, ?)", (f"model-{n}", now))
        for v in range(1, 11):
            h = f"{n + 100:032x}{v:032x}"
            con.execute("INSERT INTO artifacts VALUES (?, 1000, 'package', 'pkg', '{}', ?)",
                        (h, now))
            con.execute("INSERT INTO model_versions VALUES (?,?,?,?,NULL,?, 'ready', ?, '{}')",
                        (f"model-{n}", v, run_ids[(n * 10 + v) % len(run_ids)], h,
                         json.dumps({"gates_passed": True, "task": "classification"}), now + v))
        con.execute("INSERT INTO aliases VALUES (?, 'production', 9, ?)", (f"model-{n}", now))


def _build_mlflow(root: Path, runs: int, points: int) -> None:
    """The same runs in MLflow's schema (created by MLflow's own migrations), with its
    ``latest_metrics`` table filled as MLflow's logging would."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    root.mkdir(parents=True, exist_ok=True)
    db = root / "mlflow.db"
    SqlAlchemyStore(f"sqlite:///{db}", str(root / "artifacts"))
    con = sqlite3.connect(db)
    plan = list(_plan(runs, points))
    con.executemany(
        "INSERT INTO runs (run_uuid, name, source_type, source_name, entry_point_name, "
        "user_id, status, start_time, end_time, source_version, lifecycle_stage, "
        "artifact_uri, experiment_id) VALUES (?,?,'LOCAL','bench','','bench',?,?,?,'',"
        "'active',?,0)",
        [(r["id"], r["name"], r["status"].upper(), int(r["started_at"] * 1000),
          int(r["ended_at"] * 1000), str(root / "artifacts" / r["id"])) for r in plan])
    con.executemany("INSERT INTO params VALUES (?,?,?)",
                    [(k, json.dumps(v), r["id"]) for r in plan for k, v in r["params"].items()])
    con.executemany("INSERT INTO tags VALUES (?,?,?)",
                    [(k, v, r["id"]) for r in plan for k, v in r["tags"].items()]
                    + [("mlflow.parentRunId", r["parent_id"], r["id"]) for r in plan
                       if r["parent_id"]])
    con.executemany("INSERT INTO metrics (key, value, timestamp, run_uuid, step, is_nan) "
                    "VALUES (?,?,?,?,?,0)",
                    ((k, v, int(t * 1000), rid, s) for r in plan
                     for rid, k, s, v, t in _metric_rows(r)))
    con.executemany("INSERT INTO latest_metrics (key, value, timestamp, step, is_nan, "
                    "run_uuid) VALUES (?,?,?,?,0,?)",
                    [(k, v, int(t * 1000), s, rid) for r in plan
                     for rid, k, s, v, t in list(_metric_rows(r))[r["steps"] - 1::r["steps"]]])
    con.commit()
    con.close()
