"""The metrics: their names, directions, and point estimates on scikit-learn.

Every point estimate is scikit-learn's function, called with explicit labels so
that a subset (a slice, a fold) missing a class is scored the same way as the
whole set, and with the evaluation's ``sample_weight`` when it has one. The only
metric written here is the calibration error, which scikit-learn does not
provide (it has ``calibration_curve`` but no calibration error).

The calibration error is the root of a *debiased* estimate of the binned squared
calibration error (Kumar, Liang & Ma, "Verified uncertainty calibration", 2019):
with rows cut into 10 equal-width bins of the predicted probability (binary: of
the positive class; multiclass: the top-label confidence, against being right),
it estimates ``sqrt(sum_b P(bin b) * (E[outcome - predicted | bin b])**2)``. In
each bin, the mean of ``d_i * d_j`` over pairs of distinct rows (``d`` = outcome
minus predicted probability) is an unbiased estimate of the squared gap, where
the plug-in ``|mean d|`` (the usual ECE) is biased upward by the noise of the
outcomes: 0.036 for 1,000 perfectly calibrated rows. The estimate of the square
can be negative (then the metric is 0), which is what lets a calibrated model's
interval reach 0. A bin holding a single row contributes nothing.

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

__all__ = ["CALIBRATION_BINS", "METRICS", "MetricInfo", "calibration_bins",
           "calibration_design", "confusion", "debiased_squared_error", "default_metrics",
           "metric_info", "per_class", "point_metrics"]

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
          "Calibration error: root of the debiased binned squared gap between outcome and "
          "predicted probability (10 equal-width bins; 0 = calibrated)"),
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
        p.y, p.pred, labels=list(range(p.k)), average=None, zero_division=0,
        sample_weight=p.weight)
    predicted = np.bincount(p.pred, weights=p.weight, minlength=p.k)  # rows of weight 0 count as absent
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

    return float(accuracy_score(p.y, p.pred, sample_weight=p.weight))


def _balanced_accuracy(p: Prepared) -> float | None:
    from sklearn.metrics import balanced_accuracy_score

    return _finite(balanced_accuracy_score(p.y, p.pred, sample_weight=p.weight))


def _scores(p: Prepared) -> tuple[Array, Array]:
    """Binary: (is positive, positive-class probability). Multiclass: (one-hot, proba)."""
    assert p.proba is not None
    if p.positive is not None:
        return (p.y == p.positive).astype(np.int64), p.proba[:, p.positive]
    return np.eye(p.k, dtype=np.int64)[p.y], p.proba


def _class_weights(target: Array, p: Prepared) -> tuple[Array, Array]:
    """Weight of the positives and of the negatives of each class column (or the target)."""
    w = p.weights
    pos = w @ target
    return pos, w.sum() - pos


def _roc_auc(p: Prepared) -> float | None:
    from sklearn.metrics import roc_auc_score

    target, score = _scores(p)
    pos, neg = _class_weights(target, p)
    if not (np.all(pos > 0) and np.all(neg > 0)):  # a class without positives or negatives
        return None
    return float(roc_auc_score(target, score, average="macro", sample_weight=p.weight))


def _pr_auc(p: Prepared) -> float | None:
    from sklearn.metrics import average_precision_score

    target, score = _scores(p)
    if not np.all(_class_weights(target, p)[0] > 0):
        return None
    return float(average_precision_score(target, score, average="macro",
                                         sample_weight=p.weight))


def _log_loss(p: Prepared) -> float | None:
    from sklearn.metrics import log_loss

    return float(log_loss(p.y, p.proba, labels=list(range(p.k)), sample_weight=p.weight))


def _brier(p: Prepared) -> float | None:
    from sklearn.metrics import brier_score_loss

    if p.positive is not None:
        target, score = _scores(p)
        return float(brier_score_loss(target, score, pos_label=1, sample_weight=p.weight))
    return float(brier_score_loss(p.y, p.proba, labels=list(range(p.k)),
                                  sample_weight=p.weight))


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
    """Non-empty bins: range, count (rows), mean predicted probability, observed frequency
    (both weighted by ``sample_weight`` when given)."""
    conf, target = calibration_target(p)
    ids = bin_ids(conf, n_bins)
    w = p.weights
    count = np.bincount(ids, minlength=n_bins)
    total = np.bincount(ids, weights=w, minlength=n_bins)
    s_conf = np.bincount(ids, weights=w * conf, minlength=n_bins)
    s_true = np.bincount(ids, weights=w * target, minlength=n_bins)
    return [{"low": i / n_bins, "high": (i + 1) / n_bins, "count": int(count[i]),
             "predicted": float(s_conf[i] / total[i]), "observed": float(s_true[i] / total[i])}
            for i in range(n_bins) if total[i] > 0]


def calibration_design(p: Prepared) -> tuple[Array, Array]:
    """Per-row columns whose weighted sums give the debiased squared calibration error.

    For row weights ``a`` (the sample weights, or in a resample the counts times them),
    ``a @ X1`` holds per bin the sums of ``a`` and ``a * d`` (``d`` = outcome - predicted
    probability) and ``a**2 @ X2`` the sums of ``a**2`` and ``a**2 * d**2``: what
    :func:`debiased_squared_error` needs. A row drawn twice is one row weighing twice as
    much, so its two copies never form a pair; that keeps the resampled estimate
    centred on the estimate itself.
    """
    conf, target = calibration_target(p)
    onehot = np.eye(CALIBRATION_BINS)[bin_ids(conf)]
    d = (target - conf)[:, None]
    return np.hstack([onehot, onehot * d]), np.hstack([onehot, onehot * d * d])


def debiased_squared_error(sums: Array, square_sums: Array) -> Array:
    """The debiased binned squared calibration error from ``a @ X1`` and ``a**2 @ X2``.

    Hand-written (scikit-learn has no calibration error): in bin b, the mean of
    ``d_i * d_j`` over pairs of distinct rows, weighted by ``a_i * a_j``, is unbiased for
    the squared mean gap; bins count by their share of the total weight.
    """
    n1, s = np.split(sums, 2, axis=-1)
    n2, q = np.split(square_sums, 2, axis=-1)
    pairs = n1 * n1 - n2
    ok = pairs > 1e-12 * np.maximum(n1 * n1, np.finfo(np.float64).tiny)
    gap2 = np.divide(s * s - q, pairs, out=np.zeros_like(s), where=ok)
    return (n1 * gap2).sum(axis=-1) / n1.sum(axis=-1)  # type: ignore[no-any-return]


def calibrated_draws(p: Prepared, draws: int, seed: int) -> Array:
    """The debiased squared calibration error were the probabilities exactly right:
    outcomes drawn as Bernoulli(p) for the same predictions (Bröcker & Smith's
    consistency resampling), ``draws`` times. Its upper quantile tests calibration."""
    conf, _ = calibration_target(p)
    onehot = np.eye(CALIBRATION_BINS)[bin_ids(conf)]
    a = p.weights
    n1, n2 = a @ onehot, (a * a) @ onehot
    rng = np.random.default_rng([seed, 21])
    out = []
    step = max(1, (1 << 21) // max(p.n, 1))
    for start in range(0, draws, step):
        d: Array = (rng.random((min(step, draws - start), p.n)) < conf) - conf
        s, q = (d * a) @ onehot, (d * d * a * a) @ onehot
        rows = s.shape[0]
        out.append(debiased_squared_error(np.hstack([np.tile(n1, (rows, 1)), s]),
                                          np.hstack([np.tile(n2, (rows, 1)), q])))
    return np.concatenate(out)


def _calibration_error(p: Prepared) -> float | None:
    x1, x2 = calibration_design(p)
    w = p.weights
    squared = float(debiased_squared_error(w @ x1, (w * w) @ x2))
    return float(np.sqrt(max(squared, 0.0)))


def _mae(p: Prepared) -> float | None:
    from sklearn.metrics import mean_absolute_error

    return float(mean_absolute_error(p.y, p.pred, sample_weight=p.weight))


def _rmse(p: Prepared) -> float | None:
    from sklearn.metrics import root_mean_squared_error

    return float(root_mean_squared_error(p.y, p.pred, sample_weight=p.weight))


def _r2(p: Prepared) -> float | None:
    from sklearn.metrics import r2_score

    y = p.y[p.weights > 0]
    if y.size < 2 or np.all(y == y[0]):
        return None  # constant target: undefined (scikit-learn makes up 0 or 1)
    return _finite(r2_score(p.y, p.pred, sample_weight=p.weight))


def _mape(p: Prepared) -> float | None:
    from sklearn.metrics import mean_absolute_percentage_error

    return float(mean_absolute_percentage_error(p.y, p.pred, sample_weight=p.weight))


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
    """The confusion matrix: rows are true classes, columns predicted ones (rows counted;
    with ``sample_weight``, sums of weights)."""
    from sklearn.metrics import confusion_matrix

    matrix = confusion_matrix(p.y, p.pred, labels=list(range(p.k)), sample_weight=p.weight)
    cell = int if p.weight is None else float
    return {"labels": [str(label) for label in p.labels],
            "matrix": [[cell(v) for v in row] for row in matrix]}
