"""Live monitoring: windows of a served model version's logged traffic, judged against
the version's reference.

:func:`live_report` reads the request log of the version behind ``NAME``,
``NAME@alias`` or ``NAME:V`` in windows — the newest ``windows`` windows of ``window``
rows (default 1,000), or of a duration (``"15m"``, ``"1h"``) ending at ``now`` — one
chunk at a time, each row added to its window's summaries (memory is bounded by the
summaries and one chunk, plus the labelled rows of a window). For each window:

- **input drift**: :func:`compare` of the inputs against the reference's (the
  policy's test, correction and minimum sample);
- **prediction drift**: the logged outputs against the model's predictions on the
  reference sample — class shares (χ², or Jensen-Shannon on large windows), and the
  score of a binary classifier or a regressor's prediction (KS, or normalised
  Wasserstein) — by the same statistics;
- **performance**, when labels have arrived (feedback joined by request id): the
  reference's metrics computed by :func:`reprise.evaluate.evaluate` with its intervals,
  compared with the version's reference value (its card). Only an interval wholly on the
  wrong side of the reference value is a degradation, so a harmless shift in the inputs
  with unchanged accuracy raises no performance alarm.

A window below the policy's minimum sample (rows, or labels for performance) is
"insufficient": no verdict, no alarm. Each computed window's summary is stored in the
metadata store (``monitor_windows``), where ``reprise serve`` reads its gauges.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from reprise.core._monitor_types import WindowRecord
from reprise.core._reqlog_types import INPUT_PREFIX, OUTPUT_PREFIX
from reprise.core.errors import UserError
from reprise.monitor._alarm import Alarm, MonitorWindow
from reprise.monitor._compare import DriftReport, compare
from reprise.monitor._model_reference import ModelReference, model_reference, prediction_table
from reprise.monitor._performance import window_performance
from reprise.monitor._policy import DEFAULT_WINDOW, DriftPolicy, parse_window
from reprise.monitor._reference import Reference
from reprise.monitor._window import Window

__all__ = ["DEFAULT_WINDOW", "LiveReport", "LiveWindow", "live_report", "parse_window"]

MAX_WINDOWS = 100  # per call: each window costs its summaries (fixed size) and a test


@dataclass
class LiveWindow:
    window: MonitorWindow
    version: int
    input: DriftReport
    prediction: DriftReport
    performance: dict[str, Any]
    inputs: Window | None = field(default=None, repr=False)  # the summaries (for HTML)

    @property
    def verdicts(self) -> dict[str, str]:
        return {"input_drift": self.input.verdict, "prediction_drift": self.prediction.verdict,
                "performance": str(self.performance.get("verdict"))}

    def to_dict(self) -> dict[str, Any]:
        return {"window": self.window.to_dict(), "version": self.version,
                "verdicts": self.verdicts, "input": self.input.to_dict(),
                "prediction": self.prediction.to_dict(), "performance": self.performance}


@dataclass
class LiveReport:
    model: str
    version: int
    alias: str | None
    window: dict[str, Any]  # {"by": "rows"|"time", "size": ...}
    reference: dict[str, Any]
    windows: list[LiveWindow]
    alarms: list[Alarm] = field(default_factory=list)
    input_reference: Reference | None = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "version": self.version, "alias": self.alias,
                "window": self.window, "reference": self.reference,
                "windows": [w.to_dict() for w in self.windows],
                "alarms": [a.to_dict() for a in self.alarms]}


def live_report(ref: str, *, window: int | str | None = None, windows: int = 1,
                since: float | None = None, workspace: Any = None, now: float | None = None,
                policy: DriftPolicy | None = None, reference: str | None = None,
                persist: bool = True) -> LiveReport:
    """The newest ``windows`` windows of logged traffic of the version ``ref`` names.

    Args:
        ref: ``NAME`` (the newest version), ``NAME@alias`` or ``NAME:V``.
        window: Rows per window (default 1,000) or a duration (``"15m"``).
        windows: How many windows, newest last.
        since: Ignore traffic before this Unix time.
        now: The end of the newest window (default: the clock).
        policy: How drift is judged (default :class:`DriftPolicy`).
        reference: ``DATASET@N`` for the reference rows (default: the training dataset).
        persist: Store each window's summary in the metadata store.

    Example:
        >>> report = live_report("churn@production", window=1000)  # doctest: +SKIP
        >>> [a.kind for a in report.alarms]  # doctest: +SKIP
        ['input_drift']
    """
    from reprise.registry._api import _ws
    from reprise.registry._registry import parse_ref, split_ref

    if not isinstance(windows, int) or isinstance(windows, bool) or windows < 1:
        raise UserError(f"windows must be a positive integer, not {windows!r}.")
    if windows > MAX_WINDOWS:
        raise UserError(f"at most {MAX_WINDOWS} windows at a time, not {windows}: each is "
                        "summarised, judged and stored on its own; take wider windows "
                        "(--window) instead.")
    by, size = parse_window(window)
    policy = policy or DriftPolicy()
    ws = _ws(workspace)
    _, alias, _ = split_ref(ref)
    rec = parse_ref(ws, ref)
    mref = model_reference(ref, dataset=reference, workspace=ws)
    policy.check_columns([*mref.inputs.columns, *mref.predictions.columns],
                         f"{rec.name}:{rec.version} (inputs and outputs)")
    end = time.time() if now is None else float(now)
    accs = _collect(ws, mref, by, size, windows, since, end)
    out = [_judge(a, mref, policy) for a in accs]
    alarms = [al for w in out for al in _alarms(w, mref, alias, end)]
    report = LiveReport(rec.name, rec.version, alias,
                        {"by": by, "size": int(size) if by == "rows" else size},
                        mref.describe(), out, alarms, mref.inputs)
    if persist and out:
        ws.metadata.add_monitor_windows([_record(w, mref, alarms, end) for w in out])
    return report


class _Acc:
    """One window being filled: input and output summaries, span, labelled rows."""

    def __init__(self, mref: ModelReference) -> None:
        self.inputs = Window(mref.inputs)
        self.outputs = Window(mref.predictions)
        self.start, self.end, self.rows = math.inf, -math.inf, 0
        self.y: list[Any] = []
        self.pred: list[Any] = []
        self.proba: list[Any] = []

    def add(self, table: pa.Table, mref: ModelReference, labels: dict[str, Any]) -> None:
        if not table.num_rows:
            return
        times = table.column("time")
        import pyarrow.compute as pc

        self.start = min(self.start, float(pc.min(times).as_py()))
        self.end = max(self.end, float(pc.max(times).as_py()))
        self.rows += table.num_rows
        inputs = {n[len(INPUT_PREFIX):]: table.column(n) for n in table.column_names
                  if n.startswith(INPUT_PREFIX)}
        self.inputs.update(pa.table(inputs) if inputs else _empty(table.num_rows))
        outputs = {n[len(OUTPUT_PREFIX):]: table.column(n) for n in table.column_names
                   if n.startswith(OUTPUT_PREFIX)}
        try:
            self.outputs.update(prediction_table(outputs, mref.task, mref.classes))
        except UserError:  # outputs not logged (excluded): the columns count as absent
            self.outputs.update(_empty(table.num_rows))
        if labels:
            self._labelled(table, outputs, labels)

    def _labelled(self, table: pa.Table, outputs: dict[str, Any],
                  labels: dict[str, Any]) -> None:
        ids = table.column("request_id").to_pylist()
        keep = [i for i, rid in enumerate(ids) if rid in labels]
        if not keep or "prediction" not in outputs:
            return
        preds = outputs["prediction"].to_pylist()
        proba = outputs["probabilities"].to_pylist() if "probabilities" in outputs else None
        for i in keep:
            self.y.append(labels[ids[i]])
            self.pred.append(preds[i])
            self.proba.append(proba[i] if proba is not None else None)


def _empty(rows: int) -> pa.Table:
    return pa.table({"__none__": pa.nulls(rows)})


def _collect(ws: Any, mref: ModelReference, by: str, size: float, count: int,
             since: float | None, end: float) -> list[_Acc]:
    """Fill the windows chunk by chunk, oldest chunk first (see the module docstring)."""
    start = since
    if by == "time":
        first = end - count * size
        start = first if since is None else max(since, first)
    chunks = ws.metadata.list_request_chunks(mref.name, version=mref.version, start=start,
                                             end=end)
    if by == "rows":
        accs = _by_rows(ws, mref, chunks, int(size), count, start, end)
    else:
        accs = _by_time(ws, mref, chunks, size, count, start, end)
    return [a for a in accs if a.rows]


def _by_rows(ws: Any, mref: ModelReference, chunks: list[Any], n: int, count: int,
             start: float | None, end: float) -> list[_Acc]:
    """The newest ``count * n`` rows in windows of ``n``, aligned on the newest row (the
    oldest window may be short). Chunks wholly before them are not read."""
    sizes = [_rows_in(ws, c, start, end) for c in chunks]
    total = sum(sizes)
    skip = max(0, total - n * count)
    n_windows = math.ceil((total - skip) / n)
    accs = [_Acc(mref) for _ in range(n_windows)]
    first = n_windows * n - (total - skip)  # where the kept rows start in the windows
    for chunk, rows in zip(chunks, sizes, strict=True):
        if skip >= rows:
            skip -= rows
            continue
        table = _read(ws, chunk, start, end).slice(skip)
        skip = 0
        labels = _labels(ws, mref.name, table)
        pos = 0
        while pos < table.num_rows:
            k = (first + pos) // n
            take = min(table.num_rows - pos, (k + 1) * n - (first + pos))
            accs[k].add(table.slice(pos, take), mref, labels)
            pos += take
        first += table.num_rows
    return accs


def _by_time(ws: Any, mref: ModelReference, chunks: list[Any], size: float, count: int,
             start: float | None, end: float) -> list[_Acc]:
    """``count`` windows of ``size`` seconds ending at ``end``; a row goes to the window
    holding its answer time."""
    import numpy as np

    origin = end - count * size
    accs = [_Acc(mref) for _ in range(count)]
    for chunk in chunks:
        table = _read(ws, chunk, start, end)
        if not table.num_rows:
            continue
        labels = _labels(ws, mref.name, table)
        t = table.column("time").to_numpy()
        slot = np.clip(((t - origin) // size).astype(int), 0, count - 1)
        for k in np.unique(slot):
            accs[int(k)].add(table.take(pa.array(np.nonzero(slot == k)[0])), mref, labels)
    return accs


def _rows_in(ws: Any, chunk: Any, start: float | None, end: float) -> int:
    if (start is None or chunk.first_at >= start) and chunk.last_at <= end:
        return int(chunk.rows)
    return int(_read(ws, chunk, start, end).num_rows)


def _read(ws: Any, chunk: Any, start: float | None, end: float) -> pa.Table:
    import pyarrow.compute as pc

    from reprise.store._request_log import read_request_chunk

    table = read_request_chunk(ws, chunk)
    if start is not None and chunk.first_at < start:
        table = table.filter(pc.greater_equal(table["time"], start))
    if chunk.last_at > end:
        table = table.filter(pc.less_equal(table["time"], end))
    return table


def _labels(ws: Any, name: str, table: pa.Table) -> dict[str, Any]:
    if not table.num_rows:
        return {}
    found = ws.metadata.get_feedback(name, table.column("request_id").to_pylist())
    return {rid: json.loads(label) for rid, (label, _) in found.items()}


def _judge(acc: _Acc, mref: ModelReference, policy: DriftPolicy) -> LiveWindow:
    span = MonitorWindow(start=acc.start, end=acc.end, rows=acc.rows, labelled=len(acc.y))
    return LiveWindow(span, mref.version, compare(mref.inputs, acc.inputs, policy),
                      compare(mref.predictions, acc.outputs, policy),
                      window_performance(acc.y, acc.pred, acc.proba, mref, policy),
                      acc.inputs)


def _alarms(w: LiveWindow, mref: ModelReference, alias: str | None,
            now: float) -> list[Alarm]:
    out = []
    for kind, report in (("input_drift", w.input), ("prediction_drift", w.prediction)):
        if report.verdict != "drift":
            continue
        cols = report.drifted
        what = "inputs" if kind == "input_drift" else "predictions"
        message = (f"{what} of {mref.name}:{mref.version} drift in {', '.join(cols[:5])}"
                   f"{' ...' if len(cols) > 5 else ''} over {w.window.rows} rows "
                   f"({report.correction} at alpha {report.alpha:g}; reference "
                   f"{mref.dataset})")
        evidence = {"drifted": cols, "correction": report.correction, "alpha": report.alpha,
                    "columns": {c.column: _column_evidence(c) for c in report.columns
                                if c.significant},
                    "reference": mref.describe()}
        out.append(Alarm(mref.name, mref.version, kind, w.window, message, alias,
                         _finite(evidence), now))
    perf = w.performance
    if perf.get("verdict") == "degraded":
        worse = [m for m, v in perf["metrics"].items() if v.get("degraded")]
        parts = [f"{m} {perf['metrics'][m]['value']:.3g} "
                 f"[{perf['metrics'][m]['ci_low']:.3g}, {perf['metrics'][m]['ci_high']:.3g}] "
                 f"vs reference {perf['metrics'][m]['reference']:.3g}" for m in worse[:3]]
        more = f"; and {len(worse) - 3} more metrics" if len(worse) > 3 else ""
        message = (f"performance of {mref.name}:{mref.version} degraded on "
                   f"{perf['labelled']} labelled rows: {'; '.join(parts)}{more}")
        out.append(Alarm(mref.name, mref.version, "performance", w.window, message, alias,
                         _finite({**perf, "reference": mref.describe()}), now))
    return out


def _column_evidence(c: Any) -> dict[str, Any]:
    return {"method": c.method, "statistic": c.statistic, "p_value": c.p_value,
            "p_adjusted": c.p_adjusted, "threshold": c.threshold, "effect": c.effect,
            "missing_rate": c.missing_rate, "reference_missing_rate": c.reference_missing_rate}


def _finite(value: Any) -> Any:
    """JSON-safe: non-finite floats become None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _columns_summary(report: DriftReport) -> dict[str, Any]:
    return {"verdict": report.verdict, "correction": report.correction,
            "drifted": report.drifted,
            "columns": [{"column": c.column, "kind": c.kind, "verdict": c.verdict,
                         "significant": c.significant, **_column_evidence(c)}
                        for c in report.columns]}


def _record(w: LiveWindow, mref: ModelReference, alarms: list[Alarm],
            now: float) -> WindowRecord:
    mine = [a.to_dict() for a in alarms if a.window == w.window]
    summary = {"input": _columns_summary(w.input), "prediction": _columns_summary(w.prediction),
               "performance": w.performance, "alarms": mine,
               "reference": mref.describe()}
    return WindowRecord(name=mref.name, version=mref.version, start=w.window.start,
                        end=w.window.end, rows=w.window.rows, labelled=w.window.labelled,
                        input_verdict=w.input.verdict,
                        prediction_verdict=w.prediction.verdict,
                        performance_verdict=str(w.performance.get("verdict")),
                        reference_hash=mref.artifact_hash, summary=_finite(summary),
                        computed_at=now)
