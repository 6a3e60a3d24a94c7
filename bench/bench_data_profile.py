"""``reprise data add`` of CSV files against ``pandas.read_csv(path).describe(include="all")``.

Two files, as issue 22 sets the goals:

- ``tall``: 1,000,000 rows x 20 columns (about 200 MB): a unique string ID (a UUID), 8
  float columns (some with 2 % missing), 5 integer columns (ranges from 10 to 10**12),
  4 text columns of few to 2,000 values, a date and a boolean. Goal: ``data add`` in at
  most half pandas' time, with a lower peak memory.
- ``wide``: 1,000 rows x 2,000 columns (1,800 floats, 200 integers). Goal: no slower
  than pandas, with no more memory.

Each measurement is a fresh process, as a user runs it: ``reprise data add`` from the
command line into a new workspace (reading, checking, profiling, storing the file and
writing the version), and ``python -c 'import pandas; ...read_csv...describe...'``.
The time is the process's wall time, start-up included, and its CPU time (all threads);
each child also reports the seconds of its work alone (after its imports). Peak memory
is the child's ``ru_maxrss`` from ``wait4``; this driver imports nothing heavy and makes
the files in a child of its own, so no child's figure carries the driver's memory. Tools
alternate, every run starts with the file in the page cache, and the figures are
medians. Both tools' row counts and the mean of one column are compared, so a tool that
skips work cannot win.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import WORK, finish, python

PANDAS = """
import json, sys, time
t0 = time.perf_counter()
import pandas as pd
t1 = time.perf_counter()
df = pd.read_csv(sys.argv[1])
desc = df.describe(include="all")
t2 = time.perf_counter()
print(json.dumps({"work_s": t2 - t1, "import_s": t1 - t0, "rows": len(df),
                  "mean": float(desc.loc["mean", sys.argv[2]])}))
"""

REPRISE = """
import json, sys, time
t0 = time.perf_counter()
from reprise.data._dataset import add_dataset
from reprise.tracking import open_workspace
t1 = time.perf_counter()
rec = add_dataset("d", sys.argv[1], workspace=open_workspace(sys.argv[3])).record
t2 = time.perf_counter()
print(json.dumps({"work_s": t2 - t1, "import_s": t1 - t0, "rows": rec.rows,
                  "mean": rec.profile["columns"][sys.argv[2]]["mean"]}))
"""

SHOW = """
import json, sys
from reprise.data._dataset import get_dataset
from reprise.tracking import open_workspace
rec = get_dataset("d", workspace=open_workspace(sys.argv[1]))
print(json.dumps({"rows": rec.rows, "mean": rec.profile["columns"][sys.argv[2]]["mean"]}))
"""


def make_tall(path: Path, rows: int, seed: int = 0) -> None:
    """The 1M x 20 file, written a slice at a time (bounded memory)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.csv as pcsv

    hexdigits = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
    countries = pa.array([f"country-{i:02d}" for i in range(60)])
    cities = pa.array([f"city {i}" for i in range(2000)])
    plans = pa.array(["basic", "pro", "team"])
    states = pa.array(["active", "lapsed", "trial", "closed", "new"])
    writer = None
    step = 250_000
    for start in range(0, rows, step):
        n = min(step, rows - start)
        rng = np.random.default_rng([seed, start])
        raw = rng.integers(0, 256, (n, 16), dtype=np.uint8)
        chars = np.empty((n, 32), dtype=np.uint8)
        chars[:, 0::2], chars[:, 1::2] = hexdigits[raw >> 4], hexdigits[raw & 15]
        uuid = np.full((n, 36), ord("-"), dtype=np.uint8)
        for a, z, at in ((0, 8, 0), (8, 12, 9), (12, 16, 14), (16, 20, 19), (20, 32, 24)):
            uuid[:, at : at + z - a] = chars[:, a:z]
        cols: dict[str, Any] = {"id": pa.array(uuid.view("S36").ravel().astype(str))}
        for i in range(8):
            x = np.round(rng.normal(100.0 * i, 10.0 + i, n), 4)
            cols[f"f{i}"] = pa.array(x, mask=rng.random(n) < 0.02 if i % 3 == 0 else None)
        for i, hi in enumerate((10, 1000, 100_000, 10**9, 10**12)):
            cols[f"i{i}"] = pa.array(rng.integers(0, hi, n))
        cols["country"] = countries.take(pa.array(rng.zipf(1.5, n) % 60))
        cols["plan"] = plans.take(pa.array(rng.integers(0, 3, n)))
        cols["status"] = states.take(pa.array(rng.integers(0, 5, n)))
        cols["city"] = cities.take(pa.array(rng.integers(0, 2000, n)))
        cols["signup"] = pa.array(rng.integers(17000, 20000, n).astype(np.int32)).view(
            pa.date32())
        cols["active"] = pa.array(rng.random(n) < 0.3)
        table = pa.table(cols)
        if writer is None:
            writer = pcsv.CSVWriter(str(path), table.schema,
                                    write_options=pcsv.WriteOptions(quoting_style="needed"))
        writer.write_table(table)
    assert writer is not None
    writer.close()


def make_wide(path: Path, rows: int, cols: int, seed: int = 1) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.csv as pcsv

    rng = np.random.default_rng(seed)
    arrays = [pa.array(rng.integers(0, 1000, rows)) if j % 10 == 9
              else pa.array(np.round(rng.normal(j, 1 + j % 7, rows), 5)) for j in range(cols)]
    pcsv.write_csv(pa.table(arrays, names=[f"c{j:04d}" for j in range(cols)]), str(path))


def _run(argv: list[str], cwd: Path | None = None) -> tuple[float, int, str, float]:
    """Wall seconds, peak RSS bytes (the child's ru_maxrss), stdout and CPU seconds (user
    and system, all its threads) of one process."""
    env = {**os.environ}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # every tool starts from cached bytecode
    with tempfile.TemporaryFile() as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        err = proc.stderr.read().decode() if proc.stderr else ""
        if proc.returncode:
            raise RuntimeError(f"{argv[:3]} failed ({proc.returncode}): {err[-2000:]}")
        out.seek(0)
        return (seconds, usage.ru_maxrss * 1024, out.read().decode(),
                usage.ru_utime + usage.ru_stime)


def _warm(path: Path) -> None:
    with open(path, "rb", buffering=0) as f:
        while f.read(1 << 24):
            pass


def _bin(name: str) -> str:
    return str(Path(python()).parent / name)


def measure(path: Path, column: str, repeats: int, root: Path) -> dict[str, Any]:
    """Alternate pandas, the ``reprise data add`` command and ``add_dataset`` in a child."""
    runs: dict[str, list[dict[str, Any]]] = {"pandas": [], "reprise_cli": [], "reprise_api": []}
    for i in range(repeats):
        for tool in (("pandas", "reprise_cli", "reprise_api") if i % 2 == 0
                     else ("reprise_api", "reprise_cli", "pandas")):
            ws = root / f"ws-{tool}-{i}"
            shutil.rmtree(ws, ignore_errors=True)
            ws.mkdir(parents=True)
            if tool != "pandas":
                subprocess.run([_bin("reprise"), "init", "."], cwd=ws, check=True,
                               stdout=subprocess.DEVNULL)
            _warm(path)
            if tool == "pandas":
                s, rss, out, cpu = _run([python(), "-c", PANDAS, str(path), column])
            elif tool == "reprise_api":
                s, rss, out, cpu = _run([python(), "-c", REPRISE, str(path), column, str(ws)])
            else:
                s, rss, _, cpu = _run([_bin("reprise"), "data", "add", "d", str(path)], cwd=ws)
                out = subprocess.run([python(), "-c", SHOW, str(ws), column], check=True,
                                     capture_output=True, text=True).stdout
            runs[tool].append({"seconds": s, "rss": rss, "cpu": cpu, **json.loads(out)})
            shutil.rmtree(ws, ignore_errors=True)
    med = statistics.median
    out: dict[str, Any] = {}
    for tool, rs in runs.items():
        out[tool] = {"seconds": med(r["seconds"] for r in rs),
                     "cpu_seconds": med(r["cpu"] for r in rs),
                     "peak_mb": med(r["rss"] for r in rs) / 2**20,
                     "samples_s": [round(r["seconds"], 4) for r in rs],
                     "samples_mb": [round(r["rss"] / 2**20, 1) for r in rs],
                     "rows": rs[0]["rows"], "mean": rs[0]["mean"]}
        if "work_s" in rs[0]:
            out[tool]["work_seconds"] = med(r["work_s"] for r in rs)
            out[tool]["import_seconds"] = med(r["import_s"] for r in rs)
    rows = {t: r["rows"] for t, r in out.items()}
    if len(set(rows.values())) != 1:
        raise AssertionError(f"row counts differ: {rows}")
    for tool in ("reprise_cli", "reprise_api"):
        if not math.isclose(out[tool]["mean"], out["pandas"]["mean"], rel_tol=1e-9):
            raise AssertionError(f"means of {column} differ: {tool} {out[tool]['mean']} "
                                 f"pandas {out['pandas']['mean']}")
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--wide-rows", type=int, default=1000)
    ap.add_argument("--wide-cols", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="small sizes, for a smoke test")
    ap.add_argument("--make", nargs=2, metavar=("KIND", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.quick:
        args.rows, args.wide_cols, args.repeats = 100_000, 300, 1
    if args.make:
        kind, path = args.make
        if kind == "tall":
            make_tall(Path(path), args.rows)
        else:
            make_wide(Path(path), args.wide_rows, args.wide_cols)
        return {}
    work = WORK / "data_profile"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    tall, wide = work / "tall.csv", work / "wide.csv"
    t0 = time.perf_counter()
    for kind, path in (("tall", tall), ("wide", wide)):  # in children: this process stays small
        subprocess.run([python(), str(Path(__file__).resolve()), "--make", kind, str(path),
                        "--rows", str(args.rows), "--wide-rows", str(args.wide_rows),
                        "--wide-cols", str(args.wide_cols)], check=True)
    print(f"  (wrote {tall.stat().st_size / 2**20:,.0f} MiB + {wide.stat().st_size / 2**20:,.0f}"
          f" MiB of CSV in {time.perf_counter() - t0:.1f} s)")
    load_before = os.getloadavg()[0]
    sizes = {"tall": {"rows": args.rows, "columns": 20, "bytes": tall.stat().st_size},
             "wide": {"rows": args.wide_rows, "columns": args.wide_cols,
                      "bytes": wide.stat().st_size}}
    big = measure(tall, "f1", args.repeats, work)
    many = measure(wide, "c0000", args.repeats, work)
    shutil.rmtree(work, ignore_errors=True)

    figures: dict[str, float] = {}
    for label, res in (("tall", big), ("wide", many)):
        for tool, r in res.items():
            figures[f"{label}_{tool}_s"] = r["seconds"]
            figures[f"{label}_{tool}_cpu_s"] = r["cpu_seconds"]
            figures[f"{label}_{tool}_peak_rss_mb"] = r["peak_mb"]
            if "work_seconds" in r:
                figures[f"{label}_{tool}_work_s"] = r["work_seconds"]
    ratios: dict[str, float] = {}
    for label, res in (("tall", big), ("wide", many)):
        p, c, a = res["pandas"], res["reprise_cli"], res["reprise_api"]
        ratios[f"{label}_reprise_cli_time_over_pandas"] = c["seconds"] / p["seconds"]
        ratios[f"{label}_reprise_cli_cpu_over_pandas"] = c["cpu_seconds"] / p["cpu_seconds"]
        ratios[f"{label}_reprise_cli_peak_memory_over_pandas"] = c["peak_mb"] / p["peak_mb"]
        ratios[f"{label}_reprise_work_time_over_pandas_work"] = (a["work_seconds"]
                                                               / p["work_seconds"])
    import platform

    peer = subprocess.run([python(), "-c", "import pandas, pyarrow; print(pandas.__version__, "
                           "pyarrow.__version__)"], check=True, capture_output=True,
                          text=True).stdout.split()
    result = {
        "figures": figures, "ratios": ratios, "repeats": args.repeats,
        "samples": {label: {t: {"s": r["samples_s"], "mb": r["samples_mb"]}
                            for t, r in res.items()}
                    for label, res in (("tall", big), ("wide", many))},
        "sizes": sizes,
        "peer": f"pandas {peer[0]} read_csv + describe(include='all') (pyarrow {peer[1]})",
        "python": platform.python_version(),
        "load_average": {"before": load_before, "after": os.getloadavg()[0],
                         "note": "1-minute load of the (shared) machine; 2 means its cores busy"},
        "goal": "tall: reprise data add <= 0.5x pandas' time, peak memory below pandas'; "
                "wide: no slower than pandas, no more memory",
        "note": "seconds: whole processes (start-up included), as a user runs them; "
                "cpu_s: their CPU seconds (user + system, every thread), which a busy shared "
                "machine disturbs less than wall time; work_s: after imports (reprise_api "
                "runs add_dataset in the child)",
    }
    return finish("data_profile", result, quick=args.quick,
                  fmt=lambda k, v: f"{v:>14,.1f}" if "rss" in k else f"{v:>14,.3f}")


if __name__ == "__main__":
    sys.exit(0 if main() is not None else 1)
