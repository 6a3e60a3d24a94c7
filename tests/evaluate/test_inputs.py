"""Task inference and every bad-input path of ``prepare``."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from reprise.core.errors import UserError
from reprise.evaluate._inputs import prepare


@pytest.mark.parametrize(("kwargs", "task"), [
    ({"y": [0, 1, 1], "y_pred": [0, 1, 0]}, "binary"),
    ({"y": [0, 2, 1], "y_pred": [0, 1, 1]}, "multiclass"),
    ({"y": ["a", "b"], "y_pred": ["a", "a"], "positive_label": "b"}, "binary"),
    ({"y": [True, False], "y_pred": [True, True]}, "binary"),
    ({"y": [0.5, 1.5, 2.0], "y_pred": [0.4, 1.0, 2.2]}, "regression"),
    ({"y": [1, 2, 3], "y_pred": [1.2, 2.1, 2.9]}, "regression"),  # whole targets, real preds
    ({"y": [0, 1, 1], "y_proba": [0.2, 0.9, 0.4]}, "binary"),
    ({"y": list(range(30)), "y_pred": [float(v) + 0.5 for v in range(30)]}, "regression"),
])
def test_task_is_inferred(kwargs: dict[str, object], task: str) -> None:
    assert prepare(**kwargs).task == task  # type: ignore[arg-type]


def test_many_whole_number_values_are_ambiguous() -> None:
    with pytest.raises(UserError, match="cannot tell whether this is classification or regr"):
        prepare(list(range(40)), list(range(1, 41)))
    assert prepare(list(range(40)), list(range(1, 41)), task="regression").task == "regression"


def test_pandas_inputs_and_proba_columns() -> None:
    y = pd.Series(["cat", "dog", "bird", "dog"])
    proba = pd.DataFrame([[0.1, 0.8, 0.1], [0.1, 0.1, 0.8], [0.7, 0.2, 0.1], [0.2, 0.2, 0.6]])
    p = prepare(y, y_proba=proba)
    assert p.labels == ("bird", "cat", "dog")
    assert p.pred.tolist() == [1, 2, 0, 2]


def test_binary_positive_label_defaults_and_overrides() -> None:
    assert prepare([0, 1], [1, 1]).positive == 1
    p = prepare([0, 1, 1], y_proba=[0.3, 0.6, 0.9], positive_label=0)
    # the given (n,) probabilities are of the positive class, here 0
    assert p.proba is not None and p.proba[:, 0].tolist() == [0.3, 0.6, 0.9]
    assert p.pred.tolist() == [1, 0, 0]


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"y": [0, 1, 1], "y_pred": [0, 1]}, "y has 3 rows but y_pred has 2"),
    ({"y": [0, 1], "y_proba": [0.2, 0.3, 0.4]}, "y has 2 rows but y_proba has 3"),
    ({"y": [0.0, np.nan, 1.0], "y_pred": [0, 1, 1]}, r"y holds 1 missing value.*row 1"),
    ({"y": ["a", None], "y_pred": ["a", "a"]}, "y holds 1 missing value"),
    ({"y": [0, 1], "y_pred": [0.0, np.inf]}, "y_pred holds infinite"),
    ({"y": [0, 1], "y_proba": [0.2, 1.3]}, r"probabilities in \[0, 1\]; row 1 holds 1.3"),
    ({"y": [0, 1], "y_proba": [-0.5, 0.2]}, "logits"),
    ({"y": [0, 1], "y_proba": [[0.5, 0.6], [0.5, 0.5]]}, "row 0 sums to 1.1"),
    ({"y": [0, 1], "y_proba": [0.1, np.nan]}, "y_proba holds NaN"),
    ({"y": [0, 1, 2], "y_pred": [0, 1, 5], "labels": [0, 1, 2]}, r"label\(s\) \[5\]"),
    ({"y": ["x", "y", "z"], "y_proba": [[0.5, 0.5]] * 3}, "say which column is which class"),
    ({"y": [0, 1, 2], "y_proba": [0.1, 0.2, 0.3]}, "one column \\(binary\\) but there are 3"),
    ({"y": ["no", "yes"], "y_pred": ["no", "no"]}, "pass positive_label="),
    ({"y": [0, 1], "y_pred": [0, 1], "positive_label": 7}, "positive_label=7 is not one of"),
    ({"y": [3, 3], "y_pred": [3, 3]}, "at least two classes"),
    ({"y": [0, 1], "y_pred": [0, 1], "task": "regresion"}, "task must be one of"),
    ({"y": [0.5, 1.0], "y_proba": [0.1, 0.2], "task": "regression"}, "probabilities belong"),
    ({"y": [0, 1, 2], "y_pred": [0, 1, 2], "task": "binary"}, "task='binary' but there are 3"),
    ({"y": [0, 1]}, "nothing to evaluate"),
    ({"y": None, "y_pred": [1]}, "y \\(the true targets\\) is required"),
    ({"y": [], "y_pred": []}, "y is empty"),
    ({"y": [[0, 1], [1, 0]], "y_pred": [0, 1]}, "1-D"),
    ({"y": [0, "a"], "y_pred": [0, 1], "labels": None}, "cannot be ordered|not among"),
])
def test_bad_inputs_are_user_errors(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(UserError, match=message):
        prepare(**kwargs)  # type: ignore[arg-type]


def test_probability_rows_within_tolerance_are_renormalised() -> None:
    proba = np.array([[0.2, 0.7999], [0.5, 0.5]], dtype=np.float32)
    p = prepare([1, 0], y_proba=proba)
    assert p.proba is not None and np.allclose(p.proba.sum(axis=1), 1.0, atol=1e-12)


@pytest.mark.parametrize("pred", [[0.1, 0.8, 0.7, 0.2], [0.0, 1.0, 0.5, 0.0], [-0.3, 1.7, 1.0, 0.0]])
def test_fractional_predictions_of_0_1_labels_are_refused(pred: list[float]) -> None:
    # probabilities passed as y_pred by mistake were scored as regression (MAPE 3.6e14)
    with pytest.raises(UserError, match=r"y holds only the labels 0 and 1, but y_pred holds "
                                        r"fractional values .*y_proba=.*task='regression'"):
        prepare([0, 1, 1, 0], pred)
    assert prepare([0, 1, 1, 0], pred, task="regression").task == "regression"
    assert prepare([0, 1, 1, 0], y_proba=np.clip(pred, 0, 1)).task == "binary"
    assert prepare([0.0, 1.0, 1.0, 0.0], [0.0, 1.0, 1.0, 1.0]).task == "binary"  # whole: labels
