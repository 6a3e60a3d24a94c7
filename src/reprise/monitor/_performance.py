"""Performance of one live window from the labels that arrived (feedback), with the
intervals of :func:`reprise.evaluate.evaluate`, against the version's reference metrics.

Verdicts: ``unknown`` (no label yet), ``insufficient`` (fewer labelled rows than the
policy's minimum sample: metrics shown, no verdict), ``degraded`` (a metric's interval
lies wholly on the wrong side of its reference value — below it for a metric where
higher is better), ``ok`` (every interval reaches the reference value), or ``unknown``
again when the version has no reference metric to compare with.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from reprise.core.errors import UserError
from reprise.monitor._model_reference import ModelReference
from reprise.monitor._policy import DriftPolicy

__all__ = ["BOOTSTRAP", "window_performance"]

BOOTSTRAP = 500
_DEFAULT = {"classification": ["accuracy"], "regression": ["mae", "rmse"]}


def window_performance(y: list[Any], pred: list[Any], proba: list[Any],
                       mref: ModelReference, policy: DriftPolicy) -> dict[str, Any]:
    n = len(y)
    if n == 0:
        return {"verdict": "unknown", "labelled": 0,
                "reason": "no labels have arrived for this window", "metrics": {}}
    regression = mref.task == "regression"
    names = _metric_names(mref, regression, proba)
    metrics = _evaluate(y, pred, proba, mref, names, regression)
    for name, entry in metrics.items():
        entry["reference"] = mref.metrics.get(name)
        entry["degraded"] = _degraded(name, entry)
    out: dict[str, Any] = {"labelled": n, "metrics": metrics}
    if n < policy.min_rows:
        return {**out, "verdict": "insufficient",
                "reason": f"{n} labelled rows, fewer than the minimum of {policy.min_rows}: "
                          "no verdict"}
    if not any(e["reference"] is not None for e in metrics.values()):
        return {**out, "verdict": "unknown",
                "reason": "the version's card has no reference value for these metrics"}
    if any(e["degraded"] for e in metrics.values()):
        return {**out, "verdict": "degraded", "reason": "an interval lies wholly below the "
                "reference (worse than at training)"}
    return {**out, "verdict": "ok", "reason": "every interval reaches the reference value"}


def _metric_names(mref: ModelReference, regression: bool, proba: list[Any]) -> list[str]:
    from reprise.evaluate import METRICS

    task = "regression" if regression else "classification"
    have_proba = any(p is not None for p in proba)
    names = [m for m in mref.metrics if m in METRICS and METRICS[m].task == task
             and (have_proba or not METRICS[m].needs_proba)]
    return names or _DEFAULT[task]


def _evaluate(y: list[Any], pred: list[Any], proba: list[Any], mref: ModelReference,
              names: list[str], regression: bool) -> dict[str, dict[str, Any]]:
    from reprise.evaluate import evaluate

    kwargs: dict[str, Any] = {"bootstrap": BOOTSTRAP, "report": False, "log": False,
                              "seed": 0}
    if regression:
        kwargs.update(y=np.asarray(y, dtype=float), y_pred=np.asarray(pred, dtype=float),
                      task="regression")
    else:
        # labels arrive as JSON: "1" and 1 name the same class of the model
        classes = list(mref.classes or [])
        by_text = {str(c): c for c in classes}
        kwargs.update(y=[by_text.get(str(v), v) for v in y],
                      y_pred=[by_text.get(str(v), v) for v in pred])
        if classes and all(p is not None and len(p) == len(classes) for p in proba):
            kwargs.update(y_proba=np.asarray(proba, dtype=float), labels=classes)
            if len(classes) == 2:
                kwargs["positive_label"] = classes[1]
    try:
        ev = evaluate(metrics=names, **kwargs)
    except UserError:  # e.g. a metric that does not apply to these labels
        ev = evaluate(metrics=_DEFAULT["regression" if regression else "classification"],
                      **kwargs)
    return {k: dict(v) for k, v in ev["metrics"].items()}


def _degraded(name: str, entry: dict[str, Any]) -> bool:
    from reprise.evaluate import METRICS

    ref, low, high = entry.get("reference"), entry.get("ci_low"), entry.get("ci_high")
    if ref is None or low is None or high is None or name not in METRICS:
        return False
    return bool(high < ref) if METRICS[name].higher_is_better else bool(low > ref)
