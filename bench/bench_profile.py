"""Dataset profiling: ``profile_parquet`` (one streaming pass) against the naive pandas path,
``pandas.read_parquet(path).describe(include="all")``, on a 10-million-row, 10-column file
of floats, integers, strings, a categorical and timestamps.

Every measurement runs in a fresh process, so its peak resident memory (``VmHWM``)
is that tool's own; the figures give the peak and the part above the process's size
after its imports. Reprise is also run on a file a tenth the size: its memory should
not grow with the rows. Both tools' row counts and the mean of one column are compared,
so a tool that skips work cannot win.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _common import WORK, finish, python

NUMERIC = ["amount", "score", "ratio", "user_id", "age", "seq"]
CHUNK_ROWS = 1_000_000  # generation and row-group size: generating is bounded memory too


def make_chunk(start: int, rows: int, total: int, seed: int) -> Any:
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    rng = np.random.default_rng([seed, start])
    score = rng.gamma(2.0, 10.0, rows)
    countries = pa.array([f"country-{i:02d}" for i in range(60)])
    segments = pa.array(["new", "active", "lapsed", "vip", "trial", "staff", "test", "other"])
    sku = pc.binary_join_element_wise(
        "SKU-", pc.cast(pa.array(rng.integers(0, max(1, total // 10), rows)), pa.string()), "")
    return pa.table({
        "amount": rng.normal(100.0, 25.0, rows),
        "score": pa.array(score, mask=rng.random(rows) < 0.05),
        "ratio": rng.random(rows, dtype=np.float32),
        "user_id": rng.integers(0, 1_000_000_000, rows),
        "age": rng.integers(18, 91, rows).astype(np.int32),
        "seq": np.arange(start, start + rows, dtype=np.int64),
        "country": countries.take(pa.array(rng.zipf(1.5, rows) % 60)),
        "segment": pa.DictionaryArray.from_arrays(
            pa.array(rng.integers(0, 8, rows).astype(np.int8)), segments),
        "sku": sku,
        "ts": pa.array(1_700_000_000_000_000 + rng.integers(0, 365 * 86_400, rows) * 1_000_000,
                       pa.timestamp("us", tz="UTC")),
    })


def write_file(path: Path, rows: int, seed: int = 0) -> None:
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    writer = None
    for start in range(0, rows, CHUNK_ROWS):
        chunk = make_chunk(start, min(CHUNK_ROWS, rows - start), rows, seed)
        if writer is None:
            writer = pq.ParquetWriter(path, chunk.schema)
        writer.write_table(chunk, row_group_size=CHUNK_ROWS)
    assert writer is not None
    writer.close()


def peak_rss() -> int:
    """This process's peak resident bytes.

    ``VmHWM`` rather than ``ru_maxrss``: Linux carries the parent's pre-``exec`` peak
    into the child's ``ru_maxrss``, which would charge the benchmark driver's memory to
    the tool measured; ``VmHWM`` belongs to the new address space alone.
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def bench_schema() -> Any:
    """A realistic contract for the benchmark table: types, ranges, nulls, categories."""
    import pandera.pandas as pa

    return pa.DataFrameSchema({
        "amount": pa.Column(float),
        "score": pa.Column(float, pa.Check.ge(0), nullable=True),
        "age": pa.Column("int32", pa.Check.in_range(18, 90)),
        "user_id": pa.Column("int64", pa.Check.ge(0)),
        "country": pa.Column(str, pa.Check.str_startswith("country-")),
        "segment": pa.Column(nullable=False),
    })


def child(tool: str, path: str, columns: list[str] | None) -> None:
    """One measured run, in this fresh process; prints a JSON line."""
    import pandas as pd
    import pyarrow.parquet  # noqa: F401 - both tools use it; its loading is not their work

    from reprise.data._profile import profile_parquet

    base = peak_rss()
    t0 = time.perf_counter()
    if tool == "reprise":
        prof = profile_parquet(path, columns=columns)
        rows, mean = prof["rows"], prof["columns"]["amount"]["mean"]
    elif tool == "reprise_validate":  # what `reprise data add --schema` does, minus storing
        import tempfile

        from reprise.data._dataset import _scan_tabular

        with tempfile.TemporaryDirectory() as tmp:
            scan = _scan_tabular(Path(path), "parquet", "utf-8", bench_schema(), False,
                                 Path(tmp), 1 << 18)
        assert scan.report.ok, scan.report.render()
        rows, mean = scan.rows, scan.profile["columns"]["amount"]["mean"]
    elif tool == "pandera":  # the naive path: whole table in pandas, then validate
        df = pd.read_parquet(path)
        bench_schema().validate(df, lazy=True)
        rows, mean = len(df), float(df["amount"].mean())
    else:
        df = pd.read_parquet(path, columns=columns)
        desc = df.describe(include="all")
        rows, mean = len(df), float(desc.loc["mean", "amount"])
    seconds = time.perf_counter() - t0
    print(json.dumps({"seconds": seconds, "rows": rows, "mean": mean, "base_rss": base,
                      "peak_rss": peak_rss()}))


def measure(tool: str, path: Path, repeats: int, columns: list[str] | None = None
            ) -> dict[str, Any]:
    """Median seconds and peak RSS of ``repeats`` fresh-process runs of one tool."""
    argv = [python(), str(Path(__file__).resolve()), "--child", tool, str(path)]
    if columns:
        argv += ["--columns", ",".join(columns)]
    runs = []
    for _ in range(repeats):
        out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
        runs.append(json.loads(out.strip().splitlines()[-1]))
    med = statistics.median
    return {"seconds": med(r["seconds"] for r in runs), "samples": [r["seconds"] for r in runs],
            "rows": runs[0]["rows"], "mean": runs[0]["mean"],
            "peak_mb": med(r["peak_rss"] for r in runs) / 2**20,
            "own_mb": med(r["peak_rss"] - r["base_rss"] for r in runs) / 2**20}


def warm(path: Path) -> None:
    """Read the file once so every timed run starts from the page cache alike."""
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--small-rows", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="small sizes, for a smoke test")
    ap.add_argument("--child", nargs=2, metavar=("TOOL", "PATH"), help=argparse.SUPPRESS)
    ap.add_argument("--columns", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args.child[0], args.child[1], args.columns.split(",") if args.columns else None)
        return {}
    if args.quick:
        args.rows, args.small_rows, args.repeats = 1_000_000, 200_000, 1
    work = WORK / "profile"
    shutil.rmtree(work, ignore_errors=True)
    big, small = work / f"big-{args.rows}.parquet", work / f"small-{args.small_rows}.parquet"
    t0 = time.perf_counter()
    write_file(big, args.rows)
    write_file(small, args.small_rows)
    print(f"  (wrote {args.rows:,} + {args.small_rows:,} rows in "
          f"{time.perf_counter() - t0:.1f} s; {big.stat().st_size / 2**20:,.0f} MiB)")
    for f in (big, small):
        warm(f)

    rep = measure("reprise", big, args.repeats)
    num = measure("reprise", big, args.repeats, NUMERIC)
    rep_small = measure("reprise", small, args.repeats)
    pds = measure("pandas", big, args.repeats)
    pds_small = measure("pandas", small, 1)
    val = measure("reprise_validate", big, args.repeats)
    val_small = measure("reprise_validate", small, 1)
    pdv = measure("pandera", big, 1 if args.repeats < 3 else 2)
    shutil.rmtree(work, ignore_errors=True)
    for name, r, n in (("reprise", rep, args.rows), ("pandas", pds, args.rows),
                       ("reprise small", rep_small, args.small_rows)):
        if r["rows"] != n:
            raise AssertionError(f"{name} counted {r['rows']} rows of {n}")
    if not math.isclose(rep["mean"], pds["mean"], rel_tol=1e-9):
        raise AssertionError(f"means differ: reprise {rep['mean']} pandas {pds['mean']}")

    figures = {
        "reprise_profile_rows_per_s": args.rows / rep["seconds"],
        "reprise_numeric_columns_rows_per_s": args.rows / num["seconds"],
        "pandas_describe_rows_per_s": args.rows / pds["seconds"],
        "reprise_peak_rss_mb": rep["peak_mb"],
        "reprise_peak_rss_mb_small_file": rep_small["peak_mb"],
        "reprise_own_rss_mb": rep["own_mb"],
        "reprise_own_rss_mb_small_file": rep_small["own_mb"],
        "pandas_peak_rss_mb": pds["peak_mb"],
        "pandas_peak_rss_mb_small_file": pds_small["peak_mb"],
        "reprise_validate_and_profile_rows_per_s": args.rows / val["seconds"],
        "reprise_validate_peak_rss_mb": val["peak_mb"],
        "reprise_validate_peak_rss_mb_small_file": val_small["peak_mb"],
        "pandera_whole_frame_validate_rows_per_s": args.rows / pdv["seconds"],
        "pandera_whole_frame_peak_rss_mb": pdv["peak_mb"],
    }
    ratios = {
        "reprise_vs_pandas_speed": pds["seconds"] / rep["seconds"],
        "pandas_vs_reprise_peak_memory": pds["peak_mb"] / rep["peak_mb"],
        "reprise_memory_big_vs_small_file": rep["peak_mb"] / rep_small["peak_mb"],
        "reprise_validate_vs_pandera_speed": pdv["seconds"] / val["seconds"],
        "pandera_vs_reprise_validate_peak_memory": pdv["peak_mb"] / val["peak_mb"],
        "reprise_validate_memory_big_vs_small_file": val["peak_mb"] / val_small["peak_mb"],
    }
    import pandas as pd
    import pyarrow as pa

    result = {"figures": figures, "ratios": ratios, "repeats": args.repeats,
              "samples": {"reprise": rep["samples"], "reprise_numeric": num["samples"],
                          "reprise_small_file": rep_small["samples"], "pandas": pds["samples"]},
              "sizes": {"rows": args.rows, "small_rows": args.small_rows, "columns": 10,
                        "numeric_columns": NUMERIC},
              "peer": f"pandas {pd.__version__} (pyarrow {pa.__version__})",
              "goal": "reprise >= 5M rows/s on numeric columns; memory flat in the row count"}
    return finish("profile", result, quick=args.quick,
                  fmt=lambda k, v: f"{v:>14,.1f}" if "rss" in k else f"{v:>14,.0f}")


if __name__ == "__main__":
    sys.exit(0 if main() is not None else 1)
