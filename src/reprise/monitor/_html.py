"""The drift report as one offline HTML file, in the house style of ``reprise report``.

Size is bounded whatever the row count: the page holds the reports' summaries (shares
on the coarse bins or the categories), never a row. plotly.js is embedded once (about
4.8 MB of the 5 MB budget), so the charts are drawn in the browser from one compact JSON
block by a few lines of script instead of one plotly figure (with its template) per
column, and at most :data:`MAX_CHARTS` columns are charted and :data:`MAX_ROWS` listed
(drifted columns first, then by effect size); ``--json`` has every column.

Like the evaluation report it is deterministic (no timestamps, fixed ordering) and every
string from the data is escaped.
"""

from __future__ import annotations

import html
import json
from typing import Any

import numpy as np

from reprise.evaluate._report import _CSS, _table
from reprise.monitor._compare import ColumnDrift, DriftReport
from reprise.monitor._reference import Reference, category_counts, coarse_counts
from reprise.monitor._summary import CategoricalSummary, NumericSummary
from reprise.monitor._window import Window

__all__ = ["MAX_CHARTS", "MAX_ROWS", "render_drift_report"]

MAX_CHARTS = 30
MAX_ROWS = 300
MAX_BARS = 20

_SCRIPT = """
(function(){
var data=JSON.parse(document.getElementById('drift-data').textContent);
data.forEach(function(c,i){
 var el=document.getElementById('chart-'+i);
 Plotly.newPlot(el,[{type:'bar',name:'reference',x:c.labels,y:c.ref,marker:{color:'#8da0cb'}},
  {type:'bar',name:'current',x:c.labels,y:c.cur,marker:{color:'#fc8d62'}}],
  {title:{text:c.title},barmode:'group',height:300,margin:{l:50,r:10,t:40,b:80},
   yaxis:{title:{text:'share'},tickformat:'.0%'},xaxis:{type:'category'},
   paper_bgcolor:'#fff',plot_bgcolor:'#fff',legend:{orientation:'h'}},
  {displaylogo:false,responsive:true,staticPlot:false});
});})();
"""


def _e(value: Any) -> str:
    return html.escape(str(value))


def _num(value: Any, digits: int = 4) -> str:
    if value is None:
        return '<span class="muted">-</span>'
    if isinstance(value, bool | int):
        return str(value)
    v = float(value)
    return f"{v:.{digits}g}" if (v != 0 and abs(v) < 1e-3) else f"{v:.{digits}f}"


def render_drift_report(report: DriftReport, reference: Reference, window: Window, *,
                        title: str = "Drift report") -> bytes:
    """The report as UTF-8 HTML bytes (offline: plotly.js is embedded).

    Example:
        >>> import pyarrow as pa
        >>> from reprise.monitor import Window, compare, fit_reference
        >>> ref = fit_reference(pa.table({"x": [float(i % 7) for i in range(700)]}))
        >>> w = Window(ref); w.update(pa.table({"x": [1.0] * 200}))
        >>> render_drift_report(compare(ref, w), ref, w)[:15]
        b'<!DOCTYPE html>'
    """
    from plotly.offline import get_plotlyjs

    ranked = sorted(report.columns, key=_rank)
    charted = [c for c in ranked if c.column in window.columns and c.verdict in (
        "drift", "no_drift", "insufficient")][:MAX_CHARTS]
    charts = [_chart(c, reference, window) for c in charted]
    blob = json.dumps(charts, sort_keys=True, separators=(",", ":"),
                      allow_nan=False).replace("<", "\\u003c")
    divs = "".join(f'<div id="chart-{i}" class="chart"></div>' for i in range(len(charts)))
    page = ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>{_e(title)}</title>\n<style>{_CSS}.chart{{max-width:540px;"
            "display:inline-block;width:49%}</style>\n"
            "<script type=\"text/javascript\">window.PlotlyConfig = {MathJaxConfig: 'local'};"
            "</script>\n"
            f"<script type=\"text/javascript\">{get_plotlyjs()}</script>\n"
            f"</head>\n<body>\n<h1>{_e(title)}</h1>\n"
            + _summary(report) + _columns(ranked)
            + (f"<h2>Distributions</h2><p class=\"meta\">Shares per coarse bin (numbers) or "
               f"category; {len(charts)} of {len(report.columns)} columns, drifted first."
               f"</p>{divs}" if charts else "")
            + f'<script type="application/json" id="drift-data">{blob}</script>\n'
            + f"<script type=\"text/javascript\">{_SCRIPT}</script>\n</body>\n</html>\n")
    return page.encode("utf-8")


def _rank(c: ColumnDrift) -> tuple[int, float, str]:
    order = {"drift": 0, "no_drift": 1, "insufficient": 2}.get(c.verdict, 3)
    size = max((abs(v) for v in c.effect.values() if v is not None), default=0.0)
    return (0 if c.significant else 1, order * 1.0 - size, c.column)


def _summary(r: DriftReport) -> str:
    verdict = {"drift": '<p class="fail">Drift: ' + _e(", ".join(r.drifted[:20]))
               + (" ..." if len(r.drifted) > 20 else "") + "</p>",
               "no_drift": '<p class="pass">No drift.</p>',
               "insufficient": '<p class="muted">Insufficient data: no verdict.</p>'}
    parts = [f"reference rows: <b>{r.reference_rows}</b>",
             f"window rows: <b>{r.window_rows}</b>",
             f"correction: <b>{_e(r.correction)}</b> at α = {r.alpha:g}",
             f"minimum sample: {_e(r.policy['min_rows'])} values",
             f"tests up to {_e(r.policy['ks_max_rows'])} values, distances above"]
    if r.absent:
        parts.append("absent from the window: " + _e(", ".join(r.absent)))
    if r.extra:
        parts.append("not in the reference: " + _e(", ".join(r.extra[:20])))
    return verdict[r.verdict] + f'<p class="meta">{" · ".join(parts)}</p>'


def _columns(ranked: list[ColumnDrift]) -> str:
    rows, classes = [], []
    for c in ranked[:MAX_ROWS]:
        rows.append([_e(c.column), _e(c.kind), _verdict(c), _e(c.method or ""),
                     _num(c.statistic), _num(c.p_value), _num(c.threshold),
                     _num(c.p_adjusted), _num(c.effect.get("wasserstein")),
                     _num(c.effect.get("js")), _num(c.effect.get("tvd")),
                     _num(c.reference_missing_rate), _num(c.missing_rate),
                     _unseen(c), str(c.values), _e(c.reason)])
        classes.append("small" if c.verdict == "insufficient" else "")
    more = len(ranked) - MAX_ROWS
    note = f'<p class="meta">{more} more columns: see --json.</p>' if more > 0 else ""
    return "<h2>Columns</h2>" + _table(
        ["column", "kind", "verdict", "method", "statistic", "p", "threshold", "p adjusted",
         "Wasserstein/σ", "JS", "TVD", "missing ref", "missing now", "unseen", "values",
         "note"], rows, classes) + note


def _unseen(c: ColumnDrift) -> str:
    if not c.unseen:
        return _num(None)
    top = list(c.unseen["labels"].items())[:3]
    labels = ", ".join(f"{_e(k)} ({v})" for k, v in top)
    return _num(c.unseen["share"]) + (f"<br><small>{labels}</small>" if labels else "")


def _verdict(c: ColumnDrift) -> str:
    if c.verdict == "drift":
        return ('<span class="fail">drift</span>' if c.significant
                else '<span class="fail">drift</span> <span class="muted">(not after '
                "correction)</span>")
    if c.verdict == "no_drift":
        return '<span class="pass">no drift</span>'
    return f'<span class="muted">{_e(c.verdict)}</span>'


def _chart(c: ColumnDrift, reference: Reference, window: Window) -> dict[str, Any]:
    ref, cur = reference.columns[c.column], window.columns[c.column]
    if isinstance(ref, NumericSummary) and isinstance(cur, NumericSummary):
        a, b = coarse_counts(ref), coarse_counts(cur)
        labels = _bin_labels(ref)
    else:
        assert isinstance(ref, CategoricalSummary) and isinstance(cur, CategoricalSummary)
        a, b = category_counts(ref), category_counts(cur)
        labels = [*ref.spec.categories, "(other)", "(unseen)"]
    pa, pb = _shares(a), _shares(b)
    keep = np.argsort(-np.maximum(pa, pb), kind="stable")[:MAX_BARS]
    keep = np.sort(keep) if isinstance(ref, NumericSummary) else keep
    return {"title": html.escape(c.column), "labels": [html.escape(labels[i]) for i in keep],
            "ref": [round(float(pa[i]), 5) for i in keep],
            "cur": [round(float(pb[i]), 5) for i in keep]}


def _shares(counts: np.ndarray) -> np.ndarray:
    total = counts.sum()
    return counts / total if total else np.zeros(len(counts))


def _bin_labels(s: NumericSummary) -> list[str]:
    edges, groups = s.spec.edges, s.spec.coarse
    n = int(groups.max()) + 1
    labels = []
    for g in range(n):
        fine = np.flatnonzero(groups == g)
        if g == 0:
            labels.append(f"< {edges[0]:.4g}")
        elif g == n - 1:
            labels.append(f"> {edges[-1]:.4g}")
        else:
            lo = edges[max(int(fine[0]) - 1, 0)]
            hi = edges[min(int(fine[-1]), len(edges) - 1)]
            labels.append(f"{lo:.4g} – {hi:.4g}")
    return labels
