"""Batch prediction: ``reprise predict`` on 1 million rows against the two ways people do
it without Reprise, in the same run, each in a fresh process (so its peak memory,
``VmHWM``, is its own):

* ``plain``: ``pandas.read_csv`` of the whole file, ``model.predict_proba``, ``to_parquet``
  (no validation, no lineage, everything in memory) — the floor;
* ``mlflow``: the same model logged with ``mlflow.sklearn.log_model`` and predicted with
  ``mlflow.pyfunc.load_model(...).predict(frame)`` on the whole frame (MLflow's batch path
  short of Spark);
* ``reprise``: ``reprise predict MODEL input.csv -o out.parquet --chunk-rows N`` for
  several chunk sizes — streaming, signature validation, model version on every row,
  atomic output, a tracked run with lineage.

The model is a scikit-learn Pipeline (StandardScaler + LogisticRegression) on 20 numeric
features, the input a CSV of 1,000,000 rows with an id column. Every tool's output rows
and its mean predicted probability are compared, so none can skip work. Reprise's peak
memory should follow the chunk size, not the file size.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import textwrap
import time
from pathlib import Path
from typing import Any

from _common import WORK, finish, python

FEATURES = [f"f{i}" for i in range(20)]

PLAIN = '''
import json, resource, sys, time
import pandas as pd
from sklearn.linear_model import LogisticRegression
import skops.io as sio
t0 = time.perf_counter()
model = sio.load(sys.argv[1], trusted=sio.get_untrusted_types(file=sys.argv[1]))
frame = pd.read_csv(sys.argv[2])
proba = model.predict_proba(frame[[c for c in frame.columns if c.startswith("f")]])[:, 1]
out = pd.DataFrame({"id": frame["id"], "prediction": (proba >= 0.5).astype(int),
                    "probability_1": proba})
out.to_parquet(sys.argv[3])
print(json.dumps({"seconds": time.perf_counter() - t0, "rows": len(out),
                  "mean": float(proba.mean()), "peak_mb": peak()}))
'''

MLFLOW = '''
import json, sys, time
import pandas as pd
import mlflow.pyfunc
t0 = time.perf_counter()
model = mlflow.pyfunc.load_model(sys.argv[1])
frame = pd.read_csv(sys.argv[2])
pred = model.predict(frame[[c for c in frame.columns if c.startswith("f")]])
out = pd.DataFrame({"id": frame["id"], "prediction": pred})
out.to_parquet(sys.argv[3])
print(json.dumps({"seconds": time.perf_counter() - t0, "rows": len(out),
                  "mean": float(pd.Series(pred).mean()), "peak_mb": peak()}))
'''

REPRISE = '''
import json, sys, time
from reprise.registry._batch import predict_file
import reprise
t0 = time.perf_counter()
res = predict_file(sys.argv[1], sys.argv[2], sys.argv[3], chunk_rows=int(sys.argv[4]),
                   workspace=reprise.open_workspace(sys.argv[5]))
import pyarrow.parquet as pq
mean = pq.read_table(sys.argv[3], columns=["probability_1"]).column(0).to_numpy().mean()
print(json.dumps({"seconds": time.perf_counter() - t0, "rows": res.rows,
                  "mean": float(mean), "peak_mb": peak()}))
'''

PEAK = '''
def peak():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM"):
            return int(line.split()[1]) / 1024
'''


def make_data(work: Path, rows: int) -> tuple[Path, Any]:
    import numpy as np
    import pandas as pd
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    rng = np.random.default_rng(0)
    w = rng.normal(size=len(FEATURES))
    path = work / "input.csv"
    step = 200_000
    for start in range(0, rows, step):
        n = min(step, rows - start)
        x = rng.normal(size=(n, len(FEATURES)))
        frame = pd.DataFrame(x, columns=FEATURES)
        frame.insert(0, "id", np.arange(start, start + n))
        frame.to_csv(path, mode="a" if start else "w", header=not start, index=False)
    x = rng.normal(size=(20_000, len(FEATURES)))
    y = (x @ w + rng.normal(scale=0.5, size=len(x)) > 0).astype(int)
    train = pd.DataFrame(x, columns=FEATURES)
    model = make_pipeline(StandardScaler(), LogisticRegression()).fit(train, y)
    return path, (model, train)


def prepare_tools(work: Path, model: Any, train: Any) -> dict[str, str]:
    """The skops file (plain), the MLflow model folder, and a Reprise workspace with the
    model registered as ``bench:1``."""
    import mlflow.sklearn
    import skops.io as sio

    import reprise
    from reprise.registry import package_model, register_package

    sio.dump(model, work / "model.skops")
    mlflow.sklearn.save_model(model, str(work / "mlflow-model"))
    ws = reprise.init(work / "ws")
    register_package("bench", package_model(model, sample=train), workspace=ws)
    ws.close()
    return {"skops": str(work / "model.skops"), "mlflow": str(work / "mlflow-model"),
            "ws": str(work / "ws")}


def run_tool(script: str, args: list[str]) -> dict[str, Any]:
    """One fresh process: its whole wall time (start-up and imports included, as a
    command costs) and what it reports of itself (work seconds, peak memory)."""
    code = textwrap.dedent(PEAK) + textwrap.dedent(script)
    t0 = time.perf_counter()
    res = subprocess.run([python(), "-c", code, *args], capture_output=True, text=True,
                         check=False)
    wall = time.perf_counter() - t0
    if res.returncode != 0:
        raise RuntimeError(f"benchmark tool failed:\n{res.stderr[-3000:]}")
    return {**json.loads(res.stdout.strip().splitlines()[-1]), "wall": wall}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--chunks", default="10000,50000,200000")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    if args.quick:
        args.rows, args.repeats, args.chunks = 20_000, 1, "5000"
    chunks = [int(c) for c in args.chunks.split(",")]
    work = WORK / "predict"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    data, (model, train) = make_data(work, args.rows)
    paths = prepare_tools(work, model, train)
    tools: dict[str, tuple[str, list[str]]] = {
        "plain": (PLAIN, [paths["skops"], str(data), str(work / "plain.parquet")]),
        "mlflow": (MLFLOW, [paths["mlflow"], str(data), str(work / "mlflow.parquet")]),
        **{f"reprise_chunk{c}": (REPRISE, ["bench:1", str(data),
                                           str(work / f"reprise{c}.parquet"), str(c),
                                           paths["ws"]]) for c in chunks},
    }
    samples: dict[str, list[dict[str, Any]]] = {t: [] for t in tools}
    for i in range(args.repeats):  # interleaved, the order rotated each round
        names = list(tools)
        for name in names[i % len(names):] + names[:i % len(names)]:
            samples[name].append(run_tool(*tools[name]))
    figures: dict[str, float] = {}
    checks: dict[str, Any] = {}
    for name, runs in samples.items():
        secs = statistics.median(r["wall"] for r in runs)
        figures[f"{name}_rows_per_s"] = args.rows / secs
        figures[f"{name}_seconds"] = secs
        figures[f"{name}_work_seconds"] = statistics.median(r["seconds"] for r in runs)
        figures[f"{name}_peak_mb"] = statistics.median(r["peak_mb"] for r in runs)
        checks[f"{name}_rows"] = runs[0]["rows"]
        checks[f"{name}_mean"] = runs[0]["mean"]
    for name in samples:
        if checks[f"{name}_rows"] != args.rows:
            raise AssertionError(f"{name} wrote {checks[f'{name}_rows']} rows, not {args.rows}")
    ratios = {f"{name}_rows_per_s_vs_plain": figures[f"{name}_rows_per_s"]
              / figures["plain_rows_per_s"] for name in samples if name != "plain"}
    ratios.update({f"{name}_peak_mb_vs_plain": figures[f"{name}_peak_mb"]
                   / figures["plain_peak_mb"] for name in samples if name != "plain"})
    shutil.rmtree(work, ignore_errors=True)
    result = {"figures": figures, "ratios": ratios, "checks": checks,
              "samples": {k: [r["wall"] for r in v] for k, v in samples.items()},
              "measure": "rows / median wall seconds of the whole process (start-up and "
                         "imports included); *_work_seconds: the tool's own timing after "
                         "its first imports; peak = VmHWM of the process",
              "rows": args.rows, "features": len(FEATURES), "chunks": chunks,
              "repeats": args.repeats,
              "model": "Pipeline(StandardScaler, LogisticRegression), 20 numeric features",
              "peer": "pandas read_csv + predict_proba + to_parquet (plain); "
                      "mlflow.pyfunc.load_model(...).predict (mlflow)",
              "goal": "peak memory bounded by the chunk size (not the file); rows/s reported"}
    return finish("predict", result, quick=args.quick, fmt=lambda k, v: f"{v:>14,.1f}")


if __name__ == "__main__":
    main()
