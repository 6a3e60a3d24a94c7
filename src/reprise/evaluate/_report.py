"""The HTML report of an evaluation: one self-contained, deterministic file.

* **Offline**: plotly.js is embedded once in the page (what
  ``include_plotlyjs=True`` embeds, without repeating it per figure); nothing
  is fetched from a CDN or anywhere else when the file is opened.
* **Deterministic**: the same evaluation (and history) gives the same bytes:
  fixed figure ids, a pinned plotly template, no timestamps, fixed float
  formatting, tables in the evaluation's own (deterministic) order. ``reprise
  verify`` compares a step's report by hash, so this matters.
* **Escaped**: every string that comes from the user's data (labels, column
  names, segments, metric keys, gate rules) goes through ``html.escape``.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

from reprise.evaluate._figures import figures, ordered
from reprise.evaluate._metrics import METRICS

__all__ = ["render_report"]

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;
max-width:1100px;color:#222;padding:0 1rem}
h1{font-size:1.6rem}h2{font-size:1.2rem;margin-top:2rem;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5rem 0;font-size:.9rem}
th,td{border:1px solid #ddd;padding:.25rem .6rem;text-align:right}
th:first-child,td:first-child{text-align:left}th{background:#f5f5f5}
.pass{color:#17692b;font-weight:600}.fail{color:#b00020;font-weight:600}
.muted{color:#888}.small{background:#fff7e0}.meta{color:#555}
"""


def _e(value: Any) -> str:
    return html.escape(str(value))


def _num(value: Any) -> str:
    if value is None:
        return '<span class="muted">undefined</span>'
    if isinstance(value, bool) or isinstance(value, int):
        return str(value)
    return f"{float(value):.4f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], row_class: Sequence[str] = ()
           ) -> str:
    """Cells are already HTML (escaped or formatted by the caller)."""
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = []
    for i, row in enumerate(rows):
        cls = f' class="{row_class[i]}"' if i < len(row_class) and row_class[i] else ""
        body.append(f"<tr{cls}>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def render_report(ev: Mapping[str, Any], history: Mapping[str, Any] | None = None) -> bytes:
    """The report of evaluation ``ev`` as UTF-8 HTML bytes.

    Example:
        >>> from reprise.evaluate import evaluate
        >>> ev = evaluate(y=[0, 1, 1, 0], y_pred=[0, 1, 0, 0], bootstrap=0)
        >>> render_report(ev) == render_report(dict(ev))
        True
    """
    from plotly.offline import get_plotlyjs

    figs = figures(ev, history)
    sections = [_summary(ev), _gates(ev), _metrics(ev), _per_class(ev),
                _confusion(ev, figs.get("confusion")),
                _curves(figs), _slices(ev), _fairness(ev), _history(figs.get("history"))]
    page = ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            "<title>Evaluation report</title>\n"
            f"<style>{_CSS}</style>\n"
            "<script type=\"text/javascript\">window.PlotlyConfig = {MathJaxConfig: 'local'};"
            "</script>\n"
            f"<script type=\"text/javascript\">{get_plotlyjs()}</script>\n"
            "</head>\n<body>\n<h1>Evaluation report</h1>\n"
            + "\n".join(s for s in sections if s) + "\n</body>\n</html>\n")
    return page.encode("utf-8")


def _summary(ev: Mapping[str, Any]) -> str:
    parts = [f"task: <b>{_e(ev['task'])}</b>", f"rows: <b>{int(ev['n'])}</b>"]
    if ev.get("labels"):
        parts.append("classes: " + ", ".join(_e(v) for v in ev["labels"][:50]))
    if ev.get("positive_label") is not None:
        parts.append(f"positive label: <b>{_e(ev['positive_label'])}</b>")
    boot = ev.get("bootstrap")
    if boot:
        parts.append(f"intervals: {float(boot['confidence']) * 100:g}%, method per metric "
                     f"(bootstrap ones: {int(boot['resamples'])} resamples, seed "
                     f"{_e(boot['seed'])})")
    weights = ev.get("sample_weight")
    if weights:
        parts.append(f"weighted: total weight {float(weights['total']):.6g}, "
                     f"{float(weights['effective_rows']):.1f} effective rows")
    return f'<p class="meta">{" · ".join(parts)}</p>'


def _gates(ev: Mapping[str, Any]) -> str:
    gates = ev.get("gates")
    if not gates:
        return ""
    verdict = ('<p class="pass">All quality gates passed.</p>' if gates["passed"]
               else '<p class="fail">Quality gates failed.</p>')
    rows = [[_e(f"{r['metric']} {r['rule']}"), _num(r["threshold"]), _num(r["actual"]),
             '<span class="pass">pass</span>' if r["passed"] else '<span class="fail">fail</span>',
             "" if r["by"] is None else _num(r["by"])] for r in gates["results"]]
    base = (f'<p class="meta">baseline: {_e(ev["baseline"])}</p>' if ev.get("baseline")
            else "")
    return ("<h2>Quality gates</h2>" + verdict + base
            + _table(["gate", "threshold", "actual", "result", "failed by"], rows))


def _metrics(ev: Mapping[str, Any]) -> str:
    rows = []
    for name, m in ordered(ev["metrics"], list(METRICS)):
        title = METRICS[name].title if name in METRICS else ""
        resamples = m.get("resamples")
        rows.append([_e(name), _num(m.get("value")), _num(m.get("ci_low")),
                     _num(m.get("ci_high")), _e(m.get("ci_method") or ""),
                     "" if resamples is None else _num(resamples), _e(title)])
    return "<h2>Metrics</h2>" + _table(
        ["metric", "value", "CI low", "CI high", "interval method", "resamples", "what"], rows)


def _per_class(ev: Mapping[str, Any]) -> str:
    per = ev.get("per_class")
    if not per:
        return ""
    rows = [[_e(label), _num(v["precision"]), _num(v["recall"]), _num(v["f1"]),
             _num(v["support"])] for label, v in ordered(per, ev.get("labels") or [])]
    return "<h2>Per class</h2>" + _table(["class", "precision", "recall", "F1", "support"], rows)


def _confusion(ev: Mapping[str, Any], fig: str | None) -> str:
    cm = ev.get("confusion_matrix")
    if not cm:
        return ""
    header = ["true \\ predicted", *[str(v) for v in cm["labels"]]]
    rows = [[_e(label), *[_count(c) for c in row]]
            for label, row in zip(cm["labels"], cm["matrix"], strict=True)]
    return "<h2>Confusion matrix</h2>" + (fig or "") + _table(header, rows)


def _count(value: Any) -> str:
    """A confusion-matrix cell: a count, or a sum of sample weights."""
    return str(value) if isinstance(value, int) else f"{float(value):.6g}"


def _curves(figs: Mapping[str, str]) -> str:
    parts = [figs[k] for k in ("roc", "pr", "calibration", "scatter") if k in figs]
    return "<h2>Curves</h2>" + "".join(parts) if parts else ""


def _slices(ev: Mapping[str, Any]) -> str:
    rows_in = ev.get("slices") or []
    if not rows_in:
        return ""
    names = [n for n, _ in ordered(rows_in[0]["metrics"], list(METRICS))]
    rows, classes = [], []
    for r in rows_in:
        flag = "too small" if r["too_small"] else ""
        rows.append([_e(r["segment"]), str(int(r["n"])), flag,
                     *[_num(r["metrics"].get(n)) for n in names]])
        classes.append("small" if r["too_small"] else "")
    opts = ev.get("slice_options") or {}
    note = (f'<p class="meta">Segments under {_e(opts.get("min_size"))} rows are flagged '
            "too small, and segments where a metric is undefined (e.g. F1 with no positive "
            "row or prediction) are listed; neither is chosen as the worst slice.</p>")
    worst = ev.get("worst_slice") or {}
    worst_rows = [[_e(m), "" if w["segment"] is None else _e(w["segment"]),
                   "" if w["n"] is None else str(int(w["n"])), _num(w["value"]),
                   _e(", ".join(w.get("undefined") or []))]
                  for m, w in ordered(worst, list(METRICS))]
    return ("<h2>Slices</h2>" + note + _table(["segment", "rows", "", *names], rows, classes)
            + ("<h3>Worst slice per metric</h3>"
               + _table(["metric", "segment", "rows", "value", "undefined in"], worst_rows)
               if worst_rows else ""))


def _fairness(ev: Mapping[str, Any]) -> str:
    fair = ev.get("fairness")
    if not fair:
        return ""
    intervals = fair.get("intervals") or {}
    gap_rows = []
    for key, title in (("demographic_parity_difference", "demographic parity difference"),
                       ("equal_opportunity_difference", "equal opportunity difference")):
        ci = intervals.get(key) or {}
        gap_rows.append([_e(title), _num(fair[key]), _num(ci.get("ci_low")),
                         _num(ci.get("ci_high"))] if intervals else [_e(title), _num(fair[key])])
    gaps = _table(["gap", "value", "CI low", "CI high"] if intervals else ["gap", "value"],
                  gap_rows)
    rows = [[_e(g["group"]), str(int(g["n"])), "too small" if g["too_small"] else "",
             _num(g["positive_rate"]), _num(g["true_positive_rate"])] for g in fair["groups"]]
    left = fair.get("left_out") or {}
    notes = [f"positive label: {_e(fair['positive_label'])}; gaps are max - min over the groups "
             f"of at least {_e(fair.get('min_size'))} rows"]
    if left.get("too_small"):
        notes.append("left out as too small: " + _e(", ".join(left["too_small"])))
    if left.get("no_positives"):
        notes.append("left out of equal opportunity (no positive rows): "
                     + _e(", ".join(left["no_positives"])))
    if fair.get("interval"):
        notes.append(f"intervals: {float(fair['interval']['confidence']) * 100:g}% "
                     f"{_e(fair['interval']['method'])}")
    return (f"<h2>Fairness over {_e(fair['sensitive'])}</h2>"
            f'<p class="meta">{"; ".join(notes)}.</p>' + gaps
            + _table(["group", "rows", "", "positive rate", "true positive rate"], rows))


def _history(fig: str | None) -> str:
    return "<h2>Training curves</h2>" + fig if fig else ""
