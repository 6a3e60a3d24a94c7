"""Cross-validation on scikit-learn's splitters, in this process or as pipeline steps.

Outside a pipeline, :func:`cross_validate` runs the folds one after another and
reports the running mean of every metric after each fold through
:func:`reprise.core._report.report`: inside a tuning trial, that is how a
cross-validated objective gets pruned (``TrialPruned`` propagates).

Inside a ``@reprise.pipeline`` body it adds one step per fold
(``<name>_fold<i>``) and one aggregate step (``<name>``), and returns the
aggregate's output: the folds are independent nodes, so the executor runs them
in parallel and caches each one under its own key (the fold index is one of
its parameters). Each fold step recomputes the same seeded split and keeps its
own part.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from reprise.core._report import report
from reprise.core.errors import UserError
from reprise.evaluate._inputs import Array, as_1d, label_value, prepare
from reprise.evaluate._metrics import check_applicable, metric_info, point_metrics
from reprise.evaluate._predict import kind_of
from reprise.evaluate._spec import build_estimator, estimator_spec, is_spec, spec_versions
from reprise.pipeline._step import StepOutput, current_builder, step

__all__ = ["CV_KINDS", "CVResult", "cross_validate", "cv_aggregate", "cv_fold"]

CV_KINDS = ("kfold", "stratified", "group", "timeseries")
#: The folds' spread is the sample standard deviation (the folds are a sample of splits).
STD_DDOF = 1


class CVResult(dict[str, Any]):
    """Per-fold metrics and their aggregate: ``folds`` (list) and ``metrics``
    (``{name: {"mean", "std", "folds", "defined"}}``); a plain dict when stored.

    ``mean`` and ``std`` are over the folds where the metric is defined (``defined``
    counts them); ``std`` is the sample standard deviation (``ddof=1``, recorded as
    ``std_ddof``), None with fewer than two defined folds."""

    def mean(self, name: str) -> float | None:
        found = self["metrics"][name]["mean"]
        return None if found is None else float(found)


def cross_validate(estimator: Any, X: Any, y: Any, *, cv: str = "kfold", k: int = 5,
                   groups: Any = None, seed: int = 0, metrics: Sequence[str] | None = None,
                   task: str = "auto", positive_label: Any = None, name: str = "cv") -> Any:
    """K-fold cross-validation of an unfitted estimator (each fold fits a clone).

    Args:
        estimator: a scikit-learn estimator or Pipeline (inside a pipeline also a step
            output holding one).
        X, y: features and targets (inside a pipeline: usually upstream step outputs).
        cv: "kfold" (shuffled), "stratified" (shuffled, class proportions kept),
            "group" (a group never spans two folds; needs ``groups``) or "timeseries"
            (order kept, each test fold after its training rows).
        k: number of folds. groups: one group per row, or the name of a column of X.
        seed: the shuffling seed. metrics: metric names (default per task).
        name: the aggregate step's name inside a pipeline (folds are ``<name>_fold<i>``).

    Returns:
        A :class:`CVResult`; inside a pipeline, the aggregate step's output placeholder.

    Example:
        >>> from sklearn.linear_model import LogisticRegression
        >>> X = [[i % 7, i % 3] for i in range(60)]; y = [int(i % 7 > 3) for i in range(60)]
        >>> res = cross_validate(LogisticRegression(), X, y, cv="stratified", k=3,
        ...                      metrics=["accuracy"])
        >>> len(res["folds"]), 0.0 <= res.mean("accuracy") <= 1.0
        (3, True)
    """
    _check_options(cv, k, groups, metrics)
    if current_builder() is not None:
        return _add_steps(estimator, X, y, cv=cv, k=k, groups=groups, seed=seed,
                          metrics=metrics, task=task, positive_label=positive_label, name=name)
    folds: list[dict[str, Any]] = []
    for i in range(k):
        folds.append(_run_fold(estimator, X, y, groups, fold=i, cv=cv, k=k, seed=seed,
                               metrics=metrics, task=task, positive_label=positive_label))
        running = {m: _mean([f["metrics"][m] for f in folds]) for m in folds[0]["metrics"]}
        report({m: v for m, v in running.items() if v is not None}, step=i)
    return _aggregate(folds, cv=cv, k=k, seed=seed)


def _check_options(cv: str, k: int, groups: Any, metrics: Sequence[str] | None) -> None:
    if cv not in CV_KINDS:
        raise UserError(f"cv must be one of {', '.join(CV_KINDS)}; got {cv!r}.")
    if not isinstance(k, int) or isinstance(k, bool) or k < 2:
        raise UserError(f"k (the number of folds) must be an integer >= 2, got {k!r}.")
    if cv == "group" and groups is None:
        raise UserError("cv='group' needs groups= (one group id per row, or a column name of "
                        "X) so that no group is split across folds.")
    for m in metrics or []:
        metric_info(m)


def _add_steps(estimator: Any, X: Any, y: Any, *, cv: str, k: int, groups: Any, seed: int,
               metrics: Sequence[str] | None, task: str, positive_label: Any, name: str) -> Any:
    if isinstance(estimator, StepOutput):
        est: Any = estimator
        versions = spec_versions({})
    else:
        est = estimator if is_spec(estimator) else estimator_spec(estimator)
        versions = spec_versions(est)
    if groups is not None and not isinstance(groups, (str, StepOutput)):
        groups = [label_value(g) for g in as_1d(groups, "groups")]
    folds = [cv_fold.with_options(name=f"{name}_fold{i}")(
        est, X, y, groups, fold=i, cv=cv, k=k, seed=seed,
        metrics=None if metrics is None else list(metrics), task=task,
        positive_label=label_value(positive_label), versions=versions) for i in range(k)]
    return cv_aggregate.with_options(name=name)(folds, cv=cv, k=k, seed=seed)


@step
def cv_fold(estimator: Any, X: Any, y: Any, groups: Any, fold: int, cv: str, k: int, seed: int,
            metrics: list[str] | None, task: str, positive_label: Any,
            versions: dict[str, str]) -> dict[str, Any]:
    """One fold as a pipeline step. ``versions`` only feeds the cache key: the library
    versions (or source hash) of the estimator's classes, which a JSON spec lacks."""
    if is_spec(estimator):
        estimator = build_estimator(estimator)
    return _run_fold(estimator, X, y, groups, fold=fold, cv=cv, k=k, seed=seed,
                     metrics=metrics, task=task, positive_label=positive_label)


@step
def cv_aggregate(folds: list[dict[str, Any]], cv: str, k: int, seed: int) -> dict[str, Any]:
    """Fan-in of the fold steps; logs each metric's mean and std to the pipeline run."""
    import reprise.tracking._api as tracking

    result = _aggregate(sorted(folds, key=lambda f: int(f["fold"])), cv=cv, k=k, seed=seed)
    values: dict[str, float] = {}
    for m, agg in result["metrics"].items():
        if agg["mean"] is not None:
            values[m] = agg["mean"]
        if agg["std"] is not None:
            values[f"{m}.std"] = agg["std"]
    if values and tracking.active_run() is not None:
        tracking.log_metrics(values)
    return dict(result)


def _take(data: Any, rows: Array) -> Any:
    iloc = getattr(data, "iloc", None)
    if iloc is not None:
        return iloc[rows]
    return np.asarray(data)[rows]


def _groups(groups: Any, X: Any, n: int) -> Array | None:
    if groups is None:
        return None
    if isinstance(groups, str):
        from reprise.evaluate._slices import column_values

        return column_values(X, groups, n)
    arr = as_1d(groups, "groups")
    if arr.shape[0] != n:
        raise UserError(f"groups has {arr.shape[0]} values but X has {n} rows.")
    return arr


def make_splits(cv: str, k: int, y: Array, groups: Array | None,
                seed: int) -> list[tuple[Array, Array]]:
    """The ``k`` (train rows, test rows) pairs; the same for the same inputs and seed."""
    from sklearn import model_selection as ms

    n = y.shape[0]
    if cv == "group":
        if groups is None:
            raise UserError("cv='group' needs groups=.")
        if np.unique(groups).size < k:
            raise UserError(f"cv='group' with k={k} needs at least {k} distinct groups; "
                            f"groups has {np.unique(groups).size}.")
        splitter: Any = ms.GroupKFold(n_splits=k, shuffle=True, random_state=seed)
    elif cv == "stratified":
        splitter = ms.StratifiedKFold(n_splits=k, shuffle=True, random_state=seed)
    elif cv == "timeseries":
        splitter = ms.TimeSeriesSplit(n_splits=k)
    else:
        splitter = ms.KFold(n_splits=k, shuffle=True, random_state=seed)
    if n < k + (1 if cv == "timeseries" else 0):
        raise UserError(f"{n} rows cannot be split into {k} folds; use a smaller k.")
    return list(splitter.split(np.zeros((n, 1)), y, groups))


def _run_fold(estimator: Any, X: Any, y: Any, groups: Any, *, fold: int, cv: str, k: int,
              seed: int, metrics: Sequence[str] | None, task: str,
              positive_label: Any) -> dict[str, Any]:
    from sklearn.base import clone

    yt = as_1d(y, "y")
    n = yt.shape[0]
    kind = task if task != "auto" else kind_of(estimator)
    if kind == "auto":  # an estimator without scikit-learn tags: the targets decide
        fractional = yt.dtype.kind == "f" and bool(np.any(yt != np.round(yt)))
        kind = "regression" if fractional else "classification"
    if cv == "stratified" and kind == "regression":
        raise UserError("cv='stratified' keeps class proportions; it needs a classifier. Use "
                        "cv='kfold' for regression.")
    train, test = make_splits(cv, k, yt, _groups(groups, X, n), seed)[fold]
    classes = np.unique(yt).tolist() if kind != "regression" else None
    if classes is not None:  # label problems (e.g. no positive_label) surface before fitting
        prepare(yt, yt, task=kind, labels=classes, positive_label=positive_label)
    model = clone(estimator).fit(_take(X, train), yt[train])
    x_test = _take(X, test)
    proba = _full_proba(model, x_test, classes) if classes is not None else None
    p = prepare(yt[test], model.predict(x_test), proba, task=kind, labels=classes,
                positive_label=positive_label)
    names = list(metrics) if metrics is not None else _default_cv_metrics(p.task, proba)
    check_applicable(names, p)
    return {"fold": fold, "n_train": int(len(train)), "n_test": int(len(test)),
            "metrics": point_metrics(p, names)}


def _full_proba(model: Any, X: Any, classes: list[Any]) -> Array | None:
    """``predict_proba`` with a column for every class of y, also those missing from the
    fold's training rows (their probability is 0)."""
    if not callable(getattr(model, "predict_proba", None)):
        return None
    raw = np.asarray(model.predict_proba(X), dtype=np.float64)
    known = [label_value(c) for c in getattr(model, "classes_", classes)]
    out = np.zeros((raw.shape[0], len(classes)))
    for j, c in enumerate(known):
        out[:, [label_value(v) for v in classes].index(c)] = raw[:, j]
    return out


def _default_cv_metrics(task: str, proba: Array | None) -> list[str]:
    if task == "regression":
        return ["mae", "rmse", "r2"]
    base = ["accuracy", "balanced_accuracy", "f1"]
    return [*base, "roc_auc", "log_loss"] if proba is not None else base


def _mean(values: Sequence[float | None]) -> float | None:
    defined = [v for v in values if v is not None]
    return float(np.mean(defined)) if defined else None


def _aggregate(folds: list[dict[str, Any]], *, cv: str, k: int, seed: int) -> CVResult:
    names = list(folds[0]["metrics"]) if folds else []
    metrics = {}
    for m in names:
        per_fold = [f["metrics"][m] for f in folds]
        defined = [v for v in per_fold if v is not None]
        metrics[m] = {"mean": _mean(per_fold),
                      "std": float(np.std(defined, ddof=STD_DDOF)) if len(defined) > 1
                      else None,
                      "folds": per_fold, "defined": len(defined)}
    return CVResult({"cv": cv, "k": k, "seed": seed, "folds": folds, "metrics": metrics,
                     "std_ddof": STD_DDOF})
