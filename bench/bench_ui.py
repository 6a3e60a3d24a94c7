"""The dashboard's API on a large workspace: Reprise's ``/api/runs`` (filter + sort + page,
pushed down into SQL) and one metric's 1 M-point series (downsampled in SQL), against
MLflow's ``search_runs`` and metric history on the same data, SQLite stores, same run.

The workspace: 10,000 runs (params lr, opt, batch; tag team; status), 10,000,000 metric
points: 450 points of ``acc`` and of ``loss`` for each run but one, and one run with
1,000,000 points of ``loss`` (and 450 of ``acc``). The rows are generated with bulk SQL
inserts (``executemany`` in one transaction), not through either tool's logging API, for
both tools alike: Reprise's metadata database through its own schema, MLflow's through
its schema (its tables created by MLflow; one run made through ``MlflowClient`` is the
template of every runs row), and each is then checked through the tool's own read API
(run count, the big series' length) so that a badly loaded store cannot win.

Reprise is timed through HTTP semantics in process (httpx's ASGI transport: routing,
validation, JSON), MLflow through ``MlflowClient`` in process (no HTTP at all: its figure
lacks the server's share). Each case: p50 and p95 of >= 20 requests after one warm-up.
The "before" figures are the same API with the store's SQL paths switched off (the
Python fallback this change keeps for stores that cannot search), fewer repeats.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import os
import random
import shutil
import sqlite3
import statistics
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from _common import WORK, finish

BIG_POINTS = 1_000_000
TEAMS = ("vision", "nlp", "speech", "rl")
OPTS = ("adam", "sgd", "adamw")


# -- the data, the same for both tools ------------------------------------------------
def runs_spec(n_runs: int, seed: int = 7) -> list[dict[str, Any]]:
    rnd = random.Random(seed)
    out = []
    t0 = 1.7e9
    for i in range(n_runs):
        started = t0 + i * 60.0
        out.append({
            "i": i, "name": f"run-{i % 97}", "started": started, "ended": started + 50.0,
            "status": "failed" if rnd.random() < 0.07 else "finished",
            "params": {"lr": round(10 ** rnd.uniform(-4, -1), 6), "opt": rnd.choice(OPTS),
                       "batch": rnd.choice((32, 64, 128, 256))},
            "tags": {"team": rnd.choice(TEAMS)},
            "acc": rnd.random(), "loss0": rnd.uniform(1.0, 3.0)})
    return out


def points(spec: dict[str, Any], key: str, n: int) -> Iterator[tuple[int, float, float]]:
    """(step, value, time) of one series: acc climbs to the run's final acc, loss decays
    with noise and a spike in the middle (what a min/max downsampler must keep)."""
    rnd = random.Random(spec["i"] * 2 + (key == "loss"))
    final, loss0, started = spec["acc"], spec["loss0"], spec["started"]
    for step in range(n):
        frac = (step + 1) / n
        if key == "acc":
            value = final if step == n - 1 else final * frac * (0.9 + 0.1 * rnd.random())
        else:
            value = loss0 / (1 + 20 * frac) + 0.05 * rnd.random()
            if step == n // 2:
                value = 25.0
        yield step, value, started + step * 0.01


def sizes(n_runs: int, total_points: int, big: int) -> int:
    """Points per key of every run but the big one."""
    return max(1, (total_points - big) // (2 * (n_runs - 1)))


# -- Reprise --------------------------------------------------------------------------
def load_reprise(root: Path, spec: list[dict[str, Any]], per_key: int, big: int) -> Any:
    import reprise

    if root.exists():
        shutil.rmtree(root)
    ws = reprise.init(root)
    db = ws.metadata.engine.url.database  # type: ignore[attr-defined]
    conn = sqlite3.connect(db)
    ids = []
    with conn:
        for r in spec:
            rid = f"{r['i']:08x}" + uuid.UUID(int=r["i"] + 1).hex[8:]
            ids.append(rid)
            conn.execute(
                "INSERT INTO runs (id, kind, name, status, started_at, ended_at, "
                "journal_offset) VALUES (?, 'run', ?, ?, ?, ?, 0)",
                (rid, r["name"], r["status"], r["started"], r["ended"]))
            conn.executemany("INSERT INTO params (run_id, key, value) VALUES (?, ?, ?)",
                             [(rid, k, _json(v)) for k, v in r["params"].items()])
            conn.executemany("INSERT INTO tags (run_id, key, value) VALUES (?, ?, ?)",
                             [(rid, k, v) for k, v in r["tags"].items()])
        for r, rid in zip(spec, ids, strict=True):
            for key in ("acc", "loss"):
                n = big if (r["i"] == 0 and key == "loss") else per_key
                conn.executemany(
                    "INSERT INTO metrics (run_id, key, step, value, timestamp) "
                    "VALUES (?, ?, ?, ?, ?)",
                    ((rid, key, st, v, ts) for st, v, ts in points(r, key, n)))
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # as a workspace in use would be
    conn.close()
    return ws, ids


def _json(v: Any) -> str:
    import json

    return json.dumps(v)


class Api:
    """GETs through httpx's ASGI transport, one event loop for all of them."""

    def __init__(self, app: Any) -> None:
        import httpx

        self.loop = asyncio.new_event_loop()
        self.client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                        base_url="http://bench", timeout=600)

    def get(self, path: str, **params: Any) -> Any:
        res = self.loop.run_until_complete(self.client.get(path, params=params))
        if res.status_code != 200:
            raise AssertionError(f"{path} {params}: {res.status_code} {res.text[:300]}")
        return res.json()

    def close(self) -> None:
        self.loop.run_until_complete(self.client.aclose())
        self.loop.close()


def timed(fn: Callable[[], Any], repeats: int) -> tuple[dict[str, float], Any]:
    """p50 / p95 / max milliseconds of ``fn`` after one warm-up call, and its last answer."""
    answer = fn()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        answer = fn()
        samples.append((time.perf_counter() - t0) * 1000)
    samples.sort()
    p95 = samples[min(len(samples) - 1, math.ceil(0.95 * len(samples)) - 1)]
    return {"p50_ms": statistics.median(samples), "p95_ms": p95, "max_ms": samples[-1],
            "n": len(samples)}, answer


# The cases: Reprise's query, sort and MLflow's equivalent (None: MLflow cannot say it,
# its params are strings compared with = != LIKE only).
CASES: dict[str, tuple[str | None, str, str | None, list[str]]] = {
    "acc_and_opt__sort_acc": ('metrics.acc > 0.5 and params.opt = "adam"', "-metrics.acc",
                              "metrics.acc > 0.5 and params.opt = 'adam'",
                              ["metrics.acc DESC"]),
    "status_and_team__sort_started": ('status = "finished" and tags.team = "vision"',
                                      "-started_at",
                                      "attributes.status = 'FINISHED' and tags.team = 'vision'",
                                      ["attributes.start_time DESC"]),
    "no_filter__sort_started": (None, "-started_at", "", ["attributes.start_time DESC"]),
    "acc_and_lr__sort_acc": ("metrics.acc > 0.5 and params.lr < 0.01", "-metrics.acc",
                             None, []),
}


def bench_reprise(ws: Any, big_id: str, repeats: int, before_repeats: int,
                  n_runs: int, big: int) -> dict[str, Any]:
    from reprise.ui import create_app

    api = Api(create_app(ws))
    out: dict[str, Any] = {}
    try:
        body = api.get("/api/runs", limit=1)
        if body["total"] != n_runs:
            raise AssertionError(f"reprise sees {body['total']} runs of {n_runs}")
        for name, (q, sort, _, _) in CASES.items():
            params = {"sort": sort, "limit": 100, **({"q": q} if q else {})}
            fig, ans = timed(lambda p=params: api.get("/api/runs", **p), repeats)  # type: ignore[misc]
            fig["total"] = ans["total"]
            out[f"runs_{name}"] = fig
        url = f"/api/runs/{big_id}/metrics/loss"
        fig, ans = timed(lambda: api.get(url), repeats)
        if ans["total_points"] != big or len(ans["xs"]) > 2000 or 25.0 not in ans["ys"]:
            raise AssertionError(f"reprise series: {ans['total_points']} points, "
                                 f"{len(ans['xs'])} kept, spike kept: {25.0 in ans['ys']}")
        out["series_downsampled"] = {**fig, "points_returned": len(ans["xs"])}
        mid = big // 2
        fig, ans = timed(lambda: api.get(url, start=mid, end=mid + 1999), repeats)
        if ans["downsampled"] or len(ans["xs"]) != 2000:
            raise AssertionError("reprise zoom is not at full resolution")
        out["series_zoom_2000_full_resolution"] = {**fig, "points_returned": len(ans["xs"])}
        # before: the same API with the store's SQL search and series switched off
        store = ws.metadata
        store.search_runs = lambda search: None
        store.metric_series = lambda *a, **k: None
        q, sort, _, _ = CASES["acc_and_lr__sort_acc"]
        fig, _ = timed(lambda: api.get("/api/runs", q=q, sort=sort, limit=100),
                       before_repeats)
        out["before_python_runs_acc_and_lr__sort_acc"] = fig
        fig, _ = timed(lambda: api.get(url), before_repeats)
        out["before_python_series_downsampled"] = fig
        del store.search_runs, store.metric_series
    finally:
        api.close()
    return out


# -- MLflow ---------------------------------------------------------------------------
def load_mlflow(root: Path, spec: list[dict[str, Any]], per_key: int, big: int) -> Any:
    warnings.filterwarnings("ignore")
    logging.getLogger("mlflow").setLevel(logging.ERROR)
    logging.getLogger("alembic").setLevel(logging.ERROR)
    import mlflow
    from mlflow.tracking import MlflowClient

    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    db = root / "mlflow.db"
    mlflow.set_tracking_uri(f"sqlite:///{db}")
    client = MlflowClient()
    exp = client.create_experiment("bench")
    template = client.create_run(exp)  # its runs row is the template of every row
    client.set_terminated(template.info.run_id)
    conn = sqlite3.connect(db)
    cols = [c[1] for c in conn.execute("PRAGMA table_info(runs)")]
    row = dict(zip(cols, conn.execute("SELECT * FROM runs WHERE run_uuid = ?",
                                      (template.info.run_id,)).fetchone(), strict=True))
    ids = []
    with conn:
        conn.execute("DELETE FROM tags WHERE run_uuid = ?", (template.info.run_id,))
        conn.execute("DELETE FROM runs WHERE run_uuid = ?", (template.info.run_id,))
        insert = (f"INSERT INTO runs ({', '.join(cols)}) "
                  f"VALUES ({', '.join('?' for _ in cols)})")
        for r in spec:
            rid = uuid.UUID(int=r["i"] + 1).hex
            ids.append(rid)
            vals = {**row, "run_uuid": rid, "name": r["name"],
                    "status": r["status"].upper(), "start_time": int(r["started"] * 1000),
                    "end_time": int(r["ended"] * 1000),
                    "artifact_uri": str(row["artifact_uri"]).replace(
                        template.info.run_id, rid)}
            conn.execute(insert, [vals[c] for c in cols])
            conn.executemany("INSERT INTO params (key, value, run_uuid) VALUES (?, ?, ?)",
                             [(k, str(v), rid) for k, v in r["params"].items()])
            conn.executemany("INSERT INTO tags (key, value, run_uuid) VALUES (?, ?, ?)",
                             [(k, v, rid) for k, v in r["tags"].items()]
                             + [("mlflow.runName", r["name"], rid)])
        for r, rid in zip(spec, ids, strict=True):
            for key in ("acc", "loss"):
                n = big if (r["i"] == 0 and key == "loss") else per_key
                last: tuple[Any, ...] = ()
                batch = []
                for st, v, ts in points(r, key, n):
                    last = (key, v, int(ts * 1000), st, 0, rid)
                    batch.append(last)
                    if len(batch) >= 100_000:
                        conn.executemany("INSERT INTO metrics (key, value, timestamp, step, "
                                         "is_nan, run_uuid) VALUES (?, ?, ?, ?, ?, ?)", batch)
                        batch = []
                conn.executemany("INSERT INTO metrics (key, value, timestamp, step, is_nan, "
                                 "run_uuid) VALUES (?, ?, ?, ?, ?, ?)", batch)
                conn.execute("INSERT INTO latest_metrics (key, value, timestamp, step, is_nan, "
                             "run_uuid) VALUES (?, ?, ?, ?, ?, ?)", last)
    conn.close()
    return client, exp, ids


def bench_mlflow(client: Any, exp: str, big_id: str, repeats: int, slow_repeats: int,
                 n_runs: int, big: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    every = client.search_runs([exp], max_results=50_000)
    if len(every) != n_runs:
        raise AssertionError(f"mlflow sees {len(every)} runs of {n_runs}")
    for name, (_, _, flt, order) in CASES.items():
        if flt is None:
            continue
        fig, ans = timed(lambda f=flt, o=order: client.search_runs(  # type: ignore[misc]
            [exp], filter_string=f, order_by=o, max_results=100), repeats)
        fig["returned"] = len(ans)
        out[f"search_runs_{name}"] = fig
    fig, hist = timed(lambda: client.get_metric_history(big_id, "loss"), slow_repeats)
    if len(hist) != big:
        raise AssertionError(f"mlflow history has {len(hist)} of {big} points")
    out["get_metric_history_full"] = {**fig, "points_returned": len(hist)}
    store = client._tracking_client.store
    fig, got = timed(lambda: store.get_metric_history_bulk_interval(
        [big_id], "loss", 2000, None, None), repeats)
    out["get_metric_history_bulk_interval_2000"] = {
        **fig, "points_returned": len(got), "spike_kept": any(m.value == 25.0 for m in got)}
    mid = big // 2
    fig, got = timed(lambda: store.get_metric_history_bulk_interval(
        [big_id], "loss", 2000, mid, mid + 1999), repeats)
    out["get_metric_history_bulk_interval_zoom_2000"] = {**fig, "points_returned": len(got)}
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--points", type=int, default=10_000_000, help="metric points in all")
    ap.add_argument("--big", type=int, default=BIG_POINTS, help="points of the big series")
    ap.add_argument("--repeats", type=int, default=25, help="requests per case (>= 20)")
    ap.add_argument("--before-repeats", type=int, default=3)
    ap.add_argument("--mlflow-points", type=int, default=None,
                    help="metric points in MLflow's store (default: --points)")
    ap.add_argument("--no-mlflow", action="store_true")
    ap.add_argument("--quick", action="store_true", help="small sizes, for a smoke test")
    args = ap.parse_args(argv)
    if args.quick:
        args.runs, args.points, args.big, args.repeats, args.before_repeats = (
            500, 200_000, 50_000, 5, 2)
    os.environ.pop("REPRISE_WORKSPACE", None)
    os.environ.pop("REPRISE_STORE_URL", None)
    work = WORK / "ui"
    spec = runs_spec(args.runs)
    load_before = os.getloadavg()[0]  # the machines are shared: say how busy this one was
    per_key = sizes(args.runs, args.points, args.big)
    total = per_key * 2 * (args.runs - 1) + per_key + args.big
    t0 = time.perf_counter()
    ws, rep_ids = load_reprise(work / "reprise", spec, per_key, args.big)
    load_reprise_s = time.perf_counter() - t0
    rep = bench_reprise(ws, rep_ids[0], args.repeats, args.before_repeats, args.runs, args.big)
    ws.close()
    ml: dict[str, Any] = {}
    load_mlflow_s = None
    ml_points = args.points if args.mlflow_points is None else args.mlflow_points
    ml_per_key = sizes(args.runs, ml_points, args.big)
    if not args.no_mlflow:
        t0 = time.perf_counter()
        client, exp, ml_ids = load_mlflow(work / "mlflow", spec, ml_per_key, args.big)
        load_mlflow_s = time.perf_counter() - t0
        ml = bench_mlflow(client, exp, ml_ids[0], args.repeats, max(2, args.before_repeats // 2),
                          args.runs, args.big)
    shutil.rmtree(work, ignore_errors=True)

    figures: dict[str, float] = {}
    for k, v in rep.items():
        figures[f"reprise_{k}_p50_ms"] = v["p50_ms"]
        figures[f"reprise_{k}_p95_ms"] = v["p95_ms"]
    for k, v in ml.items():
        figures[f"mlflow_{k}_p50_ms"] = v["p50_ms"]
        figures[f"mlflow_{k}_p95_ms"] = v["p95_ms"]
    ratios: dict[str, float] = {}
    for name in CASES:
        if f"search_runs_{name}" in ml:
            ratios[f"mlflow_over_reprise_runs_{name}_p50"] = (
                ml[f"search_runs_{name}"]["p50_ms"] / rep[f"runs_{name}"]["p50_ms"])
    if ml:
        series = rep["series_downsampled"]["p50_ms"]
        ratios["mlflow_history_over_reprise_series_p50"] = (
            ml["get_metric_history_full"]["p50_ms"] / series)
        ratios["mlflow_bulk_interval_over_reprise_series_p50"] = (
            ml["get_metric_history_bulk_interval_2000"]["p50_ms"] / series)
    ratios["before_over_after_runs_acc_and_lr_p50"] = (
        rep["before_python_runs_acc_and_lr__sort_acc"]["p50_ms"]
        / rep["runs_acc_and_lr__sort_acc"]["p50_ms"])
    ratios["before_over_after_series_p50"] = (
        rep["before_python_series_downsampled"]["p50_ms"]
        / rep["series_downsampled"]["p50_ms"])
    import mlflow

    result = {
        "figures": figures, "ratios": ratios, "reprise": rep, "mlflow": ml,
        "sizes": {"runs": args.runs, "metric_points": total, "points_per_key_per_run": per_key,
                  "big_series_points": args.big, "requests_per_case": args.repeats,
                  "before_requests": args.before_repeats,
                  "mlflow_metric_points": ml_per_key * 2 * (args.runs - 1) + ml_per_key
                  + args.big, "mlflow_scaled_down": ml_per_key != per_key},
        "load_average_1m": {"before": load_before, "after": os.getloadavg()[0]},
        "load_seconds": {"reprise_bulk_sql": load_reprise_s, "mlflow_bulk_sql": load_mlflow_s},
        "method": "both stores SQLite, filled by bulk SQL inserts (not the logging APIs); "
                  "Reprise through its HTTP API in process (httpx ASGI), MLflow through "
                  "MlflowClient in process; p50/p95 of the requests after one warm-up; "
                  "'before' = the same API with the store's SQL search and series off",
        "peer": f"mlflow {mlflow.__version__}",
        "goal": "runs API <= 200 ms p95 with a filter and a sort on 10,000 runs / 10 M "
                "points; the 1 M-point series downsampled (<= 2,000 points) well under 1 s"}
    return finish("ui", result, quick=args.quick, fmt=lambda k, v: f"{v:>14,.1f}")


if __name__ == "__main__":
    main()
