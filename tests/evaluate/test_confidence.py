"""Per-metric intervals: which method, against independent references, and the cases of
issue 21 (perfect scores, calibrated models, weights)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from scipy import stats

from reprise.evaluate._confidence import confidence_intervals, interval_method
from reprise.evaluate._inputs import prepare
from reprise.evaluate._metrics import default_metrics, point_metrics


def _exact(k: int, n: int) -> tuple[float, float]:
    ci = stats.binomtest(k, n).proportion_ci(0.95, method="exact")
    return float(ci.low), float(ci.high)


def test_perfect_accuracy_gets_a_real_interval() -> None:
    """Issue 21.1: 50 of 50 right was [1.0, 1.0], so `accuracy.ci_low >= 0.99` passed."""
    p = prepare([0, 1] * 25, [0, 1] * 25)
    ci = confidence_intervals(p, ["accuracy", "precision", "recall", "f1",
                                  "balanced_accuracy"])
    assert (ci["accuracy"]["ci_low"], ci["accuracy"]["ci_high"]) == pytest.approx(_exact(50, 50))
    assert ci["accuracy"]["ci_low"] == pytest.approx(0.9289, abs=1e-4)
    assert all(v["ci_low"] < 0.99 and v["ci_high"] == 1.0 for v in ci.values())


def test_binary_proportions_are_exact_binomial_intervals(binary: dict[str, Any]) -> None:
    y, pr = binary["y"], binary["p"]
    pred = (pr >= 0.5).astype(int)
    ci = confidence_intervals(prepare(y, y_proba=pr), ["accuracy", "precision", "recall", "f1"])
    tp, fp = int(((y == 1) & (pred == 1)).sum()), int(((y == 0) & (pred == 1)).sum())
    fn = int(((y == 1) & (pred == 0)).sum())
    assert [ci["accuracy"]["ci_low"], ci["accuracy"]["ci_high"]] == pytest.approx(
        _exact(int((y == pred).sum()), len(y)))
    assert [ci["precision"]["ci_low"], ci["precision"]["ci_high"]] == pytest.approx(
        _exact(tp, tp + fp))
    assert [ci["recall"]["ci_low"], ci["recall"]["ci_high"]] == pytest.approx(_exact(tp, tp + fn))
    jaccard = _exact(tp, tp + fp + fn)  # F1 = 2J / (1 + J)
    assert [ci["f1"]["ci_low"], ci["f1"]["ci_high"]] == pytest.approx(
        [2 * j / (1 + j) for j in jaccard])
    assert {v["ci_method"] for v in ci.values()} == {"clopper-pearson"}


def test_balanced_accuracy_is_mover_over_class_recalls(binary: dict[str, Any]) -> None:
    y, pr = binary["y"], binary["p"]
    pred = (pr >= 0.5).astype(int)
    ci = confidence_intervals(prepare(y, y_proba=pr), ["balanced_accuracy"])["balanced_accuracy"]
    rec, lows, highs = [], [], []
    for c in (0, 1):
        k, n = int(((y == c) & (pred == c)).sum()), int((y == c).sum())
        rec.append(k / n)
        lo, hi = _exact(k, n)
        lows.append(lo)
        highs.append(hi)
    est = np.mean(rec)
    assert ci["ci_low"] == pytest.approx(est - np.hypot(rec[0] - lows[0], rec[1] - lows[1]) / 2)
    assert ci["ci_high"] == pytest.approx(est + np.hypot(highs[0] - rec[0],
                                                         highs[1] - rec[1]) / 2)
    assert ci["ci_method"] == "mover-clopper-pearson"


def test_every_interval_holds_its_estimate_and_names_its_method(
        binary: dict[str, Any], multiclass: dict[str, Any], regression: dict[str, Any]) -> None:
    for p in (prepare(binary["y"], y_proba=binary["p"]),
              prepare(multiclass["y"], y_proba=multiclass["proba"]),
              prepare(regression["y"], regression["pred"]),
              prepare(binary["y"], y_proba=binary["p"], sample_weight=binary["age"])):
        names = default_metrics(p)
        ci = confidence_intervals(p, names, resamples=300, seed=1)
        values = point_metrics(p, names)
        for name in names:
            assert ci[name]["ci_low"] <= values[name] + 1e-12, name
            assert values[name] <= ci[name]["ci_high"] + 1e-12, name
            assert ci[name]["ci_low"] < ci[name]["ci_high"], name
            assert ci[name]["ci_method"] == interval_method(name, p.task)
            assert ("resamples" in ci[name]) == (ci[name]["ci_method"] in (
                "bootstrap-t", "percentile+consistency", "logit+bca", "mover-logit+bca"))


def test_auc_of_a_perfect_ranking_is_not_a_point() -> None:
    y = np.array([0] * 45 + [1] * 5)
    ci = confidence_intervals(prepare(y, y_proba=np.linspace(0.01, 0.99, 50)),
                              ["roc_auc", "pr_auc"])
    assert ci["roc_auc"]["ci_high"] == 1.0 and 0.6 < ci["roc_auc"]["ci_low"] < 0.95
    assert ci["pr_auc"]["ci_low"] == pytest.approx(0.025 ** (1 / 5))  # exact, 5 of 5


def test_roc_auc_holds_both_delong_and_newcombe(binary: dict[str, Any]) -> None:
    from scipy.special import expit, logit

    from reprise.evaluate._intervals import delong, delong_variance, newcombe_auc

    y, pr = binary["y"], binary["p"]
    positive = y == 1
    auc, psi_pos, psi_neg = delong(pr, positive, np.ones(len(y)))
    se = np.sqrt(delong_variance(np.ones(positive.sum()), psi_pos,
                                 np.ones((~positive).sum()), psi_neg))
    half = stats.norm.ppf(0.975) * se / (auc * (1 - auc))
    dl = (expit(logit(auc) - half), expit(logit(auc) + half))
    nc = newcombe_auc(auc, positive.sum(), (~positive).sum(), 0.95)
    ci = confidence_intervals(prepare(y, y_proba=pr), ["roc_auc"])["roc_auc"]
    assert ci["ci_low"] == pytest.approx(min(dl[0], nc[0]))
    assert ci["ci_high"] == pytest.approx(max(dl[1], nc[1]))


def test_calibrated_probabilities_can_reach_zero() -> None:
    """Issue 21.3: 1,000 exactly calibrated rows gave 0.036 [0.032, 0.072]."""
    rng = np.random.default_rng(7)
    prob = rng.random(1000)
    calibrated = prepare((rng.random(1000) < prob).astype(int), y_proba=prob)
    ci = confidence_intervals(calibrated, ["calibration_error"])["calibration_error"]
    assert ci["ci_low"] == 0.0 and 0.0 < ci["ci_high"] < 0.06
    off = prepare((rng.random(1000) < prob).astype(int), y_proba=np.clip(prob * 1.3, 0, 1))
    ci = confidence_intervals(off, ["calibration_error"])["calibration_error"]
    assert ci["ci_low"] > 0.05


def test_weights_scale_free_and_counted_as_effective_rows(binary: dict[str, Any]) -> None:
    y, pr = binary["y"], binary["p"]
    names = ["accuracy", "f1", "roc_auc", "pr_auc", "log_loss", "calibration_error"]
    plain = confidence_intervals(prepare(y, y_proba=pr), names)
    scaled = confidence_intervals(prepare(y, y_proba=pr, sample_weight=np.full(len(y), 2.5)),
                                  names)
    for name in names:
        assert scaled[name]["ci_low"] == pytest.approx(plain[name]["ci_low"], rel=1e-9)
        assert scaled[name]["ci_high"] == pytest.approx(plain[name]["ci_high"], rel=1e-9)
    # half the rows weigh 9 times the others: ~ 1.64x fewer effective rows, wider intervals
    w = np.where(np.arange(len(y)) % 2 == 0, 9.0, 1.0)
    uneven = confidence_intervals(prepare(y, y_proba=pr, sample_weight=w), names)
    for name in names:
        assert (uneven[name]["ci_high"] - uneven[name]["ci_low"]
                > 1.1 * (plain[name]["ci_high"] - plain[name]["ci_low"])), name
