"""Every metric against scikit-learn or a hand computation."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn import metrics as skm
from sklearn.calibration import calibration_curve

from reprise.core.errors import UserError
from reprise.evaluate._inputs import prepare
from reprise.evaluate._metrics import (
    METRICS,
    calibration_bins,
    calibration_design,
    check_applicable,
    confusion,
    debiased_squared_error,
    default_metrics,
    per_class,
    point_metrics,
)


def test_binary_metrics_match_scikit_learn(binary: dict[str, Any]) -> None:
    y, p = binary["y"], binary["p"]
    pred = (p >= 0.5).astype(int)
    got = point_metrics(prepare(y, y_proba=p), default_metrics(prepare(y, y_proba=p)))
    want = {
        "accuracy": skm.accuracy_score(y, pred),
        "balanced_accuracy": skm.balanced_accuracy_score(y, pred),
        "precision": skm.precision_score(y, pred),
        "recall": skm.recall_score(y, pred),
        "f1": skm.f1_score(y, pred),
        "precision_macro": skm.precision_score(y, pred, average="macro"),
        "recall_macro": skm.recall_score(y, pred, average="macro"),
        "f1_macro": skm.f1_score(y, pred, average="macro"),
        "roc_auc": skm.roc_auc_score(y, p),
        "pr_auc": skm.average_precision_score(y, p),
        "log_loss": skm.log_loss(y, p),
        "brier": skm.brier_score_loss(y, p),
    }
    for name, value in want.items():
        assert got[name] == pytest.approx(value, abs=1e-12), name


def test_multiclass_metrics_match_scikit_learn(multiclass: dict[str, Any]) -> None:
    y, proba = multiclass["y"], multiclass["proba"]
    pred = proba.argmax(axis=1)
    p = prepare(y, y_proba=proba)
    assert p.task == "multiclass"
    got = point_metrics(p, default_metrics(p))
    want = {
        "accuracy": skm.accuracy_score(y, pred),
        "f1": skm.f1_score(y, pred, average="macro"),
        "precision": skm.precision_score(y, pred, average="macro"),
        "recall_macro": skm.recall_score(y, pred, average="macro"),
        "roc_auc": skm.roc_auc_score(y, proba, multi_class="ovr"),
        "pr_auc": skm.average_precision_score(y, proba),
        "log_loss": skm.log_loss(y, proba),
        "brier": skm.brier_score_loss(y, proba),
    }
    for name, value in want.items():
        assert got[name] == pytest.approx(value, abs=1e-12), name


def test_regression_metrics_match_scikit_learn(regression: dict[str, Any]) -> None:
    y, pred = regression["y"], regression["pred"]
    p = prepare(y, pred)
    assert p.task == "regression"
    got = point_metrics(p, default_metrics(p))
    assert got == pytest.approx({
        "mae": skm.mean_absolute_error(y, pred),
        "rmse": skm.root_mean_squared_error(y, pred),
        "r2": skm.r2_score(y, pred),
        "mape": skm.mean_absolute_percentage_error(y, pred)})


def test_weighted_metrics_match_scikit_learn(binary: dict[str, Any],
                                             multiclass: dict[str, Any],
                                             regression: dict[str, Any]) -> None:
    """Issue 21.4: sample_weight= reaches every metric as scikit-learn's own."""
    rng = np.random.default_rng(9)
    y, p = binary["y"], binary["p"]
    w = rng.gamma(2.0, 1.0, len(y))
    pred = (p >= 0.5).astype(int)
    got = point_metrics(prepare(y, y_proba=p, sample_weight=w), default_metrics(prepare(y, y_proba=p)))
    want = {
        "accuracy": skm.accuracy_score(y, pred, sample_weight=w),
        "balanced_accuracy": skm.balanced_accuracy_score(y, pred, sample_weight=w),
        "precision": skm.precision_score(y, pred, sample_weight=w),
        "recall": skm.recall_score(y, pred, sample_weight=w),
        "f1": skm.f1_score(y, pred, sample_weight=w),
        "f1_macro": skm.f1_score(y, pred, average="macro", sample_weight=w),
        "roc_auc": skm.roc_auc_score(y, p, sample_weight=w),
        "pr_auc": skm.average_precision_score(y, p, sample_weight=w),
        "log_loss": skm.log_loss(y, p, sample_weight=w),
        "brier": skm.brier_score_loss(y, p, sample_weight=w),
    }
    for name, value in want.items():
        assert got[name] == pytest.approx(value, abs=1e-12), name
        assert got[name] != pytest.approx(point_metrics(prepare(y, y_proba=p), [name])[name],
                                          abs=1e-6), name  # the weights matter
    y, proba = multiclass["y"], multiclass["proba"]
    w = rng.gamma(2.0, 1.0, len(y))
    got = point_metrics(prepare(y, y_proba=proba, sample_weight=w),
                        ["accuracy", "f1", "roc_auc", "log_loss", "brier"])
    assert got == pytest.approx({
        "accuracy": skm.accuracy_score(y, proba.argmax(1), sample_weight=w),
        "f1": skm.f1_score(y, proba.argmax(1), average="macro", sample_weight=w),
        "roc_auc": skm.roc_auc_score(y, proba, multi_class="ovr", sample_weight=w),
        "log_loss": skm.log_loss(y, proba, sample_weight=w),
        "brier": skm.brier_score_loss(y, proba, sample_weight=w)}, abs=1e-12)
    y, pred = regression["y"], regression["pred"]
    w = rng.gamma(2.0, 1.0, len(y))
    got = point_metrics(prepare(y, pred, sample_weight=w), ["mae", "rmse", "r2", "mape"])
    assert got == pytest.approx({
        "mae": skm.mean_absolute_error(y, pred, sample_weight=w),
        "rmse": skm.root_mean_squared_error(y, pred, sample_weight=w),
        "r2": skm.r2_score(y, pred, sample_weight=w),
        "mape": skm.mean_absolute_percentage_error(y, pred, sample_weight=w)}, abs=1e-12)


def test_bad_sample_weight_is_a_clear_error() -> None:
    with pytest.raises(UserError, match="one weight per row \\(3 rows\\)"):
        prepare([0, 1, 1], [0, 1, 0], sample_weight=[1.0, 2.0])
    with pytest.raises(UserError, match="finite and >= 0; row 1 holds -1.0"):
        prepare([0, 1, 1], [0, 1, 0], sample_weight=[1.0, -1.0, 2.0])
    with pytest.raises(UserError, match="all zeros"):
        prepare([0, 1, 1], [0, 1, 0], sample_weight=[0, 0, 0])
    with pytest.raises(UserError, match="must hold numbers"):
        prepare([0, 1, 1], [0, 1, 0], sample_weight=["a", "b", "c"])


def test_calibration_error_by_hand() -> None:
    # 10 bins: 0.1 -> bin 0 (edge goes down), 0.15 -> bin 1, 0.85 and 0.9 -> bin 8. A bin
    # with one row says nothing about its squared gap; bin 8's pairs estimate it as the
    # mean of d_i * d_j over distinct rows (d = outcome - probability).
    y = np.array([0, 1, 1, 1])
    p = np.array([0.1, 0.15, 0.85, 0.9])
    ce = point_metrics(prepare(y, y_proba=p), ["calibration_error"])["calibration_error"]
    assert ce == pytest.approx(np.sqrt(2 / 4 * (0.15 * 0.1)))


def test_calibration_error_is_kumar_et_al_debiased_estimator() -> None:
    """With one predicted probability per bin, the estimator is Kumar et al.'s (2019):
    (mean outcome - p)**2 - mean outcome * (1 - mean outcome) / (n_b - 1), per bin."""
    rng = np.random.default_rng(0)
    prob = rng.choice([0.05, 0.25, 0.55, 0.95], 400)
    y = (rng.random(400) < np.clip(prob + 0.08, 0, 1)).astype(int)
    ce = point_metrics(prepare(y, y_proba=prob), ["calibration_error"])["calibration_error"]
    total = 0.0
    for v in np.unique(prob):
        out = y[prob == v]
        m, nb = out.mean(), out.size
        total += nb / 400 * ((m - v) ** 2 - m * (1 - m) / (nb - 1))
    assert ce == pytest.approx(np.sqrt(total), rel=1e-12)


def test_calibration_error_is_unbiased_where_the_plug_in_ece_is_not() -> None:
    """Issue 21.3: on perfectly calibrated probabilities the plug-in ECE is ~0.036 on
    1,000 rows; the squared estimate here averages 0 (it is unbiased, the plug-in squared
    gap is not), so the reported root is 0 about half the time."""
    rng = np.random.default_rng(4)
    signed, plug_in_sq, plug_in, zeros = [], [], [], 0
    for _ in range(200):
        prob = rng.random(1000)
        p = prepare((rng.random(1000) < prob).astype(int), y_proba=prob)
        x1, x2 = calibration_design(p)
        signed.append(float(debiased_squared_error(p.weights @ x1, p.weights @ x2)))
        zeros += point_metrics(p, ["calibration_error"])["calibration_error"] == 0.0
        bins = calibration_bins(p)
        plug_in.append(sum(b["count"] * abs(b["observed"] - b["predicted"]) for b in bins) / 1000)
        plug_in_sq.append(sum(b["count"] * (b["observed"] - b["predicted"]) ** 2
                              for b in bins) / 1000)
    assert np.mean(plug_in) > 0.025  # what the old metric reported for a calibrated model
    se = np.std(signed) / np.sqrt(200)
    assert abs(np.mean(signed)) < 3 * se
    assert np.mean(plug_in_sq) > 20 * se  # the plug-in square's bias, for contrast
    assert 70 <= zeros <= 130


def test_weighted_calibration_error_by_brute_force_pairs() -> None:
    rng = np.random.default_rng(5)
    prob = rng.random(60)
    y = (rng.random(60) < prob).astype(int)
    w = rng.gamma(2.0, 1.0, 60)
    got = point_metrics(prepare(y, y_proba=prob, sample_weight=w), ["calibration_error"])
    d, bins = y - prob, np.minimum((prob * 10).astype(int), 9)  # no prob on an edge here
    total = 0.0
    for b in np.unique(bins):
        wb, db = w[bins == b], d[bins == b]
        pair_w = np.outer(wb, wb) - np.diag(wb * wb)
        if wb.size > 1:  # a lone row contributes nothing
            total += wb.sum() / w.sum() * (pair_w * np.outer(db, db)).sum() / pair_w.sum()
    assert got["calibration_error"] == pytest.approx(np.sqrt(max(total, 0.0)), rel=1e-10)
    same = point_metrics(prepare(y, y_proba=prob, sample_weight=np.full(60, 3.0)),
                         ["calibration_error"])
    plain = point_metrics(prepare(y, y_proba=prob), ["calibration_error"])
    assert same["calibration_error"] == pytest.approx(plain["calibration_error"])


def test_calibration_bins_are_scikit_learns(binary: dict[str, Any]) -> None:
    y, p = binary["y"], binary["p"]
    observed, predicted = calibration_curve(y, p, n_bins=10)
    bins = calibration_bins(prepare(y, y_proba=p))
    assert [b["observed"] for b in bins] == pytest.approx(observed.tolist())
    assert [b["predicted"] for b in bins] == pytest.approx(predicted.tolist())
    assert sum(b["count"] for b in bins) == len(y)


def test_multiclass_calibration_uses_top_label_confidence() -> None:
    proba = np.array([[0.7, 0.2, 0.1], [0.1, 0.6, 0.3], [0.2, 0.2, 0.6]])
    # confidences 0.7 (bin 6, alone), 0.6 and 0.6 (bin 5), all three right: d = 0.4, 0.4
    ce = point_metrics(prepare(np.array([0, 1, 2]), y_proba=proba),
                       ["calibration_error"])["calibration_error"]
    assert ce == pytest.approx(np.sqrt(2 / 3 * 0.4 * 0.4))
    # one of the pair wrong: d = -0.6, 0.4, a negative squared estimate reads as 0
    ce = point_metrics(prepare(np.array([0, 2, 2]), y_proba=proba),
                       ["calibration_error"])["calibration_error"]
    assert ce == 0.0


def test_undefined_metrics_are_none_not_errors() -> None:
    p = prepare([1, 1, 1], y_proba=[0.9, 0.8, 0.7], labels=[0, 1])
    got = point_metrics(p, ["roc_auc", "pr_auc", "accuracy", "balanced_accuracy"])
    assert got["roc_auc"] is None
    assert got["pr_auc"] == pytest.approx(1.0)
    assert got["accuracy"] == 1.0
    constant = prepare([2.0, 2.0, 2.0], [1.0, 2.0, 3.0], task="regression")
    assert point_metrics(constant, ["r2"])["r2"] is None


def test_per_class_and_confusion_matrix() -> None:
    p = prepare(["a", "b", "b", "c"], ["a", "b", "c", "c"])
    cm = confusion(p)
    assert cm == {"labels": ["a", "b", "c"], "matrix": [[1, 0, 0], [0, 1, 1], [0, 0, 1]]}
    pc = per_class(p)
    assert pc["b"] == {"precision": 1.0, "recall": 0.5, "f1": pytest.approx(2 / 3), "support": 2}
    assert pc["c"]["precision"] == 0.5
    never = per_class(prepare(["a", "b", "b"], ["a", "a", "a"], labels=["a", "b", "c"]))
    assert never["b"] == {"precision": None, "recall": 0.0, "f1": 0.0, "support": 2}
    assert never["c"] == {"precision": None, "recall": None, "f1": None, "support": 0}


def test_directions_and_applicability() -> None:
    lower = {n for n, m in METRICS.items() if not m.higher_is_better}
    assert lower == {"log_loss", "brier", "calibration_error", "mae", "rmse", "mape"}
    p = prepare([0, 1, 0], [0, 1, 1])
    assert "roc_auc" not in default_metrics(p)  # no probabilities
    with pytest.raises(UserError, match="needs class probabilities"):
        check_applicable(["roc_auc"], p)
    with pytest.raises(UserError, match="scores regression"):
        check_applicable(["mae"], p)
    with pytest.raises(UserError, match="unknown metric 'f2'.*accuracy"):
        check_applicable(["f2"], p)


def test_binary_precision_recall_f1_are_none_where_undefined() -> None:
    # a perfectly predicted set with no positives: F1 was 0 (scikit-learn's 0/0 -> 0)
    perfect = point_metrics(prepare([0, 0, 0], [0, 0, 0], labels=[0, 1]),
                            ["precision", "recall", "f1", "accuracy", "f1_macro"])
    assert perfect == {"precision": None, "recall": None, "f1": None, "accuracy": 1.0,
                       "f1_macro": 1.0}
    silent = point_metrics(prepare([0, 1, 1], [0, 0, 0]), ["precision", "recall", "f1"])
    assert silent == {"precision": None, "recall": 0.0, "f1": 0.0}  # never predicts 1
    eager = point_metrics(prepare([0, 0, 0], [1, 0, 1], labels=[0, 1]),
                          ["precision", "recall", "f1"])
    assert eager == {"precision": 0.0, "recall": None, "f1": 0.0}  # no positive row


def test_multiclass_macro_leaves_out_a_class_absent_from_the_rows() -> None:
    # a subset lacking class 2, perfectly predicted: 1.0 as scikit-learn's default, not 2/3
    p = prepare([0, 1, 0, 1], [0, 1, 0, 1], labels=[0, 1, 2])
    got = point_metrics(p, ["f1", "precision", "recall", "f1_macro"])
    assert got == {"f1": 1.0, "precision": 1.0, "recall": 1.0, "f1_macro": 1.0}
    assert skm.f1_score([0, 1, 0, 1], [0, 1, 0, 1], average="macro") == 1.0


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), min_size=1, max_size=25))
def test_macro_averages_equal_scikit_learns_default(pairs: list[tuple[int, int]]) -> None:
    y, pred = np.array(pairs).T
    p = prepare(y, pred, labels=[0, 1, 2, 3], task="multiclass")
    got = point_metrics(p, ["precision", "recall", "f1", "f1_macro"])
    for name, fn in (("precision", skm.precision_score), ("recall", skm.recall_score),
                     ("f1", skm.f1_score)):
        assert got[name] == pytest.approx(fn(y, pred, average="macro", zero_division=0)), name
    assert got["f1_macro"] == got["f1"]
