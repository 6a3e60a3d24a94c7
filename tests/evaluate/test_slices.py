"""Slices partition the rows, small ones are reported, fairness gaps by hand."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reprise.core.errors import UserError
from reprise.evaluate import evaluate
from reprise.evaluate._inputs import prepare
from reprise.evaluate._slices import fairness, segments, slice_table, worst_slices


def test_numeric_columns_are_quantile_binned_with_readable_labels() -> None:
    age = np.array([18, 25, 30, 35, 40, 45, 50, 60, 70, 80], dtype=float)
    labels = [label for label, _ in segments(age, "age", bins=2)]
    assert labels == ["age∈[18, 42.5)", "age∈[42.5, 80]"]


def test_categorical_and_missing_values() -> None:
    col = np.array(["b", "a", None, "b"], dtype=object)
    out = {label: mask.tolist() for label, mask in segments(col, "c", bins=4)}
    assert out == {"c=a": [False, True, False, False], "c=b": [True, False, False, True],
                   "c=missing": [False, False, True, False]}
    few = {label for label, _ in segments(np.array([1, 2, 1, 2]), "k", bins=4)}
    assert few == {"k=1", "k=2"}  # as many values as bins or fewer: taken as categories


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.floats(-1e6, 1e6), st.none()), min_size=1, max_size=80),
       st.integers(1, 6))
def test_segments_partition_the_rows(values: list[float | None], bins: int) -> None:
    arr = np.array([np.nan if v is None else v for v in values], dtype=float)
    masks = [m for _, m in segments(arr, "x", bins=bins)]
    assert np.array_equal(np.sum(masks, axis=0), np.ones(len(values), dtype=int))
    assert all(m.any() for m in masks)


def test_small_slices_are_reported_never_dropped_and_never_worst(
        binary: dict[str, Any]) -> None:
    y, p = binary["y"], binary["p"]
    region = binary["region"].copy()
    region[:3] = "tiny"
    pred = (p >= 0.5).astype(int)
    pred[:3] = 1 - y[:3]  # the tiny slice is all wrong
    X = pd.DataFrame({"region": region})
    rows = slice_table(prepare(y, pred), X, ["region"], bins=4, min_size=30)
    tiny = next(r for r in rows if r["segment"] == "region=tiny")
    assert tiny["too_small"] and tiny["n"] == 3 and tiny["metrics"]["accuracy"] == 0.0
    assert sum(r["n"] for r in rows) == len(y)
    assert worst_slices(rows)["accuracy"]["segment"] != "region=tiny"


def test_worst_slice_follows_the_metric_direction() -> None:
    rows = [{"column": "c", "segment": s, "n": 50, "too_small": False,
             "metrics": {"f1": f1, "mae": mae}} for s, f1, mae in
            (("c=a", 0.9, 1.0), ("c=b", 0.6, 3.0), ("c=c", 0.8, 2.0))]
    worst = worst_slices(rows)
    assert worst["f1"]["segment"] == "c=b" and worst["mae"]["segment"] == "c=b"


def test_fairness_gaps_by_hand() -> None:
    #            group a: 4 rows, 2 positives     group b: 4 rows, 2 positives
    y = np.array([1, 1, 0, 0, 1, 1, 0, 0])
    pred = np.array([1, 1, 1, 0, 1, 0, 0, 0])
    X = {"g": np.array(list("aaaabbbb"))}
    fair = fairness(prepare(y, pred), X, "g", bins=4, min_size=1)
    a, b = fair["groups"]
    assert (a["positive_rate"], a["true_positive_rate"]) == (0.75, 1.0)
    assert (b["positive_rate"], b["true_positive_rate"]) == (0.25, 0.5)
    assert fair["demographic_parity_difference"] == pytest.approx(0.5)
    assert fair["equal_opportunity_difference"] == pytest.approx(0.5)


def test_fairness_needs_binary_classification(regression: dict[str, Any]) -> None:
    X = {"g": np.array(["a", "b"] * 125)}
    with pytest.raises(UserError, match="binary classification"):
        evaluate(y=regression["y"], y_pred=regression["pred"], X=X, sensitive="g",
                 bootstrap=0)
    with pytest.raises(UserError, match="binary classification"):
        fairness(prepare([0, 1, 2], [0, 1, 2]), {"g": np.array(["a", "b", "a"])}, "g",
                 bins=4, min_size=1)


def test_slice_column_errors() -> None:
    with pytest.raises(UserError, match="X has no column 'agee'; its columns are"):
        evaluate(y=[0, 1], y_pred=[0, 1], X=pd.DataFrame({"age": [1, 2]}), slices=["agee"])
    with pytest.raises(UserError, match="needs X as a DataFrame"):
        evaluate(y=[0, 1], y_pred=[0, 1], X=np.zeros((2, 2)), slices="age")
    many = {"id": np.arange(300).astype(str)}
    with pytest.raises(UserError, match="300 distinct values"):
        evaluate(y=[0, 1] * 150, y_pred=[0, 1] * 150, X=many, slices="id", bootstrap=0)
