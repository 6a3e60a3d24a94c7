"""The measurements behind docs/scale.md: read latency as the metadata grows, on PostgreSQL.

A scratch database made by Reprise's own migrations is filled by ``COPY`` (psycopg 3)
with synthetic runs in steps (default 10^4, 10^5, 10^6 runs): half of them top-level
runs named ``train-0`` .. ``train-99``, half child runs (trials) of the run before
them; 4 % failed; two params and one tag (``team`` = one of 20
values) per run; a metric ``loss`` of 3 points per run, and one run with 100,000
points. At each size, after ``ANALYZE``, the real read paths are timed (median of
``--repeats`` after one warm-up) through a workspace whose store is that database:

- ``runs_list``: ``reprise runs list`` (``tracking._query.list_runs``: the newest 50
  top-level runs and their last metrics), and with ``--name``, ``--status failed``,
  ``--tag team=t3`` and ``--sort-metric loss``;
- ``runs_show``: ``reprise runs show PREFIX`` (``describe_run`` of a 10-character prefix);
- ``history_big`` / ``history_small``: ``get_metrics(run, "loss")`` of the run with
  100,000 points and of a 3-point run, among all the others;
- ``serving``: what R serving replicas (threads with a connection each) ask of the store
  during a rollout, each tick back to back (see :func:`serving`).

Every SQL statement a path sends is captured and the slowest is run again under
``EXPLAIN (ANALYZE, BUFFERS)``; the plan's scan nodes (which index, or a sequential
scan) go into ``bench/results/scale.json`` with the timings, the table sizes on disk
and the load time (COPY rate). A statement_timeout (``--timeout``, default 120 s)
bounds any query that grows with the table (recorded as a timeout).

    python bench/bench_scale.py [--quick] [--sizes 10000,100000,1000000]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

from _common import WORK, finish

PG_ADMIN = os.environ.get("REPRISE_BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
BIG_POINTS = 100_000


def _ids(start: int, count: int, t0_ms: int) -> list[str]:
    from reprise.core import new_id

    return [new_id(t0_ms + 10 * k) for k in range(start, start + count)]


def fill(url: str, start: int, stop: int, t0_ms: int, rng: random.Random) -> dict[str, float]:
    """COPY runs ``start`` .. ``stop`` (and their params, tags, metrics); seconds taken."""
    import psycopg

    ids = _ids(start, stop - start, t0_ms)
    now = time.time()
    t = time.perf_counter()
    with psycopg.connect(url) as conn, conn.cursor() as cur:
        cur.execute("SET statement_timeout = 0")
        with cur.copy("COPY runs (id, parent_id, kind, name, status, started_at, ended_at, "
                      "journal_offset) FROM STDIN") as cp:
            parent = None
            for k, rid in zip(range(start, stop), ids, strict=True):
                started = now - (stop - k)
                if k % 2 == 0:
                    parent, row_parent, name, kind = rid, None, f"train-{k % 200 // 2}", "run"
                else:
                    row_parent, name, kind = parent, "trial", "trial"
                status = "failed" if k % 50 in (7, 8) else "finished"  # 4 %, half top-level
                cp.write_row((rid, row_parent, kind, name, status, started, started + 1.0, 0))
        with cur.copy("COPY params (run_id, key, value) FROM STDIN") as cp:
            for rid in ids:
                cp.write_row((rid, "lr", repr(rng.choice((1e-3, 1e-2, 1e-1)))))
                cp.write_row((rid, "layers", str(rng.randint(1, 8))))
        with cur.copy("COPY tags (run_id, key, value) FROM STDIN") as cp:
            for k, rid in zip(range(start, stop), ids, strict=True):
                cp.write_row((rid, "team", f"t{k // 2 % 20}"))  # parent and child alike
        with cur.copy("COPY metrics (run_id, key, step, value, timestamp) FROM STDIN") as cp:
            for rid in ids:
                for step in range(3):
                    cp.write_row((rid, "loss", step, rng.random(), now))
        conn.commit()
    return {"seconds": time.perf_counter() - t, "runs": stop - start,
            "rows": (stop - start) * 7}


def add_big_run(url: str, t0_ms: int) -> str:
    import psycopg

    from reprise.core import new_id

    rid = new_id(t0_ms - 1000)
    now = time.time()
    with psycopg.connect(url) as conn, conn.cursor() as cur:
        cur.execute("INSERT INTO runs (id, kind, name, status, started_at, journal_offset) "
                    "VALUES (%s, 'run', 'big', 'finished', %s, 0)", (rid, now))
        with cur.copy("COPY metrics (run_id, key, step, value, timestamp) FROM STDIN") as cp:
            for step in range(BIG_POINTS):
                cp.write_row((rid, "loss", step, 1.0 / (step + 1), now))
        conn.commit()
    return rid


class Capture:
    """The SQL statements (and parameters) an engine sends while active."""

    def __init__(self, engine: Any) -> None:
        from sqlalchemy import event

        self.engine, self.statements = engine, []  # type: ignore[var-annotated]
        self.active = False
        event.listen(engine, "before_cursor_execute", self._on)

    def _on(self, conn: Any, cursor: Any, statement: str, parameters: Any, context: Any,
            executemany: bool) -> None:
        if self.active and statement.lstrip().upper().startswith(("SELECT", "WITH")):
            self.statements.append((statement, parameters))


def timed(fn: Any, repeats: int) -> dict[str, Any]:
    """Median ms of ``fn`` over ``repeats`` after one warm-up (a timeout is recorded)."""
    from sqlalchemy.exc import OperationalError

    try:
        t = time.perf_counter()
        fn()
        first = time.perf_counter() - t
    except OperationalError as exc:
        if "statement timeout" not in str(exc):
            raise
        return {"ms": None, "timeout": True}
    # a query that took seconds once is timed once more, not `repeats` times
    n = repeats if first < 2.0 else 1
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t) * 1000)
    return {"ms": statistics.median(samples), "samples_ms": samples}


def explain(engine: Any, statements: list[tuple[str, Any]]) -> dict[str, Any]:
    """EXPLAIN ANALYZE of every captured statement: its scan nodes and time; the plan
    of the slowest in full."""
    each: list[dict[str, Any]] = []
    slowest: list[str] = []
    with engine.connect() as conn:
        for stmt, params in statements:
            rows = conn.exec_driver_sql("EXPLAIN (ANALYZE, BUFFERS, FORMAT TEXT) " + stmt,
                                        params).all()
            plan = [r[0] for r in rows]
            ms = next((float(line.split(":")[1].split()[0]) for line in plan
                       if line.startswith("Execution Time")), 0.0)
            scans = sorted({line.strip().lstrip("->").strip().split("  (")[0]
                            for line in plan if "Scan" in line and "CTE" not in line
                            and "WorkTable" not in line})
            if not each or ms >= max(e["execution_ms"] for e in each):
                slowest = plan[:40]
            each.append({"execution_ms": ms, "scans": scans,
                         "statement": " ".join(stmt.split())[:300]})
    return {"statements": each, "slowest_plan": slowest,
            "execution_ms": sum(e["execution_ms"] for e in each)}


def measure(url: str, work: Path, big: str, small: str, repeats: int) -> dict[str, Any]:
    """Time every read path once the database holds the runs loaded so far."""
    from reprise.core import create_workspace
    from reprise.store import Workspace
    from reprise.tracking._query import describe_run, list_runs

    root = work / f"ws-{uuid.uuid4().hex[:6]}"
    create_workspace(root)
    (root / ".reprise" / "config.toml").write_text(f'[store]\nurl = "{url}"\n')
    ws = Workspace.open(root)
    store = ws.metadata
    cap = Capture(store.engine)
    paths = {
        "runs_list": lambda: list_runs(ws),
        "runs_list_name": lambda: list_runs(ws, name="train-7"),
        "runs_list_status_failed": lambda: list_runs(ws, status="failed"),
        "runs_list_tag": lambda: list_runs(ws, tags={"team": "t3"}),
        "runs_list_sort_metric": lambda: list_runs(ws, sort_metric="loss"),
        "runs_show_prefix": lambda: describe_run(ws, small[:10]),
        "history_big": lambda: store.get_metrics(big, "loss"),
        "history_small": lambda: store.get_metrics(small, "loss"),
    }
    out: dict[str, Any] = {}
    try:
        for name, fn in paths.items():
            res = timed(fn, repeats)
            if not res.get("timeout"):
                cap.statements, cap.active = [], True
                fn()
                cap.active = False
                res["explain"] = explain(store.engine, cap.statements)
            out[name] = res
            print(f"    {name:28s} {res['ms'] if res['ms'] is not None else 'timeout'}")
        rows = len(store.get_metrics(big, "loss"))
        if rows != BIG_POINTS:
            raise AssertionError(f"the big run has {rows} points, not {BIG_POINTS}")
    finally:
        ws.close()
    return out


def serving(url: str, replicas: list[int], seconds: float) -> dict[str, Any]:
    """What hundreds of serving replicas ask of the store during a rollout, scaled down.

    Each replica thread (its own engine and connection, as each server process has)
    repeats one rollout *tick* back to back: ``add_buckets`` (its outcome counts),
    ``acquire_lease("rollout:<id>")`` and ``get_rollout``. A real server ticks once a
    second, so the ticks/s sustained here is the number of replicas one rollout can
    have on this store before ticks queue; p50/p99 of a tick at each replica count.
    The lease must have exactly one holder throughout (its TTL outlasts the run).
    """
    import threading

    import sqlalchemy as sa

    from reprise.store import SqlMetadataStore
    from reprise.store import _schema as sch

    out: dict[str, Any] = {}
    for n in replicas:
        rid = uuid.uuid4().hex
        stores = [SqlMetadataStore(url) for _ in range(n)]
        now = time.time()
        with stores[0].engine.begin() as conn:
            conn.execute(sa.insert(sch.rollouts).values(
                id=rid, name="m", alias=f"prod-{rid[:6]}", stable=1, candidate=2,
                strategy="canary", steps="[0.1]", interval_s=60.0, policy="{}", key="{}",
                state="running", step=0, weight=0.1, phase="observe", step_started_at=now,
                created_at=now, failures=0, decisions=0, actor="bench"))
        ticks: list[list[float]] = [[] for _ in range(n)]
        won: list[set[str]] = [set() for _ in range(n)]
        start = threading.Barrier(n)

        threads = [threading.Thread(target=_replica, args=(stores[i], f"server-{i}", rid, i,
                                                           seconds, start, ticks[i], won[i]))
                   for i in range(n)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        for st in stores:
            st.close()
        holders = set().union(*won)
        if len(holders) != 1:
            raise AssertionError(f"the rollout lease had {len(holders)} holders: {holders}")
        every = sorted(x for xs in ticks for x in xs)
        out[str(n)] = {"ticks_per_s": len(every) / seconds,
                       "tick_p50_ms": 1000 * every[len(every) // 2],
                       "tick_p99_ms": 1000 * every[int(len(every) * 0.99)]}
        print(f"    {n:3d} replicas: {out[str(n)]}")
    return out


def _replica(store: Any, server: str, rid: str, i: int, seconds: float, start: Any,
             ticks: list[float], won: set[str]) -> None:
    """One serving replica's rollout ticks, back to back, for ``seconds``."""
    from reprise.core._rollout_types import LATENCY_BOUNDS_MS, BucketRow

    start.wait()
    stop = time.perf_counter() + seconds
    while (t := time.perf_counter()) < stop:
        bucket = int(time.time() // 10)
        store.add_buckets([BucketRow(rid, 1 + i % 2, bucket, server, 100, 1,
                                     [4] * (len(LATENCY_BOUNDS_MS) + 1),
                                     {"yes": 60, "no": 40})])
        if store.acquire_lease("rollout:" + rid, server, 3600.0, time.time()):
            won.add(server)
        store.get_rollout(rid)
        ticks.append(time.perf_counter() - t)


def table_sizes(url: str) -> dict[str, Any]:
    import psycopg

    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT relname, pg_total_relation_size(oid), reltuples::bigint FROM pg_class "
            "WHERE relname IN ('runs', 'params', 'tags', 'metrics')").fetchall()
    return {name: {"bytes": size, "rows_estimate": n} for name, size, n in rows}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=120.0, help="statement_timeout, s")
    ap.add_argument("--quick", action="store_true", help="10^3 and 10^4 runs, no result file")
    ap.add_argument("--keep", action="store_true", help="keep the scratch database")
    ap.add_argument("--replicas", default="1,8,32", help="serving replicas (threads)")
    ap.add_argument("--replica-seconds", type=float, default=10.0)
    args = ap.parse_args(argv)
    if args.quick:
        args.sizes, args.repeats, args.replicas, args.replica_seconds = "1000,10000", 3, "1,4", 2
    sizes = [int(s) for s in args.sizes.split(",")]
    import psycopg

    from reprise.store import SqlMetadataStore

    name = f"reprise_scale_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
        conn.execute(f"ALTER DATABASE \"{name}\" SET statement_timeout = "
                     f"'{int(args.timeout * 1000)}'")
    url = f"{PG_ADMIN.rsplit('/', 1)[0]}/{name}"
    work = WORK / "scale"
    work.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()
    rng = random.Random(0)
    t0_ms = int(time.time() * 1000) - 10 * sizes[-1] - 60_000
    steps: list[dict[str, Any]] = []
    try:
        SqlMetadataStore(url).close()  # the schema, by the migrations
        big = add_big_run(url, t0_ms)
        loaded = 0
        for size in sizes:
            print(f"  loading to {size:,} runs ...")
            filled = fill(url, loaded, size, t0_ms, rng)
            loaded = size
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("SET statement_timeout = 0")
                conn.execute("VACUUM ANALYZE")
            small = _ids(size - 3, 1, t0_ms)[0][:10]  # an id prefix of a recent child run
            with psycopg.connect(url) as conn:
                small = conn.execute("SELECT id FROM runs WHERE id LIKE %s",
                                     (small + "%",)).fetchone()[0]
            print(f"  {size:,} runs loaded in {filled['seconds']:.1f} s; timing")
            steps.append({"runs": size, "load": filled, "tables": table_sizes(url),
                          "queries": measure(url, work, big, small, args.repeats)})
        print("  serving replicas during a rollout ...")
        replicas = serving(url, [int(n) for n in args.replicas.split(",")],
                           args.replica_seconds)
    finally:
        if not args.keep:
            with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    figures: dict[str, float] = {}
    for st in steps:
        for q, res in st["queries"].items():
            if res["ms"] is not None:
                figures[f"{q}_ms_at_{st['runs']}"] = res["ms"]
    ratios: dict[str, float] = {}
    first, last = steps[0], steps[-1]
    for q, res in last["queries"].items():
        a = first["queries"][q]["ms"]
        if res["ms"] is not None and a:
            ratios[f"{q}_growth_{first['runs']}_to_{last['runs']}"] = res["ms"] / a
    with psycopg.connect(PG_ADMIN) as conn:
        server = conn.execute("SHOW server_version").fetchone()[0]
    for n, res in replicas.items():
        figures[f"rollout_ticks_per_s_{n}_replicas"] = res["ticks_per_s"]
        figures[f"rollout_tick_p99_ms_{n}_replicas"] = res["tick_p99_ms"]
    result = {"figures": figures, "ratios": ratios, "steps": steps, "repeats": args.repeats,
              "serving": replicas, "replica_seconds": args.replica_seconds,
              "postgresql": server, "big_run_points": BIG_POINTS,
              "load_average_before": load_before, "load_average_after": os.getloadavg(),
              "peer": "none (the growth curve is the measure)"}
    return finish("scale", result, quick=args.quick, fmt=lambda k, v: f"{v:>14,.2f}")


if __name__ == "__main__":
    main()
