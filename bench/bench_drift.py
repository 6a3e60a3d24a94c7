"""Drift at bounded cost, and honest: ``reprise.monitor`` against Evidently (issue 15).

Cost: a 100,000-row reference and a 1,000,000-row current window of 100 columns (85
numbers, of which 10 integers, and 15 text categories), streamed by batches of 100,000
rows; goal: at most 60 s and 2 GB peak memory. Each measurement is a fresh process
(peak memory is its ``ru_maxrss`` from ``wait4``). Reprise's time covers fitting the
reference (two passes), summarising the window batch by batch and comparing; the
generation of the streamed rows is timed apart and left out.

Evidently (the peer) runs on the same data, written once to Parquet, at the sizes where
it finishes: its ``DataDriftPreset`` on pandas DataFrames held in memory, as its users
run it. Reprise runs on the same files at the same sizes. Evidently 0.7 needs
``plotly<6`` and Reprise pins plotly 7, so it cannot share the project's environment:
it runs in a virtual environment of its own, in the same run: ``--evidently-python``, or
``bench/.work/evidently`` made from ``requirements-evidently.txt`` when missing.

Honesty (issue 15, point 4), on generated data with fixed seeds: 100 windows of 1,000
rows from the reference distribution (20 numbers and one category) give the dataset
false-alarm rate; a 0.5 σ mean shift in one of the 20 numbers, and a 20-point move in the
category's shares, give the detection delay in windows (over 20 onsets each); 30-row
windows must get no verdict. The same windows go through Evidently (its default: a
column drifts at p < 0.05, the dataset when half the columns do), and its per-column
false-alarm rate is reported beside Reprise's uncorrected one.

Run: ``python bench/bench_drift.py [--quick] [--evidently-python PATH]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _common import WORK, python, write_result

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"

GEN = r'''
import numpy as np, pyarrow as pa

def make(seed, n, cols=100, drift=False):
    """Rows of the benchmark table; with ``drift``, 3 numbers shift by 0.1 sd and one
    category's share moves 10 points."""
    rng = np.random.default_rng(seed)
    out = {}
    n_num, n_int = 75, 10
    for i in range(n_num):
        x = rng.normal(i, 1 + i % 7, n)
        if drift and i < 3:
            x += 0.1 * (1 + i % 7)
        if i % 10 == 0:
            x[rng.random(n) < 0.02] = np.nan
        out[f"num{i}"] = x
    for i in range(n_int):
        out[f"int{i}"] = rng.poisson(3 + 5 * i, n)
    for i in range(cols - n_num - n_int):
        k = 5 + 3 * i
        p = np.arange(k, 0, -1, dtype=float)
        p /= p.sum()
        if drift and i == 0:
            p[0] -= 0.1; p[1] += 0.1
        out[f"cat{i}"] = pa.array(rng.choice([f"v{j}" for j in range(k)], n, p=p))
    return pa.table(out)
'''

REPRISE = GEN + r'''
import json, sys, time
t0 = time.perf_counter()
import pyarrow.parquet as pq
from reprise.monitor import Window, compare, fit_reference
t1 = time.perf_counter()
mode, ref_path, cur = sys.argv[1], sys.argv[2], sys.argv[3]
ref = fit_reference(lambda: pq.ParquetFile(ref_path).iter_batches(100_000))
t2 = time.perf_counter()
w = Window(ref)
gen = 0.0
if mode == "files":
    for b in pq.ParquetFile(cur).iter_batches(100_000):
        w.update(b)
else:  # streamed: generated here batch by batch (timed apart)
    rows = int(cur)
    for i in range(rows // 100_000):
        g0 = time.perf_counter()
        batch = make(1000 + i, 100_000, drift=True)
        gen += time.perf_counter() - g0
        w.update(batch)
t3 = time.perf_counter()
r = compare(ref, w)
t4 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "fit_s": t2 - t1, "window_s": t3 - t2 - gen,
                  "generate_s": gen, "compare_s": t4 - t3, "work_s": t4 - t1 - gen,
                  "rows": w.rows, "verdict": r.verdict, "drifted": len(r.drifted),
                  "drifted_columns": r.drifted[:10]}))
'''

EVIDENTLY = r'''
import json, sys, time, warnings
warnings.filterwarnings("ignore")
t0 = time.perf_counter()
import pandas as pd
from evidently import Report
from evidently.presets import DataDriftPreset
t1 = time.perf_counter()
ref = pd.read_parquet(sys.argv[1]); cur = pd.read_parquet(sys.argv[2])
t2 = time.perf_counter()
snap = Report([DataDriftPreset()]).run(current_data=cur, reference_data=ref)
res = snap.dict()
t3 = time.perf_counter()
drifted = None
for m in res.get("metrics", []):
    v = m.get("value")
    if str(m.get("metric_name", "")).startswith("DriftedColumnsCount") and isinstance(v, dict):
        drifted = v["count"]
print(json.dumps({"import_s": t1 - t0, "read_s": t2 - t1, "work_s": t3 - t2,
                  "drifted": drifted, "rows": len(cur)}))
'''


def _child(argv: list[str], env: dict[str, str], timeout: float) -> dict[str, Any]:
    """Run a child; its JSON line, wall seconds and peak RSS (MiB) from ``wait4``."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                            text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return {"error": f"did not finish in {timeout:.0f} s"}
    wall = time.perf_counter() - t0
    # communicate() reaped the child; its rusage is in RUSAGE_CHILDREN's running max,
    # so each child is run from a fresh measuring process (see _measured)
    if proc.returncode != 0:
        return {"error": err.strip().splitlines()[-1] if err.strip() else f"exit {proc.returncode}"}
    doc: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    doc["wall_s"] = wall
    return doc


MEASURE = r'''
import json, os, resource, subprocess, sys
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
out, err = p.communicate()
sys.stderr.write(err)
if p.returncode:
    sys.exit(p.returncode)
doc = json.loads(out.strip().splitlines()[-1])
doc["peak_mib"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
print(json.dumps(doc))
'''


def _measured(interp: str, code: str, args: list[str], timeout: float) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    return _child([python(), "-c", MEASURE, interp, "-c", code, *args], env, timeout)


def _write_files(sizes: list[int], ref_rows: int) -> dict[int, Path]:
    import pyarrow.parquet as pq

    ns: dict[str, Any] = {}
    exec(GEN, ns)  # noqa: S102 - the generator shared with the children, one definition
    folder = WORK / "drift"
    folder.mkdir(parents=True, exist_ok=True)
    paths = {0: folder / f"ref-{ref_rows}.parquet"}
    if not paths[0].exists():
        pq.write_table(ns["make"](1, ref_rows), paths[0])
    for n in sizes:
        paths[n] = folder / f"cur-{n}.parquet"
        if not paths[n].exists():
            pq.write_table(ns["make"](2, n, drift=True), paths[n])
    return paths


def cost(args: argparse.Namespace) -> dict[str, Any]:
    ref_rows = 10_000 if args.quick else 100_000
    sizes = [10_000] if args.quick else [10_000, 100_000]
    paths = _write_files(sizes, ref_rows)
    out: dict[str, Any] = {"reference_rows": ref_rows, "columns": 100, "same_files": {}}
    for n in sizes:
        row: dict[str, Any] = {}
        row["reprise"] = _measured(python(), REPRISE, ["files", str(paths[0]), str(paths[n])],
                                   600)
        if args.evidently_python:
            row["evidently"] = _measured(args.evidently_python, EVIDENTLY,
                                         [str(paths[0]), str(paths[n])], args.evidently_timeout)
        out["same_files"][str(n)] = row
        print(n, json.dumps(row), flush=True)
    big = 200_000 if args.quick else 1_000_000
    out["streamed"] = {"rows": big, "reprise": _measured(
        python(), REPRISE, ["stream", str(paths[0]), str(big)], 900)}
    print("streamed", json.dumps(out["streamed"]), flush=True)
    return out


def evidently_env(given: str | None) -> tuple[str | None, str | None]:
    """The Python of Evidently's own environment: ``given``, or bench/.work/evidently,
    made from requirements-evidently.txt when missing. ``(python, why not)``."""
    if given:
        return given, None
    venv = WORK / "evidently"
    interp = venv / "bin" / "python"
    if not interp.exists():
        try:
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True,
                           capture_output=True, timeout=300)
            subprocess.run([str(interp), "-m", "pip", "install", "-q", "-r",
                            str(HERE / "requirements-evidently.txt")], check=True,
                           capture_output=True, timeout=1800)
        except (subprocess.SubprocessError, OSError) as exc:
            return None, f"Evidently's environment could not be made: {exc}"
    return str(interp), None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="Small sizes; no result file.")
    ap.add_argument("--evidently-python", default=None,
                    help="Python of a virtual environment with evidently installed.")
    ap.add_argument("--evidently-timeout", type=float, default=900)
    ap.add_argument("--skip-cost", action="store_true")
    ap.add_argument("--evidently-windows", type=int, default=100,
                    help="Null windows Evidently judges (its onsets: a fifth as many).")
    args = ap.parse_args()
    sys.path.insert(0, str(SRC))
    from _drift_honesty import evidently_honesty, honesty

    args.evidently_python, why_not = evidently_env(args.evidently_python)
    result: dict[str, Any] = {"goal": {"seconds": 60, "peak_mib": 2048},
                              "load_average_at_start": os.getloadavg()}
    if why_not:
        result["evidently_note"] = why_not

    def save() -> None:  # after each part, so a long run keeps what it measured
        if not args.quick:
            write_result("drift", result)

    result["honesty"] = honesty(quick=args.quick, evidently_python=None)
    save()
    if not args.skip_cost:
        result["cost"] = cost(args)
        save()
    if args.evidently_python:
        result["honesty"]["evidently"] = evidently_honesty(
            args.evidently_python, windows=args.evidently_windows, quick=args.quick)
    result["load_average_at_end"] = os.getloadavg()
    save()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
