"""The honesty figures of issue 15, point 4, on data generated here with a fixed seed.

- 100 windows of 1,000 rows drawn from the reference distribution: the dataset-level
  false-alarm rate (Holm across every column's tests) is at most 5 %;
- a 0.5 σ mean shift in one of 20 numeric columns, or a 20-point change in one
  category's share, is detected within 2 windows;
- a window of 30 rows gets no verdict.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from reprise.monitor import Window, compare, fit_reference

NUMERIC = 20
SHARES = {"a": 0.4, "b": 0.3, "c": 0.2, "d": 0.1}


def _rows(rng: np.random.Generator, n: int, *, shift: float = 0.0,
          shares: dict[str, float] = SHARES) -> pa.Table:
    cols: dict[str, object] = {}
    for i in range(NUMERIC):
        x = rng.normal(10.0 * i, 1.0 + i, size=n)
        if i == 7:
            x = x + shift * (1.0 + i)  # in units of this column's sigma
        if i % 5 == 0:  # a few columns with missing values, at an unchanged rate
            x[rng.random(n) < 0.05] = np.nan
        cols[f"x{i}"] = x
    cols["plan"] = rng.choice(list(shares), size=n, p=list(shares.values()))
    return pa.table(cols)


@pytest.fixture(scope="module")
def reference() -> object:
    return fit_reference(_rows(np.random.default_rng(2026), 50_000))


def _verdict(reference: object, table: pa.Table) -> tuple[str, list[str]]:
    w = Window(reference)  # type: ignore[arg-type]
    w.update(table)
    r = compare(reference, w)  # type: ignore[arg-type]
    return r.verdict, r.drifted


def test_false_alarm_rate_at_most_5_percent(reference: object) -> None:
    rng = np.random.default_rng(7)
    verdicts = [_verdict(reference, _rows(rng, 1000))[0] for _ in range(100)]
    assert set(verdicts) <= {"drift", "no_drift"}
    assert verdicts.count("drift") <= 5, verdicts.count("drift")


def test_half_sigma_shift_in_one_of_20_columns_detected_within_2_windows(
        reference: object) -> None:
    rng = np.random.default_rng(8)
    for _ in range(5):  # five independent onsets, each caught within two windows
        found = [_verdict(reference, _rows(rng, 1000, shift=0.5)) for _ in range(2)]
        assert any(v == "drift" and "x7" in cols for v, cols in found), found
    w = Window(reference)  # type: ignore[arg-type]
    w.update(_rows(rng, 1000, shift=0.5))
    check = compare(reference, w).as_check()  # type: ignore[arg-type]
    assert check["verdict"] == "fail" and check["value"] <= 0.05 and "x7" in check["message"]


def test_20_point_change_in_one_category_share_detected_within_2_windows(
        reference: object) -> None:
    rng = np.random.default_rng(9)
    moved = {"a": 0.2, "b": 0.5, "c": 0.2, "d": 0.1}  # "a" loses 20 points to "b"
    for _ in range(5):
        found = [_verdict(reference, _rows(rng, 1000, shares=moved)) for _ in range(2)]
        assert any(v == "drift" and "plan" in cols for v, cols in found), found


def test_a_window_of_30_rows_gets_no_verdict(reference: object) -> None:
    rng = np.random.default_rng(10)
    w = Window(reference)  # type: ignore[arg-type]
    w.update(_rows(rng, 30, shift=3.0))  # even a large shift: too few rows to judge
    r = compare(reference, w)  # type: ignore[arg-type]
    assert r.verdict == "insufficient"
    assert {c.verdict for c in r.columns} == {"insufficient"}
    assert all(c.p_value is None and c.missing_p_value is None for c in r.columns)
    check = r.as_check()  # what a rollout's input_drift check would report
    assert check["verdict"] == "insufficient" and check["value"] is None
