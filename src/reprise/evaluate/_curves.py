"""Curve points for the report: ROC, precision-recall, calibration, predicted vs actual.

Each curve keeps at most :data:`MAX_POINTS` points (evenly spaced along the
curve, ends kept), rounded to 6 decimals: enough to draw, small to store, and
the same bytes every time.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from reprise.evaluate._inputs import Array, Prepared
from reprise.evaluate._metrics import calibration_bins, quiet

__all__ = ["MAX_POINTS", "curves", "downsample"]

MAX_POINTS = 200


def downsample(*columns: Array, max_points: int = MAX_POINTS) -> list[list[float]]:
    """The same evenly spaced rows of each column (first and last kept), as rounded lists."""
    n = len(columns[0])
    if n > max_points:
        keep = np.unique(np.linspace(0, n - 1, max_points).round().astype(np.int64))
        columns = tuple(c[keep] for c in columns)
    return [[round(float(v), 6) for v in c] for c in columns]


def curves(p: Prepared) -> dict[str, Any]:
    """Curve points: ``roc``/``pr`` per class (the positive one for binary) and
    ``calibration`` bins when probabilities exist; ``predicted_vs_actual`` for regression."""
    if not p.is_classification:
        return {"predicted_vs_actual": _scatter(p)}
    if p.proba is None:
        return {}
    classes = [p.positive] if p.positive is not None else list(range(p.k))
    roc: dict[str, Any] = {}
    pr: dict[str, Any] = {}
    for c in classes:
        target = (p.y == c).astype(np.int64)
        positive_weight = float(p.weights @ target)
        if 0 < positive_weight < float(p.weights.sum()):  # positives; ROC also negatives
            roc[str(p.labels[c])] = _roc(target, p.proba[:, c], p.weight)
            pr[str(p.labels[c])] = _pr(target, p.proba[:, c], p.weight)
    bins = calibration_bins(p)
    return {"roc": roc, "pr": pr, "calibration": {
        "predicted": [round(b["predicted"], 6) for b in bins],
        "observed": [round(b["observed"], 6) for b in bins],
        "count": [b["count"] for b in bins]}}


def _roc(target: Array, score: Array, weight: Array | None) -> dict[str, list[float]]:
    from sklearn.metrics import roc_curve

    with quiet():
        fpr, tpr, _ = roc_curve(target, score, sample_weight=weight)
    x, y = downsample(fpr, tpr)
    return {"fpr": x, "tpr": y}


def _pr(target: Array, score: Array, weight: Array | None) -> dict[str, list[float]]:
    from sklearn.metrics import precision_recall_curve

    with quiet():
        precision, recall, _ = precision_recall_curve(target, score, sample_weight=weight)
    # scikit-learn lists them by decreasing threshold reversed; draw from recall 0 up
    x, y = downsample(recall[::-1], precision[::-1])
    return {"recall": x, "precision": y}


def _scatter(p: Prepared) -> dict[str, list[float]]:
    order = np.argsort(p.y, kind="stable")
    x, y = downsample(p.y[order], p.pred[order])
    return {"actual": x, "predicted": y}
