"""Fitting scikit-learn estimators: tracked, and warm-started from a previous version.

Warm starts never unpickle: the previous estimator is copied (or loaded from a
``.skops`` file) through ``skops.io``, so the estimator passed in is never
modified by continuing and the previous one stays as it was.

For a :class:`~sklearn.pipeline.Pipeline`, only the final step continues
training: the previous version's fitted preprocessing is kept as it is and only
transforms the new data. Refitting the scaler or encoder would move the inputs
that the final step's learned state was fitted to, so "continuing" would start
from a model trained on differently scaled features.
"""

from __future__ import annotations

import inspect
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from reprise.core.errors import UserError
from reprise.store._ml import copy_estimator, load_estimator
from reprise.tracking._api import active_run
from reprise.tracking._run import Run

__all__ = ["estimator_params", "fit_estimator"]

_E = TypeVar("_E")


def fit_estimator(estimator: _E, X: Any, y: Any = None, *,
                  warm_start_from: Any = None, classes: Any = None, log: bool = True,
                  **fit_params: Any) -> _E:
    """Fit ``estimator`` (or a Pipeline) on ``X``, ``y``; log it to the active run.

    With an active run, its flattened ``get_params(deep=True)`` are logged as
    params before fitting (inside a pipeline step, where only metrics can be
    logged, they are skipped) and ``fit_seconds`` and ``n_samples`` as metrics.
    Fitting twice in one run with other hyperparameters therefore raises
    ``ParamConflictError``: pass ``log=False`` or start a child run.

    ``warm_start_from`` is a fitted estimator of the same class, or the path of
    a ``.skops`` file holding one (loaded safely, see
    ``reprise.store._ml.load_estimator``). Training continues from a copy of
    it, with the hyperparameters of ``estimator``: one ``partial_fit`` pass over
    ``X`` when the estimator has ``partial_fit`` (``classes`` is passed to it),
    else a ``fit`` with ``warm_start=True`` (e.g. more trees for a forest, more
    iterations for a linear model). A Pipeline continues only its final step on
    data transformed by the previous, already fitted preprocessing. The result
    is that new estimator; otherwise ``estimator`` itself, fitted, is returned.

    Example:
        >>> from sklearn.linear_model import SGDClassifier
        >>> X, y = [[0.0], [1.0], [2.0], [3.0]], [0, 0, 1, 1]
        >>> first = fit_estimator(SGDClassifier(random_state=0), X, y)
        >>> more = fit_estimator(SGDClassifier(random_state=0), X, y, warm_start_from=first)
        >>> more is not first and more.t_ > first.t_
        True
    """
    _check_estimator(estimator)
    n_samples = _check_data(X, y)
    previous = _previous(estimator, warm_start_from)
    if classes is not None and previous is None:
        raise UserError(
            "classes= is only used to continue training with partial_fit; give "
            "warm_start_from=, or drop classes= for a fit from scratch.")
    run = active_run() if log else None
    if isinstance(run, Run):
        run.log_params(estimator_params(estimator))
    start = time.perf_counter()
    if previous is None:
        estimator.fit(X, y, **fit_params)  # type: ignore[attr-defined]
        fitted = estimator
    else:
        fitted = _warm_start(estimator, previous, X, y, classes, fit_params)
    seconds = time.perf_counter() - start
    if run is not None:
        run.log_metrics({"fit_seconds": seconds, "n_samples": float(n_samples)})
    return fitted


def estimator_params(estimator: Any) -> dict[str, Any]:
    """``get_params(deep=True)`` as JSON: other values become their type's name.

    Example:
        >>> from sklearn.linear_model import LogisticRegression
        >>> p = estimator_params(LogisticRegression(C=0.5))
        >>> p["C"], p["estimator_class"]
        (0.5, 'LogisticRegression')
    """
    params = {k: _jsonable(v) for k, v in sorted(estimator.get_params(deep=True).items())}
    return {"estimator_class": type(estimator).__name__, **params}


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    item = getattr(value, "item", None)
    if type(value).__module__ == "numpy" and callable(item) and getattr(value, "shape", ()) == ():
        return _jsonable(item())  # numpy scalars and 0-d arrays
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, Mapping) and all(isinstance(k, (str, int, float, bool)) for k in value):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return type(value).__name__


# -- checks -----------------------------------------------------------------------------------


def _check_estimator(estimator: Any) -> None:
    if isinstance(estimator, type):
        raise UserError(
            f"fit_estimator needs an estimator instance, got the class {estimator.__name__}; "
            f"call it first, e.g. {estimator.__name__}().")
    if not (callable(getattr(estimator, "fit", None)) and hasattr(estimator, "get_params")):
        raise UserError(
            f"{type(estimator).__name__} is not a scikit-learn estimator (it needs fit and "
            "get_params); pass e.g. LogisticRegression() or a Pipeline.")


def _n_samples(data: Any, name: str) -> int:
    shape = getattr(data, "shape", None)
    if shape is not None and len(shape) > 0:
        return int(shape[0])
    if shape is None and not isinstance(data, (str, bytes)):
        try:
            return len(data)
        except TypeError:
            pass
    raise UserError(
        f"{name} must be array-like with one row per sample (an array, DataFrame or list), "
        f"got {type(data).__name__}.")


def _check_data(X: Any, y: Any) -> int:
    n = _n_samples(X, "X")
    if n == 0:
        raise UserError("X has no samples (0 rows); fitting needs at least one row.")
    if y is not None and (ny := _n_samples(y, "y")) != n:
        raise UserError(
            f"X has {n} samples but y has {ny}; give exactly one target per row of X.")
    return n


def _previous(estimator: Any, source: Any) -> Any:
    """The fitted estimator to continue from, loaded from a file when ``source`` is a path."""
    if source is None:
        return None
    if isinstance(source, (str, os.PathLike)):
        if not Path(source).is_file():
            raise UserError(
                f"warm_start_from={os.fspath(source)!r} is not a file; give a .skops file "
                "written by save_estimator, or the fitted estimator itself.")
        source = load_estimator(source)
    if type(source) is not type(estimator):
        raise UserError(
            f"cannot warm-start a {type(estimator).__name__} from a "
            f"{type(source).__name__}; warm_start_from must be a fitted estimator of the "
            "same class.")
    from sklearn.exceptions import NotFittedError
    from sklearn.utils.validation import check_is_fitted

    try:
        check_is_fitted(source)
    except NotFittedError:
        raise UserError(
            f"warm_start_from is a {type(source).__name__} that was never fitted; fit it "
            "first, or drop warm_start_from to fit from scratch.") from None
    return source


# -- warm starts ------------------------------------------------------------------------------


def _mode(estimator: Any) -> str:
    """How ``estimator`` continues training: ``partial_fit`` or ``warm_start``."""
    if hasattr(estimator, "partial_fit"):
        return "partial_fit"
    if "warm_start" in estimator.get_params(deep=False):
        return "warm_start"
    raise UserError(
        f"{type(estimator).__name__} cannot be warm-started: it has neither partial_fit nor a "
        "warm_start parameter. Drop warm_start_from to fit it from scratch, or use an "
        "estimator that supports it (e.g. SGDClassifier, RandomForestClassifier).")


def _warm_start(estimator: Any, previous: Any, X: Any, y: Any, classes: Any,
                fit_params: dict[str, Any]) -> Any:
    from sklearn.pipeline import Pipeline

    if not isinstance(estimator, Pipeline):
        mode = _mode(estimator)
        return _continue(estimator, copy_estimator(previous), mode, X, y, classes, fit_params)
    names = [name for name, _ in estimator.steps]
    if names != [name for name, _ in previous.steps]:
        raise UserError(
            f"the pipeline's steps {names} differ from those of warm_start_from "
            f"{[name for name, _ in previous.steps]}; warm starts need the same steps.")
    last, final = estimator.steps[-1]
    if final is None or final == "passthrough":
        raise UserError(f"the pipeline's final step {last!r} is 'passthrough'; nothing to train.")
    mode = _mode(final)
    prefix = f"{last}__"
    if other := sorted(k for k in fit_params if not k.startswith(prefix)):
        raise UserError(
            f"fit parameters {other} are for earlier pipeline steps, which a warm start keeps "
            f"as they were fitted; only '{prefix}...' parameters can be given.")
    model = copy_estimator(previous)
    Xt = model[:-1].transform(X) if len(model) > 1 else X
    step_params = {k[len(prefix):]: v for k, v in fit_params.items()}
    model.steps[-1] = (last, _continue(final, model.steps[-1][1], mode, Xt, y, classes,
                                       step_params))
    return model


def _continue(new: Any, model: Any, mode: str, X: Any, y: Any, classes: Any,
              fit_params: dict[str, Any]) -> Any:
    """Train ``model`` (a copy of the previous version) further with ``new``'s params."""
    params = new.get_params(deep=False)
    if mode == "partial_fit":
        model.set_params(**params)
        if classes is not None:
            if "classes" not in inspect.signature(model.partial_fit).parameters:
                raise UserError(
                    f"{type(model).__name__}.partial_fit takes no classes=; drop it.")
            fit_params = {**fit_params, "classes": classes}
        model.partial_fit(X, y, **fit_params)
        return model
    if classes is not None:
        raise UserError(
            f"{type(model).__name__} continues with warm_start, not partial_fit; drop classes=.")
    model.set_params(**{**params, "warm_start": True})
    model.fit(X, y, **fit_params)
    model.set_params(warm_start=params["warm_start"])
    return model
