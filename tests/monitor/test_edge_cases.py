"""Real-data corners give typed results, never a crash: null spellings, unseen
categories, all-null windows, constant columns, columns missing from the window,
numbers sent as text, large windows judged on learned or fixed thresholds."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from reprise.core.errors import ConfigError, UserError
from reprise.monitor import DriftPolicy, Reference, Window, compare, fit_reference


@pytest.fixture(scope="module")
def ref() -> Reference:
    rng = np.random.default_rng(0)
    n = 20_000
    return fit_reference(pa.table({
        "x": rng.normal(size=n),
        "const": np.full(n, 3.0),
        "plan": rng.choice(["a", "b", "c"], size=n, p=[0.5, 0.3, 0.2]),
        "flag": rng.random(n) < 0.3,
        "empty": pa.nulls(n, pa.float64()),
        "tags": pa.array([[1]] * n),
    }))


def _compare(ref: Reference, table: pa.Table, policy: DriftPolicy | None = None) -> object:
    w = Window(ref)
    w.update(table)
    return compare(ref, w, policy)


def _base(rng: np.random.Generator, n: int) -> dict[str, object]:
    return {"x": rng.normal(size=n), "const": np.full(n, 3.0),
            "plan": rng.choice(["a", "b", "c"], size=n, p=[0.5, 0.3, 0.2]),
            "flag": rng.random(n) < 0.3, "empty": pa.nulls(n, pa.float64()),
            "tags": pa.array([[1]] * n)}


def test_null_spellings_count_as_missing_and_numbers_as_text_are_read(ref: Reference) -> None:
    rng = np.random.default_rng(1)
    cols = _base(rng, 1000)
    x = [f"{v:.6f}" for v in cols["x"]]  # type: ignore[attr-defined]
    x[:100] = ["NA"] * 50 + ["null"] * 50
    x[100:110] = ["oops"] * 10
    cols["x"] = pa.array(x)
    r = _compare(ref, pa.table(cols))
    c = r.column("x")  # type: ignore[attr-defined]
    assert c.values == 890 and c.missing_rate == pytest.approx(0.11)
    assert c.verdict == "drift" and c.missing_p_value < 1e-10  # 11 % missing where none was


def test_unseen_categories_are_reported_apart(ref: Reference) -> None:
    rng = np.random.default_rng(2)
    cols = _base(rng, 1000)
    plan = cols["plan"].astype(object)  # type: ignore[attr-defined]
    plan[:80] = "enterprise"
    plan[80:90] = "trial"
    cols["plan"] = plan
    c = _compare(ref, pa.table(cols)).column("plan")  # type: ignore[attr-defined]
    assert c.unseen["rows"] == 90 and c.unseen["share"] == pytest.approx(0.09)
    assert c.unseen["labels"] == {"enterprise": 80, "trial": 10}
    assert c.verdict == "drift" and c.method == "chi2"


def test_all_null_window_is_a_missing_rate_drift_not_a_crash(ref: Reference) -> None:
    rng = np.random.default_rng(3)
    cols = _base(rng, 500)
    cols["x"] = pa.nulls(500, pa.float64())
    cols["plan"] = pa.array([None] * 500, pa.string())
    r = _compare(ref, pa.table(cols))
    for name in ("x", "plan"):
        c = r.column(name)  # type: ignore[attr-defined]
        assert c.values == 0 and c.missing_rate == 1.0
        assert c.verdict == "drift" and c.method is None and c.significant
    assert r.verdict == "drift"  # type: ignore[attr-defined]


def test_constant_and_empty_reference_columns(ref: Reference) -> None:
    rng = np.random.default_rng(4)
    same = _compare(ref, pa.table(_base(rng, 1000)))
    c = same.column("const")  # type: ignore[attr-defined]
    assert c.verdict == "no_drift" and c.statistic == 0.0 and c.effect["wasserstein"] is None
    e = same.column("empty")  # type: ignore[attr-defined]
    assert e.verdict == "insufficient" and "no value" in e.reason
    cols = _base(rng, 1000)
    cols["const"] = np.full(1000, 4.0)
    moved = _compare(ref, pa.table(cols)).column("const")  # type: ignore[attr-defined]
    assert moved.verdict == "drift" and moved.statistic == 1.0


def test_column_missing_from_window_extra_column_and_unsupported(ref: Reference) -> None:
    rng = np.random.default_rng(5)
    cols = _base(rng, 1000)
    del cols["x"]
    cols["new"] = np.ones(1000)
    r = _compare(ref, pa.table(cols))
    assert r.column("x").verdict == "absent"  # type: ignore[attr-defined]
    assert r.absent == ["x"] and r.extra == ["new"]  # type: ignore[attr-defined]
    assert r.column("tags").verdict == "unsupported"  # type: ignore[attr-defined]
    assert r.verdict == "no_drift"  # type: ignore[attr-defined]


def test_small_column_in_a_big_enough_window(ref: Reference) -> None:
    rng = np.random.default_rng(6)
    cols = _base(rng, 1000)
    x = cols["x"]
    x[50:] = np.nan  # type: ignore[index]
    c = _compare(ref, pa.table(cols)).column("x")  # type: ignore[attr-defined]
    assert c.values == 50 and c.method is None and c.p_value is None
    assert c.verdict == "drift"  # the missing rate moved from 0 to 95 %


def test_large_windows_use_the_learned_threshold(ref: Reference) -> None:
    rng = np.random.default_rng(7)
    quiet = _compare(ref, pa.table(_base(rng, 30_000)))
    c = quiet.column("x")  # type: ignore[attr-defined]
    assert c.method == "wasserstein" and c.threshold_source == "learned"
    assert c.statistic < c.threshold and quiet.verdict == "no_drift"  # type: ignore[attr-defined]
    assert quiet.column("plan").method == "js"  # type: ignore[attr-defined]
    cols = _base(rng, 30_000)
    cols["x"] = rng.normal(0.1, 1.0, 30_000)  # small, but the window is large
    loud = _compare(ref, pa.table(cols)).column("x")  # type: ignore[attr-defined]
    assert loud.statistic > loud.threshold and loud.verdict == "drift"


def test_fixed_threshold_and_ignore_from_the_policy(ref: Reference) -> None:
    rng = np.random.default_rng(8)
    cols = _base(rng, 1000)
    cols["x"] = rng.normal(0.3, 1.0, 1000)
    policy = DriftPolicy(columns={"x": {"threshold": 0.5}, "plan": {"ignore": True}})
    r = _compare(ref, pa.table(cols), policy)
    x = r.column("x")  # type: ignore[attr-defined]
    assert x.method == "wasserstein" and x.threshold == 0.5 and x.threshold_source == "policy"
    assert x.verdict == "no_drift" and x.p_value is None
    assert r.column("plan").verdict == "ignored"  # type: ignore[attr-defined]


def test_bad_input_is_a_clear_error() -> None:
    with pytest.raises(UserError, match="no rows"):
        fit_reference(pa.table({"x": pa.array([], pa.float64())}))
    with pytest.raises(ConfigError, match="chunks"):
        fit_reference(pa.table({"x": [1.0]}), chunks=1)
    with pytest.raises(UserError, match="not list"):
        fit_reference([1, 2, 3])
    with pytest.raises(ConfigError, match="correction"):
        DriftPolicy(correction="bonferroni")
    with pytest.raises(ConfigError, match="unknown drift policy"):
        DriftPolicy.from_dict({"alpah": 0.1})
    with pytest.raises(ConfigError, match="columns must be a mapping of column name"):
        DriftPolicy.from_dict({"columns": ["income"]})  # was an AttributeError
    with pytest.raises(ConfigError, match=r"\['incme'\] that churn:1 does not have "
                                          r"\(did you mean 'income'\?\)"):
        DriftPolicy(columns={"incme": {"ignore": True}}).check_columns(["age", "income"],
                                                                       "churn:1")
    DriftPolicy(columns={"income": {"ignore": True}}).check_columns(["income"], "churn:1")


def test_bh_correction_is_named_in_the_report(ref: Reference) -> None:
    r = _compare(ref, pa.table(_base(np.random.default_rng(9), 1000)),
                 DriftPolicy(correction="bh"))
    assert r.to_dict()["correction"] == "bh"  # type: ignore[attr-defined]
