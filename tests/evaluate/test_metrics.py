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
    check_applicable,
    confusion,
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


def test_calibration_error_by_hand() -> None:
    # bins of width 0.5 would be coarse; with 10 bins: 0.1 -> bin 0 (edge goes down),
    # 0.15 -> bin 1, 0.85 and 0.9 -> bins 8.
    y = np.array([0, 1, 1, 1])
    p = np.array([0.1, 0.15, 0.85, 0.9])
    ece = point_metrics(prepare(y, y_proba=p), ["calibration_error"])["calibration_error"]
    by_hand = (abs(0 - 0.1) + abs(1 - 0.15) + 2 * abs(1 - 0.875)) / 4
    assert ece == pytest.approx(by_hand)


def test_calibration_bins_are_scikit_learns(binary: dict[str, Any]) -> None:
    y, p = binary["y"], binary["p"]
    observed, predicted = calibration_curve(y, p, n_bins=10)
    bins = calibration_bins(prepare(y, y_proba=p))
    assert [b["observed"] for b in bins] == pytest.approx(observed.tolist())
    assert [b["predicted"] for b in bins] == pytest.approx(predicted.tolist())
    assert sum(b["count"] for b in bins) == len(y)


def test_multiclass_calibration_uses_top_label_confidence() -> None:
    proba = np.array([[0.7, 0.2, 0.1], [0.1, 0.6, 0.3], [0.2, 0.2, 0.6]])
    y = np.array([0, 2, 2])
    ece = point_metrics(prepare(y, y_proba=proba), ["calibration_error"])["calibration_error"]
    # confidences 0.7 (right), 0.6 (wrong), 0.6 (right): bins [0.6,0.7) and (0.6?] ...
    # 0.6 falls in bin 5 ((0.5, 0.6]), 0.7 in bin 6 ((0.6, 0.7]).
    by_hand = (abs(1 - 0.7) + 2 * abs(0.5 - 0.6)) / 3
    assert ece == pytest.approx(by_hand)


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
