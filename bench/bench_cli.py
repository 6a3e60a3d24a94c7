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
import shutil
import subprocess
from pathlib import Path
from typing import Any

from _cli_workspace import mlflow_store, workspace
from _common import WORK, command_time, finish, python

GOALS = {"runs_list": 0.3, "runs_show": 0.3, "data_list": 0.3, "models_list": 0.3,
         "help": 0.15}


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
    figures["python_floor_s"], samples["python_floor"] = command_time(
        [python(), "-c", "pass"], args.repeats)
    cases = reprise_cases(root)
    for name, cmd in cases.items():
        figures[f"reprise_{name}_s"], samples[f"reprise_{name}"] = command_time(
            cmd, args.repeats, env=env, cwd=root)
    ratios: dict[str, float] = {}
    if not args.no_mlflow:
        store = mlflow_store(WORK, args.runs, args.points)
        ml_env = {"MLFLOW_TRACKING_URI": f"sqlite:///{store / 'mlflow.db'}"}
        for name, cmd in mlflow_cases(_newest_mlflow_run(store / "mlflow.db")).items():
            figures[f"mlflow_{name}_s"], samples[f"mlflow_{name}"] = command_time(
                cmd, args.repeats, env=ml_env, cwd=store)
        for name in ("help", "runs_list", "runs_show"):
            ratios[f"mlflow_{name}_vs_reprise"] = (figures[f"mlflow_{name}_s"]
                                                   / figures[f"reprise_{name}_s"])
    met = {name: figures[f"reprise_{name}_s"] <= goal for name, goal in GOALS.items()}
    result = {"figures": figures, "ratios": ratios, "samples": samples,
              "repeats": args.repeats, "workspace": {"runs": args.runs, "points": args.points},
              "goals_s": GOALS, "goals_met": met, "cpus": os.cpu_count()}
    return finish("cli", result, quick=args.quick, fmt=lambda k, v: f"{v * 1000:>11.0f} ms")


if __name__ == "__main__":
    main()
