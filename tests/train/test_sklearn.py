"""fit_estimator: tracking, warm starts (partial_fit, warm_start, pipelines), input checks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sklearn.datasets import make_classification
from sklearn.ensemble import GradientBoostingClassifier, RandomForestClassifier
from sklearn.linear_model import LogisticRegression, SGDClassifier
from sklearn.naive_bayes import MultinomialNB
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler

import reprise
from reprise.core.errors import ParamConflictError, UserError
from reprise.pipeline._execute import StepContext
from reprise.store._ml import save_estimator
from reprise.tracking._api import _active
from reprise.train import fit_estimator
from reprise.train._sklearn import estimator_params


@pytest.fixture
def data() -> tuple[np.ndarray, np.ndarray]:
    X, y = make_classification(n_samples=80, n_features=5, random_state=0)
    return X, y


def sgd() -> SGDClassifier:
    return SGDClassifier(random_state=0, max_iter=50, tol=None)


def trees(model: Any) -> list[np.ndarray]:
    return [t.tree_.threshold for t in np.ravel(model.estimators_)]


# -- tracking ---------------------------------------------------------------------------------


def test_fit_in_a_run_logs_params_and_metrics(workspace: reprise.Workspace, data: Any) -> None:
    X, y = data
    est = Pipeline([("scale", StandardScaler()), ("clf", LogisticRegression(C=0.5))])
    with reprise.start_run("fit") as run:
        assert fit_estimator(est, X, y) is est
    assert est.predict(X).shape == (80,)
    rec = workspace.metadata.get_run(run.id)
    assert rec.params["estimator_class"] == "Pipeline"
    assert rec.params["clf__C"] == 0.5 and rec.params["scale__with_mean"] is True
    assert rec.params["steps"] == [["scale", "StandardScaler"], ["clf", "LogisticRegression"]]
    assert rec.params["clf"] == "LogisticRegression"
    [n] = workspace.metadata.get_metrics(run.id, "n_samples")
    [seconds] = workspace.metadata.get_metrics(run.id, "fit_seconds")
    assert n.value == 80 and seconds.value > 0


def test_refitting_with_other_params_in_one_run_fails_before_fitting(
        workspace: reprise.Workspace, data: Any) -> None:
    X, y = data
    with reprise.start_run("fit"):
        fit_estimator(LogisticRegression(C=0.5), X, y)
        second = LogisticRegression(C=2.0)
        with pytest.raises(ParamConflictError):
            fit_estimator(second, X, y)
        assert not hasattr(second, "coef_")
        fit_estimator(second, X, y, log=False)
    assert hasattr(second, "coef_")


def test_inside_a_step_only_metrics_are_logged(data: Any) -> None:
    ctx = StepContext("train")
    _active.push(ctx)  # type: ignore[arg-type]
    try:
        fit_estimator(LogisticRegression(), *data)
    finally:
        _active.remove(ctx)  # type: ignore[arg-type]
    assert [key for key, _, _ in ctx.metrics] == ["fit_seconds", "n_samples"]


def test_without_a_run_nothing_is_logged(data: Any) -> None:
    assert reprise.active_run() is None
    assert hasattr(fit_estimator(LogisticRegression(), *data), "coef_")


def test_params_that_are_not_json_become_type_names() -> None:
    params = estimator_params(LogisticRegression(random_state=np.random.RandomState(0),
                                                 class_weight={0: 1.0, 1: np.float64(2)}))
    assert params["random_state"] == "RandomState"
    assert params["class_weight"] == {"0": 1.0, "1": 2.0}


# -- warm starts ------------------------------------------------------------------------------


def test_partial_fit_continues_from_a_copy_of_the_previous_model(data: Any) -> None:
    X, y = data
    previous = sgd().fit(X[:40], y[:40])
    before = previous.coef_.copy()
    got = fit_estimator(sgd(), X[40:], y[40:], warm_start_from=previous)
    expected = sgd().fit(X[:40], y[:40])
    expected.partial_fit(X[40:], y[40:])
    assert got is not previous
    np.testing.assert_array_equal(previous.coef_, before)  # the previous model is untouched
    np.testing.assert_allclose(got.coef_, expected.coef_)
    fresh = sgd().partial_fit(X[40:], y[40:], classes=[0, 1])
    assert not np.allclose(got.coef_, fresh.coef_)


def test_partial_fit_uses_the_new_hyperparameters(data: Any) -> None:
    X, y = data
    previous = sgd().fit(X[:40], y[:40])
    got = fit_estimator(sgd().set_params(alpha=0.5), X[40:], y[40:], warm_start_from=previous)
    expected = sgd().fit(X[:40], y[:40]).set_params(alpha=0.5)
    expected.partial_fit(X[40:], y[40:])
    assert got.alpha == 0.5 and previous.alpha == 0.0001
    np.testing.assert_allclose(got.coef_, expected.coef_)


def test_warm_start_from_a_skops_file(tmp_path: Path, data: Any) -> None:
    X, y = data
    previous = sgd().fit(X[:40], y[:40])
    path = save_estimator(previous, tmp_path / "v1.skops")
    from_file = fit_estimator(sgd(), X[40:], y[40:], warm_start_from=path)
    from_object = fit_estimator(sgd(), X[40:], y[40:], warm_start_from=previous)
    np.testing.assert_array_equal(from_file.coef_, from_object.coef_)


def test_partial_fit_passes_classes(data: Any) -> None:
    X, y = data
    counts = np.abs(X).round().astype(int)
    previous = MultinomialNB().fit(counts[:40], y[:40])
    got = fit_estimator(MultinomialNB(), counts[40:], y[40:], warm_start_from=previous,
                        classes=[0, 1])
    np.testing.assert_array_equal(got.class_count_, np.bincount(y))
    with pytest.raises(UserError, match="classes= is only used"):
        fit_estimator(MultinomialNB(), counts, y, classes=[0, 1])


@pytest.mark.parametrize("make", [
    lambda n: RandomForestClassifier(n_estimators=n, random_state=0),
    lambda n: GradientBoostingClassifier(n_estimators=n, random_state=0),
])
def test_warm_start_adds_estimators(data: Any, make: Any) -> None:
    X, y = data
    previous = make(4).fit(X, y)
    got = fit_estimator(make(7), X, y, warm_start_from=previous)
    assert len(np.ravel(got.estimators_)) == 7 and len(np.ravel(previous.estimators_)) == 4
    for old, new in zip(trees(previous), trees(got)[:4], strict=True):
        np.testing.assert_array_equal(old, new)  # the first trees are kept, not refitted
    assert got.warm_start is False and got.n_estimators == 7


def test_pipeline_keeps_fitted_preprocessing_and_continues_the_final_step(data: Any) -> None:
    X, y = data
    previous = Pipeline([("scale", StandardScaler()), ("clf", sgd())]).fit(X[:40], y[:40])
    shifted = X[40:] + 5.0  # refitting the scaler would centre this away
    got = fit_estimator(Pipeline([("scale", StandardScaler()), ("clf", sgd())]),
                        shifted, y[40:], warm_start_from=previous)
    np.testing.assert_array_equal(got["scale"].mean_, previous["scale"].mean_)
    expected = Pipeline([("scale", StandardScaler()), ("clf", sgd())]).fit(X[:40], y[:40])
    expected["clf"].partial_fit(expected["scale"].transform(shifted), y[40:])
    np.testing.assert_allclose(got["clf"].coef_, expected["clf"].coef_)
    assert got.predict(X).shape == (80,)


def test_pipeline_warm_start_checks(data: Any) -> None:
    X, y = data
    previous = Pipeline([("scale", StandardScaler()), ("clf", sgd())]).fit(X, y)
    with pytest.raises(UserError, match="earlier pipeline steps"):
        fit_estimator(Pipeline([("scale", StandardScaler()), ("clf", sgd())]), X, y,
                      warm_start_from=previous, scale__sample_weight=np.ones(80))
    with pytest.raises(UserError, match="steps"):
        fit_estimator(Pipeline([("norm", StandardScaler()), ("clf", sgd())]), X, y,
                      warm_start_from=previous)
    got = fit_estimator(Pipeline([("scale", StandardScaler()), ("clf", sgd())]), X, y,
                        warm_start_from=previous, clf__sample_weight=np.ones(80))
    assert got["clf"].t_ > previous["clf"].t_


def test_estimators_that_cannot_warm_start(data: Any) -> None:
    X, y = data
    previous = KNeighborsClassifier().fit(X, y)
    with pytest.raises(UserError, match="KNeighborsClassifier cannot be warm-started"):
        fit_estimator(KNeighborsClassifier(), X, y, warm_start_from=previous)


def test_warm_start_source_checks(tmp_path: Path, data: Any) -> None:
    X, y = data
    with pytest.raises(UserError, match="same class"):
        fit_estimator(sgd(), X, y, warm_start_from=LogisticRegression().fit(X, y))
    with pytest.raises(UserError, match="never fitted"):
        fit_estimator(sgd(), X, y, warm_start_from=sgd())
    with pytest.raises(UserError, match="is not a file"):
        fit_estimator(sgd(), X, y, warm_start_from=tmp_path / "missing.skops")


# -- bad inputs -------------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "match"), [
    ((np.zeros((0, 3)), np.zeros(0)), "no samples"),
    ((np.zeros((5, 3)), np.zeros(4)), "X has 5 samples but y has 4"),
    ((None, None), "X must be array-like"),
    ((np.float64(1.0), None), "X must be array-like"),
])
def test_bad_data(args: tuple[Any, Any], match: str) -> None:
    est = LogisticRegression()
    with pytest.raises(UserError, match=match):
        fit_estimator(est, *args)
    assert not hasattr(est, "coef_")


def test_not_an_estimator(data: Any) -> None:
    with pytest.raises(UserError, match="not a scikit-learn estimator"):
        fit_estimator(object(), *data)
    with pytest.raises(UserError, match=r"the class LogisticRegression.*LogisticRegression\(\)"):
        fit_estimator(LogisticRegression, *data)
