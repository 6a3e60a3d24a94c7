"""Bootstrap intervals: seeded, equal to scikit-learn resample by resample, sane coverage."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn import metrics as skm

from reprise.core.errors import UserError
from reprise.evaluate._bootstrap import (
    _chunk_values,
    _counts,
    bootstrap_intervals,
    resample_values,
    weighted_auc_ap,
)
from reprise.evaluate._inputs import Prepared, prepare
from reprise.evaluate._metrics import default_metrics, point_metrics


def _check_each_resample(p: Prepared, seed: int = 0, resamples: int = 4) -> None:
    """The vectorised value on each resample equals the point estimate on that resample."""
    names = default_metrics(p)
    idx = np.random.default_rng(seed).integers(0, p.n, size=(resamples, p.n))
    fast = _chunk_values(p, names, idx, _counts(idx, p.n))
    for r in range(resamples):
        slow = point_metrics(p.subset(idx[r]), names)
        for name in names:
            if slow[name] is None:
                assert np.isnan(fast[name][r]), name
            else:
                assert fast[name][r] == pytest.approx(slow[name], rel=1e-9, abs=1e-12), name


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


def test_weighted_auc_equals_scikit_learn_with_sample_weight() -> None:
    rng = np.random.default_rng(1)
    score = rng.integers(0, 5, 50) / 4.0  # heavy ties
    pos = rng.random(50) < 0.4
    weights = rng.integers(0, 3, (3, 50)).astype(float)
    auc, ap = weighted_auc_ap(score, pos, weights)
    for r in range(3):
        assert auc[r] == pytest.approx(skm.roc_auc_score(pos, score, sample_weight=weights[r]))
        assert ap[r] == pytest.approx(
            skm.average_precision_score(pos, score, sample_weight=weights[r]))


def test_same_seed_same_intervals_other_seed_others(binary: dict[str, Any]) -> None:
    p = prepare(binary["y"], y_proba=binary["p"])
    names = default_metrics(p)
    a = bootstrap_intervals(p, names, resamples=300, seed=4)
    assert a == bootstrap_intervals(p, names, resamples=300, seed=4)
    assert a != bootstrap_intervals(p, names, resamples=300, seed=5)
    assert all(v["resamples"] == 300 for v in a.values())


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
    assert ci["r2"] == {"ci_low": None, "ci_high": None, "resamples": 0}
    assert ci["mae"]["resamples"] == 50


def test_coverage_is_roughly_nominal() -> None:
    """Of 100 datasets of 200 Bernoulli(0.7) outcomes, about 95 intervals hold 0.7."""
    rng = np.random.default_rng(11)
    hits = 0
    for i in range(100):
        correct = rng.random(200) < 0.7
        p = prepare(correct.astype(int), np.ones(200, dtype=int), labels=[0, 1])
        ci = bootstrap_intervals(p, ["accuracy"], resamples=400, seed=i)["accuracy"]
        hits += ci["ci_low"] <= 0.7 <= ci["ci_high"]
    assert 86 <= hits <= 100


@settings(max_examples=40, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=60), st.integers(0, 2**31 - 1))
def test_accuracy_interval_contains_the_point_estimate(right: list[bool], seed: int) -> None:
    y = np.array([1] * len(right))
    pred = np.array([1 if r else 0 for r in right])
    p = prepare(y, pred, labels=[0, 1])
    acc = point_metrics(p, ["accuracy"])["accuracy"]
    ci = bootstrap_intervals(p, ["accuracy"], resamples=200, seed=seed)["accuracy"]
    assert acc is not None
    assert ci["ci_low"] - 1e-12 <= acc <= ci["ci_high"] + 1e-12


def test_bad_options() -> None:
    p = prepare([0, 1], [0, 1])
    with pytest.raises(UserError, match="positive integer"):
        bootstrap_intervals(p, ["accuracy"], resamples=0)
    with pytest.raises(UserError, match="between 0 and 1"):
        bootstrap_intervals(p, ["accuracy"], confidence=95)
