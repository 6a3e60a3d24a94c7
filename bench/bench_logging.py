"""Metric logging throughput: Reprise vs MLflow (per-call ``log_metric`` and
``log_batch``), both on an SQLite store, in the same run.

Reprise's figure is the rate at which ``log_metric`` calls return (each point is
then in the run's journal and survives a SIGKILL); the end-to-end figure adds
ending the run, which ingests every point into SQLite. Every point is counted
back from each store afterwards, so a tool that drops points cannot win.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import time
import warnings
from pathlib import Path
from typing import Any

from _common import WORK, finish


def reprise_log(root: Path, n: int) -> dict[str, float]:
    import reprise
    from reprise.store import Workspace

    if root.exists():
        shutil.rmtree(root)
    ws = reprise.init(root)
    t0 = time.perf_counter()
    with reprise.start_run(name="bench", workspace=ws, system_metrics_interval=0) as run:
        t_start = time.perf_counter()
        log = run.log_metric
        for i in range(n):
            log("loss", 1.0 / (i + 1), step=i)
        t_logged = time.perf_counter()
    t_end = time.perf_counter()
    stored = len(Workspace.open(root).metadata.get_metrics(run.id, "loss"))
    if stored != n:
        raise AssertionError(f"reprise stored {stored} of {n} points")
    return {"calls_s": t_logged - t_start, "end_to_end_s": t_end - t0}


def mlflow_setup(root: Path) -> Any:
    warnings.filterwarnings("ignore")
    logging.getLogger("mlflow").setLevel(logging.ERROR)
    import mlflow

    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    mlflow.set_tracking_uri(f"sqlite:///{root / 'mlflow.db'}")
    mlflow.set_experiment("bench")
    return mlflow


def mlflow_log_metric(root: Path, n: int) -> float:
    mlflow = mlflow_setup(root)
    with mlflow.start_run() as run:
        t0 = time.perf_counter()
        for i in range(n):
            mlflow.log_metric("loss", 1.0 / (i + 1), step=i)
        dt = time.perf_counter() - t0
    _check_mlflow(mlflow, run.info.run_id, n)
    return dt


def mlflow_log_batch(root: Path, n: int, batch: int = 1000) -> float:
    mlflow = mlflow_setup(root)
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    client = MlflowClient()
    with mlflow.start_run() as run:
        rid = run.info.run_id
        t0 = time.perf_counter()
        for start in range(0, n, batch):
            ts = int(time.time() * 1000)
            client.log_batch(rid, metrics=[Metric("loss", 1.0 / (i + 1), ts, i)
                                           for i in range(start, min(n, start + batch))])
        dt = time.perf_counter() - t0
    _check_mlflow(mlflow, rid, n)
    return dt


def _check_mlflow(mlflow: Any, run_id: str, n: int) -> None:
    from mlflow.tracking import MlflowClient

    got = len(MlflowClient().get_metric_history(run_id, "loss"))
    if got != n:
        raise AssertionError(f"mlflow stored {got} of {n} points")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--points", type=int, default=200_000, help="points per Reprise run")
    ap.add_argument("--mlflow-points", type=int, default=500, help="points per log_metric run")
    ap.add_argument("--batch-points", type=int, default=20_000, help="points per log_batch run")
    ap.add_argument("--quick", action="store_true", help="small sizes, for a smoke test")
    args = ap.parse_args(argv)
    if args.quick:
        args.repeats, args.points, args.mlflow_points, args.batch_points = 1, 20_000, 50, 2_000
    work = WORK / "logging"
    os.environ.pop("REPRISE_WORKSPACE", None)

    rep_calls, rep_e2e, ml_metric, ml_batch = [], [], [], []
    for r in range(args.repeats):  # interleave the tools so drift hits both alike
        res = reprise_log(work / f"reprise-{r}", args.points)
        rep_calls.append(args.points / res["calls_s"])
        rep_e2e.append(args.points / res["end_to_end_s"])
        ml_metric.append(args.mlflow_points / mlflow_log_metric(work / f"mlm-{r}",
                                                                args.mlflow_points))
        ml_batch.append(args.batch_points / mlflow_log_batch(work / f"mlb-{r}",
                                                             args.batch_points))
    shutil.rmtree(work, ignore_errors=True)
    med = statistics.median
    figures = {
        "reprise_log_metric_points_per_s": med(rep_calls),
        "reprise_end_to_end_points_per_s": med(rep_e2e),
        "mlflow_log_metric_points_per_s": med(ml_metric),
        "mlflow_log_batch_points_per_s": med(ml_batch),
    }
    ratios = {
        "reprise_vs_mlflow_log_metric": figures["reprise_log_metric_points_per_s"]
        / figures["mlflow_log_metric_points_per_s"],
        "reprise_vs_mlflow_log_batch": figures["reprise_log_metric_points_per_s"]
        / figures["mlflow_log_batch_points_per_s"],
        "reprise_end_to_end_vs_mlflow_log_batch": figures["reprise_end_to_end_points_per_s"]
        / figures["mlflow_log_batch_points_per_s"],
    }
    import mlflow

    result = {"figures": figures, "ratios": ratios, "repeats": args.repeats,
              "samples": {"reprise_calls": rep_calls, "reprise_e2e": rep_e2e,
                          "mlflow_log_metric": ml_metric, "mlflow_log_batch": ml_batch},
              "sizes": {"reprise": args.points, "mlflow_log_metric": args.mlflow_points,
                        "mlflow_log_batch": args.batch_points},
              "peer": f"mlflow {mlflow.__version__}", "goal": "reprise >= 100,000 points/s"}
    return finish("logging", result, quick=args.quick, fmt=lambda k, v: f"{v:>14,.0f}")


if __name__ == "__main__":
    main()
