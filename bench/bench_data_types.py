"""What whole-file type inference costs ``reprise data add`` (issue 22.3), with
``pandas.read_csv`` + ``describe(include="all")`` on the same files for scale.

Two CSV files of the same rows (ids, floats, integers, a category, dates, and a
column that is empty but for one row): in ``consistent`` every column's type is
settled by the first 8 MiB block; in ``late`` the last row holds a ``2.5`` in an
integer column and the only value of the empty column, the worst place for it: the
first read runs to the end before it fails, then the types are inferred over the
whole file and the file is read again. Each measurement runs in a fresh process
(peak resident memory is ``VmHWM``, see ``bench_profile.peak_rss``); both tools'
row counts and column types are compared, so neither can skip work. Memory should
stay bounded by the block in both cases: ``late`` is also run on a file half the size.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _common import WORK, finish, machine, python


def write_file(path: Path, rows: int, late: bool) -> None:
    import numpy as np

    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    plans = np.array(["basic", "pro", "team", "enterprise"])
    with open(path, "w") as f:
        f.write("id,amount,score,ratio,age,visits,plan,day,rare\n")
        for start in range(0, rows, 100_000):
            n = min(100_000, rows - start)
            ids = np.arange(start, start + n)
            cols = [ids, rng.normal(100, 25, n).round(4), rng.gamma(2, 10, n).round(3),
                    rng.random(n).round(5), rng.integers(18, 91, n), rng.integers(0, 500, n),
                    plans[rng.integers(0, 4, n)],
                    (np.datetime64("2020-01-01") + rng.integers(0, 1500, n)).astype(str)]
            f.writelines(",".join(map(str, r)) + ",\n" for r in zip(*cols, strict=True))
        f.write(f"{rows},1.0,2.0,0.5,{'2.5' if late else '40'},3,pro,2021-01-01,"
                f"{'7' if late else ''}\n")


def peak_rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def child(tool: str, path: str) -> None:
    """One measured run in this fresh process; prints a JSON line."""
    import pandas as pd
    import pyarrow.csv  # noqa: F401 - both read CSV; loading the libraries is not the work

    import reprise
    from reprise.data import add_dataset

    work = Path(path).parent / f"ws-{tool}-{time.monotonic_ns()}"
    ws = reprise.init(work) if tool == "reprise" else None
    base = peak_rss()
    t0 = time.perf_counter()
    if tool == "reprise":
        rec = add_dataset("d", path, workspace=ws).record
        rows, types = rec.rows, dict(rec.schema or {})
    else:
        df = pd.read_csv(path)
        df.describe(include="all")
        rows, types = len(df), {c: str(t) for c, t in df.dtypes.items()}
    seconds = time.perf_counter() - t0
    shutil.rmtree(work, ignore_errors=True)
    print(json.dumps({"seconds": seconds, "rows": rows, "age": types["age"],
                      "rare": types["rare"], "base_rss": base, "peak_rss": peak_rss()}))


def measure(tool: str, path: Path, repeats: int) -> dict[str, Any]:
    argv = [python(), str(Path(__file__).resolve()), "--child", tool, str(path)]
    runs = []
    for _ in range(repeats):
        out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
        runs.append(json.loads(out.strip().splitlines()[-1]))
    med = statistics.median
    return {"seconds": med(r["seconds"] for r in runs), "samples": [r["seconds"] for r in runs],
            "rows": runs[0]["rows"], "age": runs[0]["age"], "rare": runs[0]["rare"],
            "peak_mb": med(r["peak_rss"] for r in runs) / 2**20,
            "own_mb": med(r["peak_rss"] - r["base_rss"] for r in runs) / 2**20}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="small sizes, for a smoke test")
    ap.add_argument("--child", nargs=2, metavar=("TOOL", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(*args.child)
        return {}
    if args.quick:
        args.rows, args.repeats = 200_000, 1
    work = WORK / "data_types"
    shutil.rmtree(work, ignore_errors=True)
    files = {"consistent": work / "consistent.csv", "late": work / "late.csv",
             "late_half": work / "late-half.csv"}
    write_file(files["consistent"], args.rows, late=False)
    write_file(files["late"], args.rows, late=True)
    write_file(files["late_half"], args.rows // 2, late=True)
    out = {f"reprise_{k}": measure("reprise", p, args.repeats) for k, p in files.items()}
    out |= {f"pandas_{k}": measure("pandas", files[k], args.repeats)
            for k in ("consistent", "late")}
    mib = files["late"].stat().st_size / 2**20
    shutil.rmtree(work, ignore_errors=True)
    late, ok = out["reprise_late"], out["reprise_consistent"]
    assert late["rows"] == out["pandas_late"]["rows"] == args.rows + 1, out
    assert (late["age"], late["rare"]) == ("double", "int64"), late  # widened, both
    assert out["pandas_late"]["age"] == "float64", out["pandas_late"]
    result = {
        "benchmark": "data_types", "machine": machine(), "rows": args.rows + 1,
        "file_mib": round(mib, 1), "runs": out,
        "figures": {
            "reprise consistent s": ok["seconds"], "reprise late s": late["seconds"],
            "pandas consistent s": out["pandas_consistent"]["seconds"],
            "pandas late s": out["pandas_late"]["seconds"],
            "reprise consistent peak MB": ok["peak_mb"], "reprise late peak MB": late["peak_mb"],
            "reprise late (half rows) peak MB": out["reprise_late_half"]["peak_mb"],
            "pandas late peak MB": out["pandas_late"]["peak_mb"]},
        "ratios": {
            "late / consistent (reprise time)": late["seconds"] / ok["seconds"],
            "reprise late / pandas late (time)":
                late["seconds"] / out["pandas_late"]["seconds"],
            "late peak / consistent peak (reprise)": late["peak_mb"] / ok["peak_mb"],
            "late peak / half-size late peak": late["peak_mb"]
                / out["reprise_late_half"]["peak_mb"]},
    }
    return finish("data_types", result, quick=args.quick,
                  fmt=lambda k, v: f"{v:>14,.1f}" if "MB" in k else f"{v:>14,.3f}")


if __name__ == "__main__":
    main(sys.argv[1:])
