"""The metrics: their names, directions, and point estimates on scikit-learn.

Every point estimate is scikit-learn's function, called with explicit labels so
that a subset (a slice, a fold) missing a class is scored the same way as the
whole set. The only metric written here is the expected calibration error,
which scikit-learn does not provide (it has ``calibration_curve`` but no ECE).

A metric that is undefined on the rows given (ROC AUC with one class, R² of a
constant target) is ``None``, never NaN and never an exception: the caller
decides what an undefined value means (a skipped resample, an unscored slice).
That holds for the positive class of a binary task too: precision with no
positive prediction, recall with no positive row and F1 with neither are
``None`` (scikit-learn warns and reports 0, which made a perfectly predicted
slice without positives the worst one). A macro average is scikit-learn's
default one: over the classes present in ``y`` or the predictions (a class
absent from both is not scored as 0), a 0/0 inside it counting 0.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from reprise.core.errors import UserError
from reprise.evaluate._inputs import Array, Prepared

__all__ = ["CALIBRATION_BINS", "METRICS", "MetricInfo", "calibration_bins", "confusion",
           "default_metrics", "metric_info", "per_class", "point_metrics"]

CALIBRATION_BINS = 10


@dataclass(frozen=True)
class MetricInfo:
    """What one metric is: the task family it scores, its direction, what it needs."""

    name: str
    task: str  # "classification" or "regression"
    higher_is_better: bool
    needs_proba: bool
    title: str


def _info(name: str, task: str, higher: bool, proba: bool, title: str) -> MetricInfo:
    return MetricInfo(name, task, higher, proba, title)


METRICS: dict[str, MetricInfo] = {m.name: m for m in (
    _info("accuracy", "classification", True, False, "Accuracy"),
    _info("balanced_accuracy", "classification", True, False, "Balanced accuracy"),
    _info("precision", "classification", True, False,
          "Precision (positive class; macro for multiclass)"),
    _info("recall", "classification", True, False, "Recall (positive class; macro for multiclass)"),
    _info("f1", "classification", True, False, "F1 (positive class; macro for multiclass)"),
    _info("precision_macro", "classification", True, False, "Precision, macro average"),
    _info("recall_macro", "classification", True, False, "Recall, macro average"),
    _info("f1_macro", "classification", True, False, "F1, macro average"),
    _info("roc_auc", "classification", True, True, "ROC AUC (one-vs-rest macro for multiclass)"),
    _info("pr_auc", "classification", True, True, "PR AUC (average precision)"),
    _info("log_loss", "classification", False, True, "Log loss"),
    _info("brier", "classification", False, True, "Brier score"),
    _info("calibration_error", "classification", False, True,
          "Expected calibration error (equal-width bins)"),
    _info("mae", "regression", False, False, "Mean absolute error"),
    _info("rmse", "regression", False, False, "Root mean squared error"),
    _info("r2", "regression", True, False, "R²"),
    _info("mape", "regression", False, False, "Mean absolute percentage error"),
)}


def metric_info(name: str) -> MetricInfo:
    """The :class:`MetricInfo` of ``name``; a ``UserError`` listing the known names otherwise."""
    found = METRICS.get(name)
    if found is None:
        raise UserError(f"unknown metric {name!r}; known metrics are {', '.join(METRICS)}.")
    return found


def default_metrics(p: Prepared) -> list[str]:
    """Every metric that applies to ``p`` (probability metrics only when it has them)."""
    family = "classification" if p.is_classification else "regression"
    return [m.name for m in METRICS.values()
            if m.task == family and (p.proba is not None or not m.needs_proba)]


def check_applicable(names: Sequence[str], p: Prepared) -> None:
    """Raise for a metric of the other task family, or one needing absent probabilities."""
    family = "classification" if p.is_classification else "regression"
    for name in names:
        info = metric_info(name)
        if info.task != family:
            raise UserError(f"metric {name!r} scores {info.task}, but this is a {p.task} "
                            f"evaluation; use one of {', '.join(default_metrics(p))}.")
        if info.needs_proba and p.proba is None:
            raise UserError(f"metric {name!r} needs class probabilities; give y_proba= or a "
                            "model with predict_proba.")


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Silence scikit-learn's warnings about undefined values: we report them as None."""
    from sklearn.exceptions import UndefinedMetricWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        warnings.filterwarnings("ignore", message="y_pred contains classes not in y_true")
        warnings.filterwarnings("ignore", message=".*[Oo]nly one class.*")
        warnings.filterwarnings("ignore", message="A single label was found")
        yield


def _finite(value: Any) -> float | None:
    v = float(value)
    return v if np.isfinite(v) else None


def point_metrics(p: Prepared, names: Sequence[str]) -> dict[str, float | None]:
    """Point estimates of ``names`` on ``p``; None where undefined."""
    out: dict[str, float | None] = {}
    prf: tuple[Array, Array, Array, Array] | None = None
    with quiet():
        for name in names:
            if name in _PRF:
                prf = prf or _prf(p)
                out[name] = _from_prf(p, prf, name)
            else:
                out[name] = _SINGLE[name](p)
    return out


_PRF = ("precision", "recall", "f1", "precision_macro", "recall_macro", "f1_macro")


_PRF_PARTS = ("precision", "recall", "f1")


def _prf(p: Prepared) -> tuple[Array, Array, Array, Array]:
    """Per class: precision, recall, F1 (0/0 as 0) and which of them are defined, as a
    ``(3, k)`` mask: a prediction of the class, a row of it, either."""
    from sklearn.metrics import precision_recall_fscore_support

    prec, rec, f1, support = precision_recall_fscore_support(
        p.y, p.pred, labels=list(range(p.k)), average=None, zero_division=0)
    predicted = np.bincount(p.pred, minlength=p.k)
    defined = np.stack([predicted > 0, support > 0, (predicted > 0) | (support > 0)])
    return prec, rec, f1, defined


def _from_prf(p: Prepared, prf: tuple[Array, Array, Array, Array], name: str) -> float | None:
    base, _, macro = name.partition("_")
    i = _PRF_PARTS.index(base)
    values, defined = prf[i], prf[3]
    if macro or p.positive is None:
        # scikit-learn's default labels: the classes in y or the predictions (row 2 of
        # ``defined``); a class absent from both is left out rather than scored 0
        return float(np.mean(values[defined[2]]))
    return float(values[p.positive]) if defined[i, p.positive] else None


def _accuracy(p: Prepared) -> float | None:
    from sklearn.metrics import accuracy_score

    return float(accuracy_score(p.y, p.pred))


def _balanced_accuracy(p: Prepared) -> float | None:
    from sklearn.metrics import balanced_accuracy_score

    return _finite(balanced_accuracy_score(p.y, p.pred))


def _scores(p: Prepared) -> tuple[Array, Array]:
    """Binary: (is positive, positive-class probability). Multiclass: (one-hot, proba)."""
    assert p.proba is not None
    if p.positive is not None:
        return (p.y == p.positive).astype(np.int64), p.proba[:, p.positive]
    return np.eye(p.k, dtype=np.int64)[p.y], p.proba


def _has_both_classes(target: Array) -> bool:
    """Every class column (or the binary target) holds positives and negatives."""
    pos = target.sum(axis=0)
    return bool(np.all(pos > 0) and np.all(pos < target.shape[0]))


def _roc_auc(p: Prepared) -> float | None:
    from sklearn.metrics import roc_auc_score

    target, score = _scores(p)
    if not _has_both_classes(target):
        return None
    return float(roc_auc_score(target, score, average="macro"))


def _pr_auc(p: Prepared) -> float | None:
    from sklearn.metrics import average_precision_score

    target, score = _scores(p)
    if not np.all(target.sum(axis=0) > 0):
        return None
    return float(average_precision_score(target, score, average="macro"))


def _log_loss(p: Prepared) -> float | None:
    from sklearn.metrics import log_loss

    return float(log_loss(p.y, p.proba, labels=list(range(p.k))))


def _brier(p: Prepared) -> float | None:
    from sklearn.metrics import brier_score_loss

    if p.positive is not None:
        target, score = _scores(p)
        return float(brier_score_loss(target, score, pos_label=1))
    return float(brier_score_loss(p.y, p.proba, labels=list(range(p.k))))


def calibration_target(p: Prepared) -> tuple[Array, Array]:
    """What calibration compares: binary, the positive-class probability against the
    outcome; multiclass, the top-label confidence against being right."""
    assert p.proba is not None
    if p.positive is not None:
        return p.proba[:, p.positive], (p.y == p.positive).astype(np.float64)
    return p.proba.max(axis=1), (p.proba.argmax(axis=1) == p.y).astype(np.float64)


def bin_ids(conf: Array, n_bins: int = CALIBRATION_BINS) -> Array:
    """Equal-width bin of each confidence, exactly as ``sklearn.calibration.calibration_curve``
    assigns them (so the calibration plot and the ECE use the same bins)."""
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    return np.searchsorted(edges[1:-1], conf)


def calibration_bins(p: Prepared, n_bins: int = CALIBRATION_BINS) -> list[dict[str, float]]:
    """Non-empty bins: range, count, mean predicted probability, observed frequency."""
    conf, target = calibration_target(p)
    ids = bin_ids(conf, n_bins)
    count = np.bincount(ids, minlength=n_bins)
    s_conf = np.bincount(ids, weights=conf, minlength=n_bins)
    s_true = np.bincount(ids, weights=target, minlength=n_bins)
    return [{"low": i / n_bins, "high": (i + 1) / n_bins, "count": int(count[i]),
             "predicted": float(s_conf[i] / count[i]), "observed": float(s_true[i] / count[i])}
            for i in range(n_bins) if count[i]]


def _calibration_error(p: Prepared) -> float | None:
    # Hand-written: scikit-learn has no expected calibration error. ECE = sum over bins
    # of (bin share) * |observed frequency - mean confidence|.
    return float(sum(b["count"] * abs(b["observed"] - b["predicted"])
                     for b in calibration_bins(p)) / p.n)


def _mae(p: Prepared) -> float | None:
    from sklearn.metrics import mean_absolute_error

    return float(mean_absolute_error(p.y, p.pred))


def _rmse(p: Prepared) -> float | None:
    from sklearn.metrics import root_mean_squared_error

    return float(root_mean_squared_error(p.y, p.pred))


def _r2(p: Prepared) -> float | None:
    from sklearn.metrics import r2_score

    if p.n < 2:
        return None
    if np.all(p.y == p.y[0]):  # constant target: undefined (scikit-learn makes up 0 or 1)
        return None
    return _finite(r2_score(p.y, p.pred))


def _mape(p: Prepared) -> float | None:
    from sklearn.metrics import mean_absolute_percentage_error

    return float(mean_absolute_percentage_error(p.y, p.pred))


_SINGLE: dict[str, Callable[[Prepared], float | None]] = {
    "accuracy": _accuracy, "balanced_accuracy": _balanced_accuracy, "roc_auc": _roc_auc,
    "pr_auc": _pr_auc, "log_loss": _log_loss, "brier": _brier,
    "calibration_error": _calibration_error, "mae": _mae, "rmse": _rmse, "r2": _r2,
    "mape": _mape,
}


def per_class(p: Prepared) -> dict[str, dict[str, float | int | None]]:
    """Precision, recall, F1 and support of every class, keyed by the label as text;
    None where undefined (precision of a class never predicted, recall of a class with
    no row, F1 of a class with neither)."""
    with quiet():
        prf = _prf(p)
    support = np.bincount(p.y, minlength=p.k)
    out: dict[str, dict[str, float | int | None]] = {}
    for c, label in enumerate(p.labels):
        row: dict[str, float | int | None] = {
            part: float(prf[i][c]) if prf[3][i, c] else None
            for i, part in enumerate(_PRF_PARTS)}
        row["support"] = int(support[c])
        out[str(label)] = row
    return out


def confusion(p: Prepared) -> dict[str, Any]:
    """The confusion matrix: rows are true classes, columns predicted ones."""
    from sklearn.metrics import confusion_matrix

    matrix = confusion_matrix(p.y, p.pred, labels=list(range(p.k)))
    return {"labels": [str(label) for label in p.labels],
            "matrix": [[int(v) for v in row] for row in matrix]}
