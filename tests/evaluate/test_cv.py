"""Cross-validation: splits, pruning reports, estimator specs, folds as pipeline steps."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from sklearn.compose import ColumnTransformer
from sklearn.feature_selection import SelectKBest, f_classif
from sklearn.linear_model import LinearRegression, LogisticRegression
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import FunctionTransformer, OneHotEncoder, StandardScaler

import reprise
from reprise.core._hashing import canonical_json
from reprise.core._report import reporting_to
from reprise.core.errors import TrialPruned, UserError
from reprise.evaluate import build_estimator, cross_validate, estimator_spec
from reprise.evaluate._cv import _aggregate, make_splits


@pytest.fixture
def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(90, 3))
    return X, (X[:, 0] + 0.5 * rng.normal(size=90) > 0).astype(int)


def test_in_process_cv_is_seeded_and_aggregated(data: tuple[np.ndarray, np.ndarray]) -> None:
    X, y = data
    res = cross_validate(LogisticRegression(), X, y, k=3, seed=1)
    assert [f["fold"] for f in res["folds"]] == [0, 1, 2]
    assert sum(f["n_test"] for f in res["folds"]) == len(y)
    acc = res["metrics"]["accuracy"]
    assert acc["mean"] == pytest.approx(np.mean(acc["folds"]))
    assert acc["std"] == pytest.approx(np.std(acc["folds"], ddof=1))  # the sample std
    assert res["std_ddof"] == 1
    assert set(res["metrics"]) == {"accuracy", "balanced_accuracy", "f1", "roc_auc", "log_loss"}
    assert cross_validate(LogisticRegression(), X, y, k=3, seed=1) == res
    assert cross_validate(LogisticRegression(), X, y, k=3, seed=2) != res
    reg = cross_validate(LinearRegression(), X, X[:, 0] * 2.0, k=3)
    assert set(reg["metrics"]) == {"mae", "rmse", "r2"} and reg.mean("r2") == pytest.approx(1.0)


def test_std_is_the_sample_std_of_the_defined_folds() -> None:
    folds = [{"fold": i, "metrics": {"f1": f1, "roc_auc": auc}}
             for i, (f1, auc) in enumerate([(0.5, None), (0.7, 0.8), (0.9, None)])]
    agg = _aggregate(folds, cv="kfold", k=3, seed=0)
    assert agg["metrics"]["f1"]["std"] == pytest.approx(0.2)  # ddof=0 gave 0.163
    assert agg["metrics"]["roc_auc"] == {"mean": 0.8, "std": None, "folds": [None, 0.8, None],
                                         "defined": 1}  # one fold: no spread to estimate


def test_group_splits_never_share_a_group() -> None:
    groups = np.repeat(np.arange(12), 5)
    y = np.arange(60) % 2
    splits = make_splits("group", 4, y, groups, seed=3)
    tested = np.concatenate([groups[test] for _, test in splits])
    assert sorted(set(tested)) == list(range(12)) and len(tested) == 60
    for train, test in splits:
        assert not set(groups[train]) & set(groups[test])
    assert [t.tolist() for _, t in splits] == [
        t.tolist() for _, t in make_splits("group", 4, y, groups, seed=3)]


def test_time_series_splits_keep_order() -> None:
    splits = make_splits("timeseries", 4, np.arange(50) % 2, None, seed=0)
    for train, test in splits:
        assert train.max() < test.min() and np.all(np.diff(test) == 1)
    assert [t.min() for _, t in splits] == sorted(t.min() for _, t in splits)


def test_stratified_splits_keep_class_proportions() -> None:
    y = np.array([0] * 60 + [1] * 30)
    for _, test in make_splits("stratified", 3, y, None, seed=0):
        assert (y[test] == 1).sum() == 10


def test_groups_by_column_name(data: tuple[np.ndarray, np.ndarray]) -> None:
    X, y = data
    frame = pd.DataFrame(X, columns=["a", "b", "c"]).assign(g=np.arange(90) // 10)
    res = cross_validate(make_pipeline(ColumnTransformer([("s", StandardScaler(), ["a", "b"])]),
                                       LogisticRegression()), frame, y, cv="group", k=3,
                         groups="g", metrics=["accuracy"])
    assert [f["n_test"] for f in res["folds"]] == [30, 30, 30]


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"cv": "group"}, "cv='group' needs groups="),
    ({"cv": "loo"}, "cv must be one of kfold, stratified, group, timeseries"),
    ({"k": 1}, "integer >= 2"),
    ({"metrics": ["acc"]}, "unknown metric 'acc'"),
    ({"cv": "group", "groups": [0, 1] * 45, "k": 3}, "at least 3 distinct groups"),
    ({"k": 200}, "cannot be split into 200 folds"),
])
def test_bad_options(data: tuple[np.ndarray, np.ndarray], kwargs: dict[str, Any],
                     message: str) -> None:
    X, y = data
    with pytest.raises(UserError, match=message):
        cross_validate(LogisticRegression(), X, y, **kwargs)


def test_stratified_regression_is_refused(data: tuple[np.ndarray, np.ndarray]) -> None:
    X, _ = data
    with pytest.raises(UserError, match="needs a classifier"):
        cross_validate(LinearRegression(), X, X[:, 0], cv="stratified", k=3)


class _Pruner:
    def __init__(self, prune_at: int) -> None:
        self.prune_at, self.seen = prune_at, []  # type: ignore[var-annotated]

    def report(self, values: Mapping[str, float] | float, step: int) -> None:
        self.seen.append((step, dict(values)))  # type: ignore[arg-type]

    def should_prune(self) -> bool:
        return len(self.seen) > self.prune_at


def test_running_means_are_reported_and_pruning_stops_the_folds(
        data: tuple[np.ndarray, np.ndarray]) -> None:
    X, y = data
    keep = _Pruner(prune_at=99)
    with reporting_to(keep):
        res = cross_validate(LogisticRegression(), X, y, k=3, metrics=["accuracy"])
    folds = res["metrics"]["accuracy"]["folds"]
    assert [s for s, _ in keep.seen] == [0, 1, 2]
    assert [v["accuracy"] for _, v in keep.seen] == pytest.approx(
        [folds[0], np.mean(folds[:2]), np.mean(folds)])
    stop = _Pruner(prune_at=1)
    with reporting_to(stop), pytest.raises(TrialPruned):
        cross_validate(LogisticRegression(), X, y, k=5)
    assert [s for s, _ in stop.seen] == [0, 1]


def test_estimator_specs_round_trip_through_canonical_json() -> None:
    est = Pipeline([
        ("prep", ColumnTransformer([("cat", OneHotEncoder(handle_unknown="ignore"), [0]),
                                    ("num", StandardScaler(), [1, 2])])),
        ("select", SelectKBest(f_classif, k=2)),
        ("log", FunctionTransformer(np.log1p)),
        ("clf", LogisticRegression(C=0.3, class_weight={0: 1.0, 1: 2.0})),
    ])
    spec = estimator_spec(est)
    rebuilt = build_estimator(json.loads(canonical_json(spec)))
    assert estimator_spec(rebuilt) == spec
    assert rebuilt.named_steps["clf"].class_weight == {0: 1.0, 1: 2.0}
    assert rebuilt.named_steps["select"].score_func is f_classif
    assert rebuilt.steps[0][1].transformers[0][1].dtype is np.float64


class Custom:
    def __init__(self, alpha: float = 1.0) -> None:
        self.alpha = alpha

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        return {"alpha": self.alpha}

    def fit(self, X: Any, y: Any) -> Custom:
        return self


def test_untrusted_classes_are_refused_unless_trusted(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(UserError, match="REPRISE_TRUSTED_TYPES=tests.evaluate.test_cv.Custom"):
        estimator_spec(Custom())
    spec = {"$estimator": "os.system", "params": {}}
    with pytest.raises(UserError, match="refusing to import os.system"):
        build_estimator(spec)
    monkeypatch.setenv("REPRISE_TRUSTED_TYPES", "tests.evaluate.*")
    assert build_estimator(estimator_spec(Custom(0.5))).alpha == 0.5
    with pytest.raises(UserError, match="random_state.*RandomState"):
        estimator_spec(LogisticRegression(random_state=np.random.RandomState(0)))


FLOW = '''
import numpy as np
import reprise
from reprise import step
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from reprise.evaluate import cross_validate


@step
def data(n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, 3))
    return X, (X[:, 0] + 0.5 * rng.normal(size=n) > 0).astype(int)


@step
def model(C: float) -> LogisticRegression:
    return LogisticRegression(C=C)


@reprise.pipeline
def flow(n: int = 90, C: float = 1.0):
    X, y = data(n)
    est = make_pipeline(StandardScaler(), LogisticRegression(C=C))
    return cross_validate(est, X, y, cv="stratified", k=3, metrics=["accuracy", "roc_auc"])


@reprise.pipeline
def from_step(C: float = 1.0):
    X, y = data(90)
    return cross_validate(model(C), X, y, k=3, seed=4, name="check")
'''


@pytest.fixture
def flows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, Any]]:
    (tmp_path / "cvflow.py").write_text(textwrap.dedent(FLOW))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    reprise.init(tmp_path)
    from reprise.pipeline import load_pipeline

    yield load_pipeline("cvflow.py:flow"), load_pipeline("cvflow.py:from_step")
    sys.modules.pop("cvflow", None)


def test_folds_are_parallel_steps_cached_one_by_one(flows: tuple[Any, Any],
                                                    data: tuple[np.ndarray, np.ndarray]) -> None:
    flow, _ = flows
    graph = flow.build({})
    assert list(graph.nodes) == ["data", "cv_fold0", "cv_fold1", "cv_fold2", "cv"]
    assert all(graph.nodes[f"cv_fold{i}"].upstream == ["data"] for i in range(3))
    first = flow.run(workers=2)
    assert sorted(first.executed) == ["cv", "cv_fold0", "cv_fold1", "cv_fold2", "data"]
    ws = reprise.open_workspace()
    pids = {s["step_name"]: s["details"]["pid"] for s in ws.metadata.get_step_runs(first.run_id)}
    assert all(pids[f"cv_fold{i}"] != os.getpid() for i in range(3))  # in worker processes
    X, y = data
    here = cross_validate(make_pipeline(StandardScaler(), LogisticRegression()), X, y,
                          cv="stratified", k=3, metrics=["accuracy", "roc_auc"])
    assert first["cv"] == dict(here)
    final = ws.metadata.latest_metrics([first.run_id])[first.run_id]
    assert final["cv/accuracy"].value == pytest.approx(here.mean("accuracy"))
    assert "cv/roc_auc.std" in final
    again = flow.run(workers=1)
    assert again.executed == [] and len(again.reused) == 5
    changed = flow.run(C=0.1, workers=1)
    assert sorted(changed.executed) == ["cv", "cv_fold0", "cv_fold1", "cv_fold2"]


def test_an_estimator_from_a_step(flows: tuple[Any, Any]) -> None:
    _, from_step = flows
    res = from_step.run(workers=1)
    assert sorted(res.executed) == ["check", "check_fold0", "check_fold1", "check_fold2",
                                    "data", "model"]
    assert res["check"]["k"] == 3 and res["check"]["seed"] == 4
    assert sorted(from_step.run(C=0.5, workers=1).reused) == ["data"]
