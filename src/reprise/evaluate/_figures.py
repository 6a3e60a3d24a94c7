"""Plotly figures of an evaluation, as HTML fragments with fixed ids.

Every fragment is ``fig.to_html(full_html=False, include_plotlyjs=False,
div_id=...)``: plotly.js itself is embedded once by the page (see
``_report``), and a fixed ``div_id`` replaces plotly's random one so the same
evaluation renders to the same bytes. The template is pinned too, so a user's
``plotly.io.templates.default`` cannot change the report.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["figures", "ordered"]

_TEMPLATE = "plotly_white"
_CONFIG = {"displaylogo": False, "responsive": True}


def ordered(items: Mapping[str, Any], order: Sequence[Any]) -> list[tuple[str, Any]]:
    """``items`` in the order of ``order`` (then the rest sorted): the page must not depend
    on dict order, which a stored-and-loaded evaluation (sorted JSON keys) does not keep."""
    rank = {str(k): i for i, k in enumerate(order)}
    return sorted(items.items(), key=lambda kv: (rank.get(kv[0], len(rank)), kv[0]))


def _text(value: Any) -> str:
    # plotly.js reads labels as a small HTML subset; escaped, a user's label stays text
    return html.escape(str(value))


def _fragment(fig: Any, div_id: str) -> str:
    fig.update_layout(template=_TEMPLATE, height=420, margin={"l": 60, "r": 20, "t": 50,
                                                              "b": 50})
    return str(fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id,
                           config=_CONFIG))


def figures(ev: Mapping[str, Any], history: Mapping[str, Any] | None) -> dict[str, str]:
    """HTML fragments by section name: confusion, roc, pr, calibration, scatter, history."""
    curves = ev.get("curves") or {}
    out: dict[str, str] = {}
    if ev.get("confusion_matrix"):
        out["confusion"] = _confusion(ev["confusion_matrix"])
    labels = ev.get("labels") or []
    if curves.get("roc"):
        out["roc"] = _lines(ordered(curves["roc"], labels), "fpr", "tpr", "ROC curve",
                            "False positive rate", "True positive rate", "fig-roc",
                            diagonal=True)
    if curves.get("pr"):
        out["pr"] = _lines(ordered(curves["pr"], labels), "recall", "precision",
                           "Precision-recall curve", "Recall", "Precision", "fig-pr",
                           diagonal=False)
    if curves.get("calibration", {}).get("predicted"):
        out["calibration"] = _calibration(curves["calibration"])
    if curves.get("predicted_vs_actual"):
        out["scatter"] = _scatter(curves["predicted_vs_actual"])
    if history:
        out["history"] = _history(history)
    return out


def _confusion(cm: Mapping[str, Any]) -> str:
    import plotly.graph_objects as go

    labels = [_text(v) for v in cm["labels"]]
    fig = go.Figure(go.Heatmap(z=cm["matrix"], x=labels, y=labels, colorscale="Blues",
                               text=cm["matrix"], texttemplate="%{text}", showscale=False))
    fig.update_layout(title="Confusion matrix", xaxis_title="Predicted", yaxis_title="True",
                      xaxis={"type": "category"},
                      yaxis={"type": "category", "autorange": "reversed"})
    return _fragment(fig, "fig-confusion")


def _lines(per_class: list[tuple[str, Any]], xk: str, yk: str, title: str, xt: str, yt: str,
           div_id: str, *, diagonal: bool) -> str:
    import plotly.graph_objects as go

    fig = go.Figure()
    for label, pts in per_class:
        fig.add_trace(go.Scatter(x=pts[xk], y=pts[yk], mode="lines", name=_text(label)))
    if diagonal:
        fig.add_trace(go.Scatter(x=[0, 1], y=[0, 1], mode="lines", name="chance",
                                 line={"dash": "dash", "color": "grey"}))
    fig.update_layout(title=title, xaxis_title=xt, yaxis_title=yt, xaxis={"range": [0, 1]},
                      yaxis={"range": [0, 1.02]})
    return _fragment(fig, div_id)


def _calibration(cal: Mapping[str, Any]) -> str:
    import plotly.graph_objects as go

    fig = go.Figure([
        go.Scatter(x=cal["predicted"], y=cal["observed"], mode="lines+markers", name="model",
                   text=[f"{c} rows" for c in cal["count"]]),
        go.Scatter(x=[0, 1], y=[0, 1], mode="lines", name="perfectly calibrated",
                   line={"dash": "dash", "color": "grey"}),
    ])
    fig.update_layout(title="Calibration", xaxis_title="Mean predicted probability",
                      yaxis_title="Observed frequency", xaxis={"range": [0, 1]},
                      yaxis={"range": [0, 1.02]})
    return _fragment(fig, "fig-calibration")


def _scatter(pts: Mapping[str, Any]) -> str:
    import plotly.graph_objects as go

    lo = min([*pts["actual"], *pts["predicted"]])
    hi = max([*pts["actual"], *pts["predicted"]])
    fig = go.Figure([
        go.Scatter(x=pts["actual"], y=pts["predicted"], mode="markers", name="rows"),
        go.Scatter(x=[lo, hi], y=[lo, hi], mode="lines", name="perfect",
                   line={"dash": "dash", "color": "grey"}),
    ])
    fig.update_layout(title="Predicted vs actual", xaxis_title="Actual",
                      yaxis_title="Predicted")
    return _fragment(fig, "fig-scatter")


def _history(history: Mapping[str, Any]) -> str:
    import plotly.graph_objects as go

    fig = go.Figure([go.Scatter(x=s["step"], y=s["value"], mode="lines", name=_text(key))
                     for key, s in sorted(history.items())])
    fig.update_layout(title="Training curves", xaxis_title="Step", yaxis_title="Value")
    return _fragment(fig, "fig-history")
