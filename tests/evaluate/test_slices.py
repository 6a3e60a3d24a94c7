"""Slices partition the rows, small ones are reported, fairness gaps by hand."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reprise.core.errors import GateFailedError, UserError
from reprise.evaluate import evaluate
from reprise.evaluate._inputs import prepare
from reprise.evaluate._slices import fairness, gap_interval, segments, slice_table, worst_slices


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


def test_a_slice_without_positives_is_undefined_not_the_worst() -> None:
    # region c has no positive row and is predicted perfectly: F1 was 0 and it failed the
    # worst_slice.f1 gate; now it is undefined, listed, and the gate sees regions a and b
    y = np.array([1, 0] * 20 + [1, 1, 0, 0] * 10 + [0] * 40)
    pred = y.copy()
    pred[:4] = [0, 0, 1, 0]  # region a: a few mistakes
    X = {"region": np.array(["a"] * 40 + ["b"] * 40 + ["c"] * 40)}
    ev = evaluate(y=y, y_pred=pred, X=X, slices=["region"], min_slice_size=30, bootstrap=0,
                  gates={"worst_slice.f1": ">= 0.8"})
    c = next(r for r in ev["slices"] if r["segment"] == "region=c")
    assert c["metrics"]["f1"] is None and c["metrics"]["accuracy"] == 1.0
    worst = ev["worst_slice"]["f1"]
    assert worst["segment"] == "region=a" and worst["undefined"] == ["region=c"]
    assert worst["value"] == pytest.approx(38 / 39) and ev.passed is True  # one miss in a
    assert ev["worst_slice"]["accuracy"]["undefined"] == []


def test_multiclass_slice_lacking_a_class_scores_as_scikit_learn() -> None:
    y = np.array([0, 1, 2] * 20 + [0, 1] * 30)
    X = {"part": np.array(["all"] * 60 + ["two"] * 60)}
    rows = slice_table(prepare(y, y.copy()), X, ["part"], bins=4, min_size=1)
    assert [r["metrics"]["f1"] for r in rows] == [1.0, 1.0]  # "two" was 0.667


def test_when_every_slice_is_undefined_the_gate_fails_as_undefined() -> None:
    y = np.zeros(80, dtype=int)
    y[:2] = 1  # two positives, both in a segment too small to count
    X = {"g": np.array(["tiny"] * 2 + ["big"] * 78)}
    with pytest.raises(GateFailedError) as info:
        evaluate(y=y, y_pred=y.copy(), X=X, slices=["g"], min_slice_size=30, bootstrap=0,
                 gates={"worst_slice.f1": ">= 0.8"})
    worst = info.value.evaluation["worst_slice"]["f1"]
    assert worst["value"] is None and worst["segment"] is None
    assert worst == {"column": None, "segment": None, "n": None, "value": None,
                     "too_small": ["g=tiny"], "undefined": ["g=big"]}
    text = str(info.value)
    assert "worst_slice.f1 >= 0.8" in text and "undefined" in text
    assert "worst_slice.f1 is undefined on these rows, and an undefined value fails its gate" \
        in text


def test_numeric_slice_labels_are_unique_and_readable() -> None:
    # four bins whose edges all printed as 1e+05 ("income∈[1e+05, 1e+05)")
    income = 100_000 + np.arange(400, dtype=float) // 40
    labels = [label for label, _ in segments(income, "income", bins=4)]
    assert len(set(labels)) == len(labels) == 4
    assert labels[0] == "income∈[100000, 100002)" and labels[-1] == "income∈[100007, 100009]"
    assert [label for label, _ in segments(np.array([1.0, 2.0, 3.0, 4.0]), "x", bins=2)] == [
        "x∈[1, 2.5)", "x∈[2.5, 4]"]  # short where short suffices


@settings(max_examples=60, deadline=None)
@given(st.floats(-1e9, 1e9), st.floats(1e-9, 1e3), st.integers(2, 6))
def test_bin_labels_never_collide(base: float, step: float, bins: int) -> None:
    values = base + step * np.arange(60, dtype=float)
    labels = [label for label, _ in segments(values, "v", bins=bins)]
    assert len(set(labels)) == len(labels)


def test_fairness_gaps_leave_out_small_groups_and_list_them() -> None:
    # a 3-row group decided the gap: 0.5 with it, 0.0 without
    y = np.array([1, 0] * 50 + [1, 0, 1])
    pred = np.array([1, 0] * 50 + [1, 1, 1])
    X = {"g": np.array(["a"] * 50 + ["b"] * 50 + ["c"] * 3)}
    fair = fairness(prepare(y, pred), X, "g", bins=4, min_size=30, confidence=0.95)
    assert fair["demographic_parity_difference"] == 0.0
    assert fair["equal_opportunity_difference"] == 0.0
    assert fair["left_out"] == {"too_small": ["g=c"], "no_positives": []}
    assert [g["too_small"] for g in fair["groups"]] == [False, False, True]
    ci = fair["intervals"]["demographic_parity_difference"]
    assert ci["ci_low"] == 0.0 and 0.0 < ci["ci_high"] < 0.5
    assert fair["interval"]["method"].startswith("simultaneous Wilson")
    every = fairness(prepare(y, pred), X, "g", bins=4, min_size=1)
    assert every["demographic_parity_difference"] == pytest.approx(0.5)
    assert "intervals" not in every


def test_a_gap_needs_two_groups() -> None:
    y, pred = np.array([1, 0] * 20), np.array([1, 1] * 20)
    X = {"g": np.array(["a"] * 38 + ["b"] * 2)}
    fair = fairness(prepare(y, pred), X, "g", bins=4, min_size=30, confidence=0.9)
    assert fair["demographic_parity_difference"] is None
    assert fair["intervals"]["demographic_parity_difference"] == {"ci_low": None,
                                                                  "ci_high": None}


def test_gap_interval_covers_the_true_gap() -> None:
    # 300 simulated evaluations per case, three groups of 60-200 rows: the 95 % interval
    # covers the true max - min at least 93 % of the time, a zero gap included
    rng = np.random.default_rng(11)
    for rates in ([0.3, 0.3, 0.3], [0.2, 0.3, 0.5], [0.05, 0.1, 0.1]):
        truth = max(rates) - min(rates)
        sizes = rng.integers(60, 200, (300, 3))
        hits = rng.binomial(sizes, rates)
        covered = [ci["ci_low"] <= truth <= ci["ci_high"] for ci in
                   (gap_interval(list(zip(h.tolist(), n.tolist(), strict=True)), 0.95)
                    for h, n in zip(hits, sizes, strict=True))]
        assert np.mean(covered) >= 0.93, rates


def test_fairness_gaps_and_their_intervals_in_an_evaluation(binary: dict[str, Any]) -> None:
    X = {"region": binary["region"]}
    ev = evaluate(y=binary["y"], y_proba=binary["p"], X=X, sensitive="region",
                  bootstrap=50, gates={"fairness.demographic_parity_difference.ci_high": "<= 1"})
    fair = ev["fairness"]
    ci = fair["intervals"]["equal_opportunity_difference"]
    assert ci["ci_low"] <= fair["equal_opportunity_difference"] <= ci["ci_high"]
    values = ev.gate_values()
    assert values["fairness.demographic_parity_difference.ci_high"] == \
        fair["intervals"]["demographic_parity_difference"]["ci_high"]
    assert ev.passed is True and b"simultaneous Wilson" in ev.to_html()
    with pytest.raises(UserError, match="needs intervals; drop bootstrap=0"):
        evaluate(y=binary["y"], y_proba=binary["p"], X=X, sensitive="region", bootstrap=0,
                 gates={"fairness.equal_opportunity_difference.ci_low": "<= 0.1"})
