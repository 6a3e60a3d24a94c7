"""Hostile traffic in live windows: missing values and their spellings, unseen
categories, an all-null column, a constant column, a column (or the outputs) missing
from the log — each a typed result, never a crash."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from reprise.monitor._live import live_report
from tests.monitor._live_setup import log_traffic, setup_model, traffic


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("edges")
    ws, model = setup_model(root, wide=True)
    yield ws, model
    ws.close()


def _frame(n: int = 600, seed: int = 21, **cols: Any) -> pd.DataFrame:
    f = traffic(n, seed=seed)
    rng = np.random.default_rng(seed)
    f["plan"] = rng.choice(["basic", "pro", "team"], n, p=[0.6, 0.3, 0.1])
    f["const"] = 1.0
    for k, v in cols.items():
        f[k] = v
    return f


def _window(ws: Any, model: Any, frame: pd.DataFrame, at: float, **kw: Any) -> Any:
    # the model predicts on clean rows; what is logged is ``frame`` as given
    log_traffic(ws, _Clean(model), frame, at=at, **kw)
    (w,) = live_report("churn", workspace=ws, window="100s", since=at, now=at + 99,
                       reference="train@1", persist=False).windows
    return w


class _Clean:
    """Predicts as the served model would after the signature's checks (nulls filled)."""

    def __init__(self, model: Any) -> None:
        self.model, self.feature_names_in_ = model, model.feature_names_in_

    def _x(self, x: pd.DataFrame) -> pd.DataFrame:
        x = x.copy()
        for col in ("a", "b"):
            x[col] = pd.to_numeric(x[col], errors="coerce").fillna(0.0)
        x["plan"] = x["plan"].fillna("basic")
        return x

    def predict(self, x: pd.DataFrame) -> Any:
        return self.model.predict(self._x(x))

    def predict_proba(self, x: pd.DataFrame) -> Any:
        return self.model.predict_proba(self._x(x))


def test_in_distribution_wide_traffic_is_quiet(served: Any) -> None:
    ws, model = served
    w = _window(ws, model, _frame(), at=10_000)
    assert w.verdicts["input_drift"] == "no_drift", w.input.drifted
    assert w.input.column("const").verdict == "no_drift"


def test_unseen_categories_are_reported_on_their_own(served: Any) -> None:
    ws, model = served
    f = _frame(seed=8)
    f.loc[f.index[:150], "plan"] = "enterprise"
    w = _window(ws, model, f, at=20_000)
    plan = w.input.column("plan")
    assert plan.unseen["labels"] == {"enterprise": 150} and plan.verdict == "drift"
    assert w.verdicts["input_drift"] == "drift"


def test_missing_values_and_their_spellings_change_the_missing_rate(served: Any) -> None:
    ws, model = served
    f = _frame(seed=9)
    f["plan"] = f["plan"].astype(object)
    f.loc[f.index[:100], "plan"] = "NA"  # a null spelling, logged as text
    f.loc[f.index[100:200], "plan"] = None
    f["a"] = f["a"].astype(object)
    f.loc[f.index[:120], "a"] = None
    w = _window(ws, model, f, at=30_000)
    plan, a = w.input.column("plan"), w.input.column("a")
    assert plan.missing_rate == pytest.approx(200 / 600) and plan.reference_missing_rate == 0
    assert plan.unseen is not None and "NA" not in plan.unseen["labels"]
    assert a.missing_rate == pytest.approx(120 / 600) and a.verdict == "drift"


def test_an_all_null_column_and_a_moved_constant(served: Any) -> None:
    ws, model = served
    f = _frame(seed=10, const=2.0)
    f["b"] = None
    f["b"] = f["b"].astype(float)
    w = _window(ws, model, f, at=40_000)
    b, const = w.input.column("b"), w.input.column("const")
    assert b.values == 0 and b.missing_rate == 1.0 and b.verdict == "drift"
    assert "no verdict on the distribution" in b.reason
    assert const.verdict == "drift"


def test_a_column_or_the_outputs_missing_from_the_log(served: Any) -> None:
    ws, model = served
    w = _window(ws, model, _frame(seed=11), at=50_000, drop=("b",), outputs=False)
    assert w.input.column("b").verdict == "absent" and "b" in w.input.absent
    assert w.verdicts["input_drift"] == "no_drift"
    assert w.verdicts["prediction_drift"] == "insufficient"
    assert {c.verdict for c in w.prediction.columns} == {"absent"}
    assert w.performance["verdict"] == "unknown"
    w = _window(ws, model, _frame(n=30, seed=12), at=60_000)  # 30 rows: no verdict at all
    assert w.verdicts == {"input_drift": "insufficient", "prediction_drift": "insufficient",
                          "performance": "unknown"}
