"""The honesty figures of ``bench_drift.py`` (issue 15, point 4), Reprise and Evidently on
the same windows. Seeds are fixed; the windows go to Evidently as Parquet files."""

from __future__ import annotations

import json
import os
import subprocess
import time
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from _common import WORK

NUMERIC = 20
SHARES = {"a": 0.4, "b": 0.3, "c": 0.2, "d": 0.1}
MOVED = {"a": 0.2, "b": 0.5, "c": 0.2, "d": 0.1}
MAX_DELAY = 10

EVIDENTLY_WINDOWS = r'''
import json, sys, warnings
warnings.filterwarnings("ignore")
import pandas as pd
from evidently import Report
from evidently.presets import DataDriftPreset
ref = pd.read_parquet(sys.argv[1])
out = []
for path in sys.argv[2:]:
    cur = pd.read_parquet(path)
    res = Report([DataDriftPreset()]).run(current_data=cur, reference_data=ref).dict()
    share, cols = None, []
    for m in res["metrics"]:
        name, cfg, v = str(m.get("metric_name", "")), m.get("config") or {}, m.get("value")
        if name.startswith("DriftedColumnsCount") and isinstance(v, dict):
            share = v.get("share")
        elif name.startswith("ValueDrift(") and isinstance(v, (int, float)):
            # p-value methods drift below the threshold, distances at or above it
            method, limit = str(cfg.get("method", "")), float(cfg.get("threshold", 0.05))
            drift = v < limit if "p_value" in method else v >= limit
            cols.append([str(cfg.get("column")), method, float(v), bool(drift)])
    out.append({"share": share, "columns": cols})
print(json.dumps(out))
'''


def _rows(rng: np.random.Generator, n: int, *, shift: float = 0.0,
          shares: dict[str, float] = SHARES) -> pa.Table:
    cols: dict[str, Any] = {}
    for i in range(NUMERIC):
        x = rng.normal(10.0 * i, 1.0 + i, size=n)
        if i == 7:
            x = x + shift * (1.0 + i)
        if i % 5 == 0:
            x[rng.random(n) < 0.05] = np.nan
        cols[f"x{i}"] = x
    cols["plan"] = rng.choice(list(shares), size=n, p=list(shares.values()))
    return pa.table(cols)


def _judge(ref: Any, table: pa.Table) -> Any:
    from reprise.monitor import Window, compare

    w = Window(ref)
    w.update(table)
    return compare(ref, w)


def _delay(ref: Any, rng: np.random.Generator, column: str, **shift: Any) -> int | None:
    """Windows from an onset until the dataset verdict names ``column`` (None: never)."""
    for k in range(1, MAX_DELAY + 1):
        r = _judge(ref, _rows(rng, 1000, **shift))
        if r.verdict == "drift" and column in r.drifted:
            return k
    return None


def honesty(*, quick: bool, evidently_python: str | None = None) -> dict[str, Any]:
    from reprise.monitor import fit_reference

    windows, onsets = (30, 5) if quick else (100, 20)
    ref_table = _rows(np.random.default_rng(2026), 100_000)
    ref = fit_reference(ref_table)
    rng = np.random.default_rng(7)
    null_windows = [_rows(rng, 1000) for _ in range(windows)]
    t0 = time.perf_counter()
    reports = [_judge(ref, t) for t in null_windows]
    per_window = (time.perf_counter() - t0) / windows
    column_tests = sum(len([c for c in r.columns if c.p_value is not None]) for r in reports)
    column_alarms = sum(len([c for c in r.columns if c.p_value is not None
                             and c.p_value <= 0.05]) for r in reports)
    rng = np.random.default_rng(8)
    shift = [_delay(ref, rng, "x7", shift=0.5) for _ in range(onsets)]
    rng = np.random.default_rng(9)
    share = [_delay(ref, rng, "plan", shares=MOVED) for _ in range(onsets)]
    rng = np.random.default_rng(10)
    tiny = [_judge(ref, _rows(rng, 30, shift=3.0)).verdict for _ in range(20)]
    out: dict[str, Any] = {
        "reference_rows": 100_000, "window_rows": 1000, "columns": NUMERIC + 1,
        "correction": "holm", "alpha": 0.05,
        "reprise": {
            "null_windows": windows,
            "dataset_false_alarm_rate": sum(r.verdict == "drift" for r in reports) / windows,
            "column_false_alarm_rate_uncorrected": column_alarms / column_tests,
            "seconds_per_window": per_window,
            "half_sigma_shift_delay_windows": shift,
            "half_sigma_shift_max_delay": _worst(shift),
            "twenty_point_share_delay_windows": share,
            "twenty_point_share_max_delay": _worst(share),
            "thirty_row_windows_without_verdict": tiny.count("insufficient") / len(tiny),
        }}
    return out


def evidently_honesty(interp: str, *, windows: int, quick: bool) -> dict[str, Any]:
    """Evidently on the first ``windows`` of the same null windows (same seeds) and on
    ``windows // 5`` first windows after each kind of onset."""
    windows = min(windows, 30 if quick else 100)
    ref_table = _rows(np.random.default_rng(2026), 100_000)
    rng = np.random.default_rng(7)
    null_windows = [_rows(rng, 1000) for _ in range(windows)]
    rng = np.random.default_rng(11)
    onsets = max(windows // 5, 1)
    shifted = {"half_sigma_shift": [_rows(rng, 1000, shift=0.5) for _ in range(onsets)],
               "twenty_point_share": [_rows(rng, 1000, shares=MOVED) for _ in range(onsets)]}
    try:
        return _evidently(interp, ref_table, null_windows, shifted)
    except (subprocess.SubprocessError, ValueError, KeyError) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


def _worst(delays: list[int | None]) -> int | None:
    return None if any(d is None for d in delays) else max(d for d in delays if d is not None)


def _evidently(interp: str, ref: pa.Table, windows: list[pa.Table],
               shifted: dict[str, list[pa.Table]]) -> dict[str, Any]:
    folder = WORK / "drift" / "honesty"
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(ref, folder / "ref.parquet")
    named = [(f"null{i}", t) for i, t in enumerate(windows)]
    named += [(f"{k}{i}", t) for k, ts in shifted.items() for i, t in enumerate(ts)]
    for name, t in named:
        pq.write_table(t, folder / f"{name}.parquet")
    t0 = time.perf_counter()
    res = subprocess.run([interp, "-c", EVIDENTLY_WINDOWS, str(folder / "ref.parquet"),
                          *(str(folder / f"{n}.parquet") for n, _ in named)],
                         capture_output=True, text=True, timeout=3600,
                         env={**os.environ, "PYTHONPATH": ""})
    if res.returncode != 0:
        return {"error": res.stderr.strip().splitlines()[-1] if res.stderr else "failed"}
    seconds = (time.perf_counter() - t0) / len(named)
    per = dict(zip([n for n, _ in named], json.loads(res.stdout.strip().splitlines()[-1]),
                   strict=True))
    nulls = [per[f"null{i}"] for i in range(len(windows))]
    tests = sum(len(w["columns"]) for w in nulls)
    out: dict[str, Any] = {
        "null_windows": len(nulls),
        "dataset_false_alarm_rate": sum((w["share"] or 0) >= 0.5 for w in nulls) / len(nulls),
        "column_false_alarm_rate_uncorrected": sum(
            c[3] for w in nulls for c in w["columns"]) / max(tests, 1),
        "windows_with_any_column_alarm": sum(
            any(c[3] for c in w["columns"]) for w in nulls) / len(nulls),
        "seconds_per_window": seconds,
        "methods": sorted({c[1] for w in nulls for c in w["columns"]}),
        "note": "DataDriftPreset defaults: with a reference over 1,000 rows a column is "
                "judged by a distance against 0.1, the dataset drifts when half the "
                "columns do; no multiple-testing correction"}
    for key, column in (("half_sigma_shift", "x7"), ("twenty_point_share", "plan")):
        ws = [per[f"{key}{i}"] for i in range(len(shifted[key]))]
        out[f"{key}_dataset_detected_in_first_window"] = sum(
            (w["share"] or 0) >= 0.5 for w in ws) / len(ws)
        out[f"{key}_column_detected_in_first_window"] = sum(
            any(c[0] == column and c[3] for c in w["columns"]) for w in ws) / len(ws)
    return out
