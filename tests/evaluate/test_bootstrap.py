"""Bootstrap machinery: seeded, equal to scikit-learn resample by resample (weighted too),
BCa as scipy computes it."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from sklearn import metrics as skm

from reprise.core.errors import UserError
from reprise.evaluate._bootstrap import (
    _Plan,
    _resamples,
    bootstrap_intervals,
    jackknife_values,
    resample_values,
    to_metric,
    weighted_auc_ap,
)
from reprise.evaluate._inputs import Prepared, prepare
from reprise.evaluate._metrics import default_metrics, point_metrics


def _check_each_resample(p: Prepared, seed: int = 0, resamples: int = 4) -> None:
    """The vectorised value on each resample equals the point estimate with the resample's
    counts (times the sample weights) as sample_weight, and but for the calibration error
    (whose pairs are distinct rows, not copies) the point estimate on the drawn rows."""
    names = default_metrics(p)
    idx, weights = next(_resamples(p, resamples, seed))
    plan = _Plan(p, names)
    fast = {k: to_metric(k, v) for k, v in plan.values(plan.sums(weights, idx), weights).items()}
    for r in range(resamples):
        as_weights = point_metrics(replace(p, weight=weights[r]), names)
        drawn = point_metrics(p.subset(idx[r]), names)
        for name in names:
            for slow in (as_weights, drawn) if name != "calibration_error" else (as_weights,):
                if slow[name] is None:
                    assert np.isnan(fast[name][r]), name
                else:
                    assert fast[name][r] == pytest.approx(slow[name], rel=1e-9, abs=1e-12), name


def _weights(n: int, seed: int = 2) -> np.ndarray:
    return np.random.default_rng(seed).gamma(2.0, 1.0, n)


def test_vectorised_binary_equals_scikit_learn_per_resample(binary: dict[str, Any]) -> None:
    _check_each_resample(prepare(binary["y"], y_proba=binary["p"]))  # p has ties


def test_vectorised_multiclass_equals_scikit_learn_per_resample(
        multiclass: dict[str, Any]) -> None:
    _check_each_resample(prepare(multiclass["y"], y_proba=multiclass["proba"]))


def test_vectorised_regression_equals_scikit_learn_per_resample(
        regression: dict[str, Any]) -> None:
    _check_each_resample(prepare(regression["y"], regression["pred"]))


def test_resamples_missing_a_class_agree_with_the_point_estimates() -> None:
    # few positives / a rare class: resamples without them make precision, recall and F1
    # undefined (NaN, skipped) or shrink the macro average to the classes present
    rng = np.random.default_rng(2)
    y = np.zeros(12, dtype=int)
    y[[3, 8]] = 1
    _check_each_resample(prepare(y, (rng.random(12) < 0.2).astype(int)), resamples=40)
    y3 = np.array([0, 0, 1, 1, 2, 0, 1, 0, 1, 0])
    _check_each_resample(prepare(y3, np.array([0, 1, 1, 1, 0, 0, 1, 0, 2, 0])), resamples=40)


def test_vectorised_many_classes_count_confusion_cells() -> None:
    """Above 4 classes the confusion matrices of resamples are counted, not multiplied."""
    rng = np.random.default_rng(8)
    y = rng.integers(0, 6, 300)
    raw = rng.random((300, 6))
    raw[np.arange(300), y] += 1.0
    _check_each_resample(prepare(y, y_proba=raw / raw.sum(axis=1, keepdims=True),
                                 sample_weight=_weights(300)))


def test_weighted_resamples_equal_scikit_learn_with_the_rows_weights(
        binary: dict[str, Any], multiclass: dict[str, Any], regression: dict[str, Any]) -> None:
    """A resample keeps each drawn row's sample weight: scikit-learn's sample_weight on the
    drawn rows gives the same value."""
    y, pr = binary["y"], binary["p"]
    _check_each_resample(prepare(y, y_proba=pr, sample_weight=_weights(len(y))))
    y, proba = multiclass["y"], multiclass["proba"]
    _check_each_resample(prepare(y, y_proba=proba, sample_weight=_weights(len(y))))
    y, pred = regression["y"], regression["pred"]
    _check_each_resample(prepare(y, pred, sample_weight=_weights(len(y))))


def test_jackknife_leaves_each_row_out(binary: dict[str, Any]) -> None:
    p = prepare(binary["y"][:60], y_proba=binary["p"][:60], sample_weight=_weights(60))
    names = ["accuracy", "f1", "roc_auc", "pr_auc", "log_loss", "calibration_error"]
    jack = jackknife_values(p, names)
    for i in (0, 17, 59):
        slow = point_metrics(p.subset(np.arange(60) != i), names)
        for name in names:
            assert to_metric(name, jack[name][i]) == pytest.approx(slow[name], rel=1e-9), name


def test_jackknife_groups_partition_large_inputs() -> None:
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 1000)
    p = prepare(y, np.where(rng.random(1000) < 0.8, y, 1 - y))
    left_out = 1000 - jackknife_values(p, ["accuracy"])["accuracy"].size
    assert left_out == 800  # 200 groups of 5 rows each
    acc = jackknife_values(p, ["accuracy"])["accuracy"]
    right = float(np.mean(p.y == p.pred))
    assert np.mean(acc) == pytest.approx(right, abs=1e-3)


def test_weighted_auc_equals_scikit_learn_with_sample_weight() -> None:
    rng = np.random.default_rng(1)
    score = rng.integers(0, 5, 50) / 4.0  # heavy ties
    pos = rng.random(50) < 0.4
    weights = np.vstack([rng.integers(0, 3, (2, 50)), rng.gamma(1.0, 1.0, (2, 50))])
    auc, ap = weighted_auc_ap(score, pos, weights)
    for r in range(4):
        assert auc[r] == pytest.approx(skm.roc_auc_score(pos, score, sample_weight=weights[r]))
        assert ap[r] == pytest.approx(
            skm.average_precision_score(pos, score, sample_weight=weights[r]))


def test_bca_matches_scipy_on_a_skewed_mean() -> None:
    """Same formula as scipy.stats.bootstrap(method="BCa"): with many resamples the two
    agree to Monte Carlo error on a skewed statistic (where BCa moves the bounds)."""
    from scipy import stats

    rng = np.random.default_rng(3)
    y = rng.exponential(1.0, 80)
    p = prepare(y, np.zeros(80), task="regression")
    ours = bootstrap_intervals(p, ["mae"], resamples=20000, seed=1)["mae"]
    theirs = stats.bootstrap((y,), np.mean, n_resamples=20000, method="BCa",
                             random_state=np.random.default_rng(2)).confidence_interval
    assert ours["ci_low"] == pytest.approx(theirs.low, abs=0.006)
    assert ours["ci_high"] == pytest.approx(theirs.high, abs=0.01)
    percentile = np.quantile(resample_values(p, ["mae"], resamples=20000, seed=1)["mae"],
                             [0.025, 0.975])
    assert ours["ci_low"] - percentile[0] > 0.01  # BCa shifts right for a right skew


def test_same_seed_same_intervals_other_seed_others(binary: dict[str, Any]) -> None:
    p = prepare(binary["y"], y_proba=binary["p"])
    names = default_metrics(p)
    a = bootstrap_intervals(p, names, resamples=300, seed=4)
    assert a == bootstrap_intervals(p, names, resamples=300, seed=4)
    assert a != bootstrap_intervals(p, names, resamples=300, seed=5)
    assert all(v["resamples"] == 300 and v["ci_method"] == "bca" for v in a.values())


def test_undefined_resamples_are_skipped_and_counted() -> None:
    # one positive in 20 rows: a resample misses it with probability (19/20)^20 ~ 36%
    y = np.zeros(20, dtype=int)
    y[0] = 1
    p = prepare(y, y_proba=np.linspace(0.05, 0.95, 20))
    ci = bootstrap_intervals(p, ["roc_auc", "accuracy"], resamples=500, seed=0)
    assert 250 < ci["roc_auc"]["resamples"] < 400
    assert ci["accuracy"]["resamples"] == 500
    raw = resample_values(p, ["roc_auc"], resamples=500, seed=0)["roc_auc"]
    assert int(np.isfinite(raw).sum()) == ci["roc_auc"]["resamples"]


def test_a_metric_never_defined_has_no_interval() -> None:
    p = prepare([2.0, 2.0, 2.0], [1.0, 2.0, 3.0], task="regression")
    ci = bootstrap_intervals(p, ["r2", "mae"], resamples=50)
    assert ci["r2"] == {"ci_low": None, "ci_high": None, "ci_method": "bca", "resamples": 0}
    assert ci["mae"]["resamples"] == 50


def test_bad_options() -> None:
    p = prepare([0, 1], [0, 1])
    with pytest.raises(UserError, match="positive integer"):
        bootstrap_intervals(p, ["accuracy"], resamples=0)
    with pytest.raises(UserError, match="between 0 and 1"):
        bootstrap_intervals(p, ["accuracy"], confidence=95)
