"""Read-only CLI commands on a large workspace: ``reprise runs list``, ``runs show``,
``data list``, ``models list`` and ``reprise --help``, each a fresh process, against
MLflow's ``mlflow runs list`` / ``runs describe`` / ``experiments search`` /
``--help`` on an MLflow SQLite store holding the same runs.

The workspace holds 10,000 runs (a fifth top-level, the rest nested trials) and
10 million metric points, plus 20 datasets x 5 versions and 10 models x 10
versions; it is generated once by bulk SQL into a database made by Reprise's own
migrations (see ``_cli_workspace``) and cached under ``bench/.work/``.

Goals (issue 13): each listing <= 0.3 s, ``--help`` <= 0.15 s.
Note that ``mlflow runs list`` prints every run of the experiment (it has no limit),
while ``reprise runs list`` prints the newest 50 top-level runs (``--limit``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

from _cli_workspace import mlflow_store, workspace
from _common import WORK, finish, python

GOALS = {"runs_list": 0.3, "runs_show": 0.3, "data_list": 0.3, "models_list": 0.3,
         "help": 0.15}


def timed(argv: list[str], repeats: int, env: dict[str, str],
          cwd: Path) -> tuple[float, float, list[float]]:
    """Median wall seconds and median CPU seconds (user + system, of the process and
    its children) of a fresh process running ``argv``, after one warm-up; and the wall
    samples. CPU time is reported beside wall time because on a shared 2-core machine
    the wall time also counts the time spent waiting for a core."""
    run_env = {**os.environ, **env}
    run_env.pop("PYTHONDONTWRITEBYTECODE", None)
    walls, cpus = [], []
    for i in range(repeats + 1):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       env=run_env, cwd=cwd)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if i:  # the first run warms the page cache and the bytecode cache
            walls.append(wall)
            cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(walls), statistics.median(cpus), walls


def _script(name: str) -> list[str]:
    found = shutil.which(name, path=str(Path(python()).parent))
    if found:
        return [found]
    return [python(), "-m", "reprise.cli"] if name == "reprise" else [name]


def _newest_run(root: Path) -> str:
    out = subprocess.run([*_script("reprise"), "runs", "list", "--limit", "1", "--json"],
                         cwd=root, capture_output=True, text=True, check=True).stdout
    return str(json.loads(out)[0]["id"])


def reprise_cases(root: Path) -> dict[str, list[str]]:
    rp = _script("reprise")
    return {"help": [*rp, "--help"], "runs_list": [*rp, "runs", "list"],
            "runs_show": [*rp, "runs", "show", _newest_run(root)],
            "data_list": [*rp, "data", "list"], "models_list": [*rp, "models", "list"]}


def _newest_mlflow_run(db: Path) -> str:
    """The newest top-level run (what ``reprise runs show`` is timed on, in MLflow)."""
    import sqlite3

    con = sqlite3.connect(db)
    try:
        row = con.execute("SELECT run_uuid FROM runs WHERE run_uuid NOT IN (SELECT run_uuid "
                          "FROM tags WHERE key = 'mlflow.parentRunId') "
                          "ORDER BY start_time DESC LIMIT 1").fetchone()
    finally:
        con.close()
    return str(row[0])


def mlflow_cases(run_id: str) -> dict[str, list[str]]:
    ml = _script("mlflow")
    return {"help": [*ml, "--help"], "runs_list": [*ml, "runs", "list", "--experiment-id", "0"],
            "runs_show": [*ml, "runs", "describe", "--run-id", run_id],
            "experiments_search": [*ml, "experiments", "search"]}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--points", type=int, default=10_000_000)
    ap.add_argument("--no-mlflow", action="store_true", help="Skip the peer.")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    if args.quick:
        args.repeats, args.runs, args.points = 2, 200, 20_000
    root = workspace(WORK, args.runs, args.points)
    env = {"REPRISE_STORE_URL": "", "REPRISE_ARTIFACTS_URL": ""}
    figures: dict[str, float] = {}
    samples: dict[str, list[float]] = {}
    cpu: dict[str, float] = {}

    def measure(label: str, cmd: list[str], run_env: dict[str, str], cwd: Path) -> None:
        figures[f"{label}_s"], cpu[f"{label}_cpu_s"], samples[label] = timed(
            cmd, args.repeats, run_env, cwd)

    measure("python_floor", [python(), "-c", "pass"], {}, root)
    for name, cmd in reprise_cases(root).items():
        measure(f"reprise_{name}", cmd, env, root)
    ratios: dict[str, float] = {}
    if not args.no_mlflow:
        store = mlflow_store(WORK, args.runs, args.points)
        ml_env = {"MLFLOW_TRACKING_URI": f"sqlite:///{store / 'mlflow.db'}"}
        for name, cmd in mlflow_cases(_newest_mlflow_run(store / "mlflow.db")).items():
            measure(f"mlflow_{name}", cmd, ml_env, store)
        for name in ("help", "runs_list", "runs_show"):
            ratios[f"mlflow_{name}_vs_reprise"] = (figures[f"mlflow_{name}_s"]
                                                   / figures[f"reprise_{name}_s"])
            ratios[f"mlflow_{name}_vs_reprise_cpu"] = (cpu[f"mlflow_{name}_cpu_s"]
                                                       / cpu[f"reprise_{name}_cpu_s"])
    met = {name: figures[f"reprise_{name}_s"] <= goal for name, goal in GOALS.items()}
    met_cpu = {name: cpu[f"reprise_{name}_cpu_s"] <= goal for name, goal in GOALS.items()}
    result = {"figures": {**figures, **cpu}, "ratios": ratios, "samples": samples,
              "goals_met_cpu": met_cpu, "load_average": os.getloadavg(),
              "repeats": args.repeats, "workspace": {"runs": args.runs, "points": args.points},
              "goals_s": GOALS, "goals_met": met, "cpus": os.cpu_count()}
    return finish("cli", result, quick=args.quick, fmt=lambda k, v: f"{v * 1000:>11.0f} ms")


if __name__ == "__main__":
    main()
