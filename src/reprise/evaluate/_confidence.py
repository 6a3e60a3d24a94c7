"""Confidence intervals per metric, each by a method with known coverage.

========================== =========================== ==================================
metric                     ``ci_method``                why
========================== =========================== ==================================
accuracy; binary precision ``clopper-pearson``          a proportion of rows (precision: of
and recall                                              predicted positives; recall: of
                                                        positives); exact, never zero-width
binary F1                  ``clopper-pearson``          F1 = 2J / (1 + J) with J = TP / (TP
                                                        + FP + FN) a proportion of the rows
                                                        that are not true negatives; J's
                                                        exact interval maps through
balanced accuracy, macro   ``mover-clopper-pearson``    a mean of per-class proportions on
precision / recall                                      disjoint rows (independent)
macro F1                   ``mover-clopper-pearson``    per-class F1 as above, combined with
                                                        their bootstrap correlations
ROC AUC                    ``delong-logit+newcombe``    the union of DeLong's interval on
                                                        the logit scale and Newcombe's score
                                                        interval (see :func:`_roc_auc`)
PR AUC (average precision) ``logit+bca``                the union of Boyd et al.'s (2013)
                                                        logit(AP) +- z / sqrt(P AP (1 -
                                                        AP)) for P positives (exact at 0
                                                        and 1) and a BCa bootstrap
log loss, Brier, MAE,      ``bootstrap-t``              means of a per-row loss, often very
RMSE, MAPE, R²                                          skewed (rare large losses): the
                                                        studentized bootstrap widens the
                                                        side that needs it (RMSE: on MSE;
                                                        R²: by its influence function)
calibration error          ``percentile+consistency``   bootstrap of the debiased squared
                                                        gap, whose resamples pair distinct
                                                        rows only (so they centre on the
                                                        estimate); 0 stays in unless
                                                        consistency resampling rejects
                                                        calibration
========================== =========================== ==================================

Multiclass macro averages combine per-class intervals with MOVER (Zou & Donner, 2008),
using correlations from the same bootstrap resamples where classes share rows. The
coverage of every method is measured by ``bench/bench_coverage.py`` (README:
"Evaluation"). Sample weights enter as effective counts (:mod:`._intervals`) and in
every resample.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from reprise.evaluate._bootstrap import (
    DEFAULT_RESAMPLES,
    check_options,
    jackknife_values,
    point_values,
    resample_values,
    to_metric,
)
from reprise.evaluate._inputs import Array, Prepared
from reprise.evaluate._intervals import (
    bca,
    bootstrap_t,
    clopper_pearson,
    delong,
    effective_count,
    logit_interval,
    mover,
    newcombe_auc,
)
from reprise.evaluate._metrics import calibrated_draws

__all__ = ["BOOTSTRAPPED", "confidence_intervals", "interval_method"]

#: Means of a per-row loss, and R²: studentized bootstrap (RMSE: of the mean squared error).
STUDENTIZED = ("log_loss", "brier", "mae", "rmse", "mape", "r2")
#: Percentile bootstrap of the debiased squared gap.
PERCENTILE = ("calibration_error",)
#: Metrics whose interval uses resampled values of the metric itself.
BOOTSTRAPPED = (*STUDENTIZED, *PERCENTILE, "pr_auc")
_MOVER = ("balanced_accuracy", "precision_macro", "recall_macro", "f1_macro")

Bounds = tuple[float, float] | None


@dataclass(frozen=True)
class _Inputs:
    """What the methods read: the evaluation, point values, resampled values."""

    p: Prepared
    est: dict[str, Any]
    boot: dict[str, Array]
    jack: dict[str, Array]
    confidence: float
    seed: int


def interval_method(name: str, task: str) -> str:
    """The ``ci_method`` metric ``name`` gets in a ``task`` evaluation."""
    if name in STUDENTIZED:
        return "bootstrap-t"
    if name in PERCENTILE:
        return "percentile+consistency"
    if name == "roc_auc":
        return "delong-logit+newcombe"
    if name == "pr_auc":
        return "logit+bca" if task == "binary" else "mover-logit+bca"
    macro = task != "binary" and name in ("precision", "recall", "f1")
    return "mover-clopper-pearson" if macro or name in _MOVER else "clopper-pearson"


def confidence_intervals(p: Prepared, names: Sequence[str], *,
                         resamples: int = DEFAULT_RESAMPLES, confidence: float = 0.95,
                         seed: int = 0) -> dict[str, dict[str, Any]]:
    """Intervals of ``names``: ``{name: {"ci_low", "ci_high", "ci_method"}}``, plus
    ``"resamples"`` (those on which the metric was defined) for bootstrapped ones.

    Example:
        >>> from reprise.evaluate._inputs import prepare
        >>> p = prepare([1] * 50, [1] * 50, labels=[0, 1])
        >>> ci = confidence_intervals(p, ["accuracy"])["accuracy"]
        >>> round(ci["ci_low"], 3), ci["ci_high"], ci["ci_method"]
        (0.929, 1.0, 'clopper-pearson')
    """
    check_options(resamples, confidence)
    extra = _per_class_keys(p, names)
    extra += [key for n in names if n in STUDENTIZED for key in (_centre(n), f"{n}/se")]
    resampled = [*(n for n in names if n in (*PERCENTILE, "pr_auc")), *extra]
    boot = (resample_values(p, resampled, resamples=resamples, seed=seed, raw=True)
            if resampled else {})
    jack = jackknife_values(p, ["pr_auc"], seed=seed) if "pr_auc" in names else {}
    inputs = _Inputs(p, point_values(p, [*names, *extra]), boot, jack, confidence, seed)
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        key = _method_key(name, p)
        bounds = _METHODS[key](inputs, key)
        entry: dict[str, Any] = {
            "ci_low": None if bounds is None else _clean(name, bounds[0]),
            "ci_high": None if bounds is None else _clean(name, bounds[1]),
            "ci_method": interval_method(name, p.task)}
        if name in BOOTSTRAPPED:
            entry["resamples"] = int(np.isfinite(boot[_centre(name)]).sum())
        out[name] = entry
    return out


def _clean(name: str, value: float) -> float | None:
    return float(to_metric(name, np.asarray(value))) if np.isfinite(value) else None


def _per_class_keys(p: Prepared, names: Sequence[str]) -> list[str]:
    keys = []
    if "f1_macro" in names or (p.task != "binary" and "f1" in names):
        keys.append("f1/classes")
    if p.task == "multiclass" and "pr_auc" in names:
        keys.append("pr_auc/classes")
    return keys


def _method_key(name: str, p: Prepared) -> str:
    """The metric whose method applies: multiclass precision/recall/F1 are macro ones."""
    if p.task != "binary" and name in ("precision", "recall", "f1"):
        return f"{name}_macro"
    return name


def _percentile(inputs: _Inputs, name: str) -> Bounds:
    """The calibration error's interval: quantiles of the resampled debiased square.

    Its resamples pair distinct rows only, so they are centred on the estimate and need
    no bias correction (when a row's copies formed pairs, resamples sat above the
    estimate, and even BCa covered the truth of miscalibrated models in as few as 57 %
    of test sets). At a calibrated model the square is a degenerate U-statistic, for
    which the jackknife's acceleration means nothing.
    """
    boot = inputs.boot[name]
    boot = boot[np.isfinite(boot)]
    if not boot.size:
        return None
    alpha = (1 - inputs.confidence) / 2
    low, high = np.quantile(boot, [alpha, 1 - alpha])
    if low > 0:
        # A calibrated model's square is mostly a little above 0 and rarely far below
        # (an outcome against a confident probability): a bootstrap that never drew the
        # rare row excludes 0 (55 % of calibrated sets at AUC 0.99, 50 rows). So 0 stays
        # in unless calibration is rejected by consistency resampling at the same level.
        null = calibrated_draws(inputs.p, boot.size, inputs.seed)
        if float(inputs.est[name]) <= float(np.quantile(null, 1 - alpha)):
            low = 0.0
    return float(low), float(high)


def _centre(name: str) -> str:
    """The resampled value an interval is built on: the mean loss (for RMSE the mean
    squared error), or the metric itself."""
    return f"{name}/mean" if name in STUDENTIZED and name != "r2" else name


def _studentized(inputs: _Inputs, name: str) -> Bounds:
    """Bootstrap-t on the mean loss (for RMSE the mean squared error, then its root),
    whose bounds are never negative; on R², at most 1."""
    est, boot, centre = inputs.est, inputs.boot, _centre(name)
    low, high = bootstrap_t(float(est[centre]), float(est[f"{name}/se"]), boot[centre],
                            boot[f"{name}/se"], inputs.confidence)
    if not np.isfinite(low):
        return None
    if name == "r2":
        return min(low, 1.0), min(high, 1.0)
    low, high = max(low, 0.0), max(high, 0.0)
    return (float(np.sqrt(low)), float(np.sqrt(high))) if name == "rmse" else (low, high)


def _proportions(p: Prepared, rows: Array, hits: Array,
                 confidence: float) -> tuple[Array, Array, Array]:
    """Per column of ``rows`` (a row mask per class or set), the weighted proportion of
    ``hits`` among those rows and its Clopper–Pearson bounds on effective counts; a
    column without rows gets the 0 that scikit-learn's ``zero_division=0`` reports."""
    w = p.weights[:, None] * rows
    total = w.sum(axis=0)
    share = np.divide((w * hits).sum(axis=0), total, out=np.zeros(total.shape),
                      where=total > 0)
    n_eff = effective_count(w, axis=0)
    low, high = clopper_pearson(share * n_eff, n_eff, confidence)
    empty = total <= 0
    return share, np.where(empty, 0.0, low), np.where(empty, 0.0, high)


def _class_masks(p: Prepared) -> tuple[Array, Array]:
    classes = np.arange(p.k)
    return p.y[:, None] == classes, p.pred[:, None] == classes


def _accuracy(inputs: _Inputs, name: str) -> Bounds:
    p = inputs.p
    _, low, high = _proportions(p, np.ones((p.n, 1), bool), (p.y == p.pred)[:, None],
                                inputs.confidence)
    return float(low[0]), float(high[0])


def _one_class(inputs: _Inputs, name: str) -> Bounds:
    """Binary precision, recall or F1 of the positive class."""
    p = inputs.p
    assert p.positive is not None
    actual, predicted = p.y == p.positive, p.pred == p.positive
    rows = {"precision": predicted, "recall": actual, "f1": actual | predicted}[name]
    if not (p.weights * rows).sum() > 0:
        return None
    share, low, high = _proportions(p, rows[:, None], (actual & predicted)[:, None],
                                    inputs.confidence)
    if name == "f1":  # the Jaccard index J maps to F1 = 2J / (1 + J), increasing
        return float(2 * low[0] / (1 + low[0])), float(2 * high[0] / (1 + high[0]))
    return float(low[0]), float(high[0])


def _per_class(inputs: _Inputs, name: str) -> tuple[Array, Array, Array]:
    p = inputs.p
    actual, predicted = _class_masks(p)
    hit = actual & predicted
    if name == "precision_macro":
        return _proportions(p, predicted, hit, inputs.confidence)
    if name in ("recall_macro", "balanced_accuracy"):
        return _proportions(p, actual, hit, inputs.confidence)
    jaccard, low, high = _proportions(p, actual | predicted, hit, inputs.confidence)
    return _to_f1(jaccard), _to_f1(low), _to_f1(high)


def _to_f1(jaccard: Array) -> Array:
    """F1 = 2J / (1 + J): increasing in the Jaccard index J = TP / (TP + FP + FN)."""
    return 2 * jaccard / (1 + jaccard)  # type: ignore[no-any-return]


def _macro(inputs: _Inputs, name: str) -> Bounds:
    """Mean of per-class proportions (or F1s) by MOVER."""
    est, low, high = _per_class(inputs, name)
    actual, predicted = _class_masks(inputs.p)
    if name == "balanced_accuracy":  # scikit-learn averages over the classes present in y
        keep = (inputs.p.weights @ actual) > 0
    else:  # as the point value: the classes in y or the predictions
        keep = (inputs.p.weights @ (actual | predicted)) > 0
    corr = None
    if name == "f1_macro":  # classes share rows (an error is one class's FN, another's FP)
        corr = _correlation(inputs.boot["f1/classes"])
    if corr is not None:
        corr = corr[np.ix_(keep, keep)]
    return mover(est[keep], low[keep], high[keep], corr)


def _correlation(values: Array) -> Array:
    """Correlation matrix of per-class resampled values; 1 where a class never varies
    (unknown, so the conservative choice)."""
    values = values[np.all(np.isfinite(values), axis=1)]
    k = values.shape[1]
    if values.shape[0] < 3:
        return np.ones((k, k))
    sd = values.std(axis=0)
    centred = values - values.mean(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        corr = (centred.T @ centred) / values.shape[0] / np.outer(sd, sd)
    corr = np.where(np.isfinite(corr), corr, 1.0)
    np.fill_diagonal(corr, 1.0)
    return np.clip(corr, -1.0, 1.0)  # type: ignore[no-any-return]


def _roc_auc(inputs: _Inputs, name: str) -> Bounds:
    """The union of two intervals whose failures are complementary (measured by
    ``bench/bench_coverage.py``): DeLong's variance on the logit scale is distribution-free
    but undercovers with few positives and a high AUC (its variance estimate from few,
    skewed placements is too small), and has no width at AUC 1; Newcombe's score interval
    holds there, but its variance assumes a shape of the score distributions and
    undercovers when the classes' spreads differ, where DeLong's holds."""
    p = inputs.p
    classes = [p.positive] if p.positive is not None else list(range(p.k))
    weight = p.weights
    aucs, psis, nc_low, nc_high = [], [], [], []
    for c in classes:
        positive = p.y == c
        wp, wn = weight[positive], weight[~positive]
        if not (wp.sum() > 0 and wn.sum() > 0):
            return None
        assert p.proba is not None
        auc, psi_pos, psi_neg = delong(p.proba[:, c], positive, weight)
        aucs.append(auc)
        psis.append(_influence(positive, wp, psi_pos, wn, psi_neg))
        low, high = newcombe_auc(auc, float(effective_count(wp)), float(effective_count(wn)),
                                 inputs.confidence)
        nc_low.append(low)
        nc_high.append(high)
    influence = np.column_stack(psis)  # rows x classes
    cov = influence.T @ influence
    bounds = [mover(np.array(aucs), np.array(nc_low), np.array(nc_high), _as_corr(cov))]
    auc = float(np.mean(aucs))
    var = float(cov.sum()) / len(aucs) ** 2
    if 0.0 < auc < 1.0 and var > 0 and np.isfinite(var):
        bounds.append(logit_interval(auc, float(np.sqrt(var)), inputs.confidence))
    return min(b[0] for b in bounds), max(b[1] for b in bounds)


def _influence(positive: Array, wp: Array, psi_pos: Array, wn: Array,
               psi_neg: Array) -> Array:
    """Each row's term of the AUC's DeLong variance (squares summing to it), so that
    classes of a multiclass evaluation combine with their covariances."""
    out = np.zeros(positive.shape[0])
    for mask, w, psi in ((positive, wp, psi_pos), (~positive, wn, psi_neg)):
        m = float(effective_count(w))
        scale = np.sqrt(m / (m - 1.0)) if m > 1.5 else np.nan
        out[mask] = w * psi / w.sum() * scale
    return out


def _as_corr(cov: Array) -> Array | None:
    sd = np.sqrt(np.diag(cov))
    if not np.all(np.isfinite(cov)):
        return None if cov.shape[0] == 1 else np.ones(cov.shape)
    with np.errstate(invalid="ignore", divide="ignore"):
        corr = cov / np.outer(sd, sd)
    corr = np.where(np.isfinite(corr), corr, 1.0)
    np.fill_diagonal(corr, 1.0)
    return corr  # type: ignore[no-any-return]


def _pr_auc(inputs: _Inputs, name: str) -> Bounds:
    p = inputs.p
    classes = [p.positive] if p.positive is not None else list(range(p.k))
    aps = np.atleast_1d(np.asarray(inputs.est["pr_auc/classes"] if p.positive is None
                                   else inputs.est["pr_auc"], np.float64))
    if not np.all(np.isfinite(aps)):
        return None
    lows, highs = [], []
    for c, ap in zip(classes, aps, strict=True):
        m = float(effective_count(p.weights[p.y == c]))
        low, high = _boyd_logit(float(ap), m, inputs.confidence)
        lows.append(low)
        highs.append(high)
    if p.positive is not None:
        low, high = lows[0], highs[0]
    else:
        low, high = mover(aps, np.array(lows), np.array(highs),
                          _correlation(inputs.boot["pr_auc/classes"]))
    # Boyd's variance treats AP as a proportion of the positives; with balanced classes
    # and a weak ranking AP varies more than that (90-93 % coverage at n >= 200), where
    # the bootstrap is right; with few positives the bootstrap is the one too narrow.
    b_low, b_high = bca(float(inputs.est["pr_auc"]), inputs.boot["pr_auc"],
                        inputs.jack["pr_auc"], inputs.confidence)
    if np.isfinite(b_low):
        low, high = min(low, b_low), max(high, b_high)
    return low, high


def _boyd_logit(ap: float, positives: float, confidence: float) -> tuple[float, float]:
    """Boyd, Eng & Page (2013): AP's variance as a proportion over the positives, on the
    logit scale; at 0 or 1, where the logit has no width, the exact binomial bound."""
    if 0.0 < ap < 1.0:
        return logit_interval(ap, float(np.sqrt(ap * (1 - ap) / positives)), confidence)
    low, high = clopper_pearson(ap * positives, positives, confidence)
    return float(low), float(high)


_METHODS: dict[str, Callable[[_Inputs, str], Bounds]] = {
    "accuracy": _accuracy, "precision": _one_class, "recall": _one_class, "f1": _one_class,
    "balanced_accuracy": _macro, "precision_macro": _macro, "recall_macro": _macro,
    "f1_macro": _macro, "roc_auc": _roc_auc, "pr_auc": _pr_auc,
    **dict.fromkeys(STUDENTIZED, _studentized), **dict.fromkeys(PERCENTILE, _percentile),
}
