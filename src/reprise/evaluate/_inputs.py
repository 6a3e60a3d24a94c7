"""Checking and normalising what is evaluated: labels, predictions, probabilities.

Everything downstream (metrics, bootstrap, slices) works on one
:class:`Prepared` value: class labels become indices into a fixed label list,
binary probabilities become two columns, and every inconsistency (lengths,
missing values, probabilities outside [0, 1], unknown labels) is a
:class:`~reprise.core.errors.UserError` raised here, before any metric runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from reprise.core.errors import UserError

__all__ = ["TASKS", "Array", "Prepared", "as_1d", "as_weights", "label_value", "prepare"]

Array = npt.NDArray[Any]

#: Accepted values of ``task=``; "classification" picks binary or multiclass from the labels.
TASKS = ("auto", "classification", "binary", "multiclass", "regression")

# A probability row may miss 1 by this much (float32 softmax) before it is an error;
# rows within it are renormalised so that scikit-learn's own stricter check passes.
_SUM_TOLERANCE = 1e-3
# Integer targets with at most this many distinct values count as class labels.
_MAX_AUTO_CLASSES = 20


@dataclass(frozen=True)
class Prepared:
    """Validated inputs of one evaluation.

    Attributes:
        task: ``"binary"``, ``"multiclass"`` or ``"regression"``.
        y: class indices (int) for classification, targets (float) for regression.
        pred: predicted class indices, or predicted values for regression.
        proba: ``(n, k)`` probabilities in the order of ``labels``, or None.
        labels: the class labels (classification), in column order.
        positive: index of the positive class (binary), else None.
        weight: non-negative sample weights (one per row), or None for unweighted.
    """

    task: str
    y: Array
    pred: Array
    proba: Array | None
    labels: tuple[Any, ...] = ()
    positive: int | None = None
    weight: Array | None = None

    @property
    def n(self) -> int:
        return int(self.y.shape[0])

    @property
    def weights(self) -> Array:
        """The sample weights, all ones when unweighted."""
        return np.ones(self.n) if self.weight is None else self.weight

    @property
    def k(self) -> int:
        return len(self.labels)

    @property
    def is_classification(self) -> bool:
        return self.task != "regression"

    def subset(self, rows: Array) -> Prepared:
        """The same evaluation restricted to ``rows`` (a mask or indices); labels are kept."""
        proba = None if self.proba is None else self.proba[rows]
        weight = None if self.weight is None else self.weight[rows]
        return replace(self, y=self.y[rows], pred=self.pred[rows], proba=proba, weight=weight)


def as_1d(value: Any, what: str) -> Array:
    """``value`` (list, numpy array, pandas Series, one-column frame) as a 1-D array."""
    to_numpy = getattr(value, "to_numpy", None)
    arr = np.asarray(to_numpy() if callable(to_numpy) else value)
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr[:, 0]
    if arr.ndim != 1:
        raise UserError(f"{what} must be one value per row (1-D), got shape {arr.shape}; "
                        "multi-output targets are not supported.")
    return arr


def label_value(label: Any) -> Any:
    """A label as a plain JSON-able Python value (numpy scalars unwrapped)."""
    item = getattr(label, "item", None)
    value = item() if callable(item) and type(label).__module__ == "numpy" else label
    return value if isinstance(value, (bool, int, float, str)) or value is None else str(value)


def prepare(y: Any, y_pred: Any = None, y_proba: Any = None, *, task: str = "auto",
            labels: Sequence[Any] | None = None, positive_label: Any = None,
            sample_weight: Any = None) -> Prepared:
    """Validate and normalise what is evaluated (``sample_weight``: one weight >= 0 per row).

    Example:
        >>> p = prepare([0, 1, 1], y_proba=[0.2, 0.7, 0.4])
        >>> p.task, p.pred.tolist()
        ('binary', [0, 1, 0])
    """
    if task not in TASKS:
        raise UserError(f"task must be one of {', '.join(TASKS)}; got {task!r}.")
    if y is None:
        raise UserError("y (the true targets) is required to evaluate.")
    yt = as_1d(y, "y")
    pred = None if y_pred is None else as_1d(y_pred, "y_pred")
    proba = None if y_proba is None else _as_proba(y_proba)
    if pred is None and proba is None:
        raise UserError("nothing to evaluate: give a fitted model and X, or y_pred= "
                        "(predictions) and/or y_proba= (class probabilities).")
    _check_lengths(yt, pred, proba)
    weight = None if sample_weight is None else as_weights(sample_weight, yt.shape[0])
    _check_missing(yt, "y")
    if pred is not None:
        _check_missing(pred, "y_pred")
    kind = _resolve_task(task, yt, pred, proba, labels)
    if kind == "regression":
        out = _prepare_regression(yt, pred, proba)
    else:
        out = _prepare_classification(yt, pred, proba, task, labels, positive_label)
    return out if weight is None else replace(out, weight=weight)


def as_weights(value: Any, n: int) -> Array:
    """``sample_weight`` checked: n finite numbers >= 0, not all zero (scikit-learn's rules)."""
    to_numpy = getattr(value, "to_numpy", None)
    try:
        w = np.asarray(to_numpy() if callable(to_numpy) else value, dtype=np.float64)
    except (TypeError, ValueError):
        raise UserError("sample_weight must hold numbers, one weight per row.") from None
    if w.ndim == 2 and w.shape[1] == 1:
        w = w[:, 0]
    if w.ndim != 1 or w.shape[0] != n:
        raise UserError(f"sample_weight must be one weight per row ({n} rows); got shape "
                        f"{w.shape}.")
    bad = ~np.isfinite(w) | (w < 0)
    if bad.any():
        row = int(np.argmax(bad))
        raise UserError(f"sample_weight must be finite and >= 0; row {row} holds {float(w[row])!r}. "
                        "Drop that row or give it a valid weight.")
    if not w.sum() > 0:
        raise UserError("sample_weight is all zeros: no row counts. Give some rows a weight > 0.")
    return w


def _as_proba(value: Any) -> Array:
    to_numpy = getattr(value, "to_numpy", None)
    try:
        arr = np.asarray(to_numpy() if callable(to_numpy) else value, dtype=np.float64)
    except (TypeError, ValueError):
        raise UserError("y_proba must hold numbers (class probabilities).") from None
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr[:, 0]
    if arr.ndim not in (1, 2):
        raise UserError(f"y_proba must be (n,) for binary or (n, classes); got {arr.shape}.")
    if np.isnan(arr).any():
        row = int(np.argwhere(np.isnan(arr))[0][0])
        raise UserError(f"y_proba holds NaN (first in row {row}); fix the model's output.")
    if arr.size and (arr.min() < 0.0 or arr.max() > 1.0):
        bad = np.argwhere((arr < 0.0) | (arr > 1.0))[0]
        raise UserError(
            f"y_proba must be probabilities in [0, 1]; row {int(bad[0])} holds "
            f"{float(arr[tuple(bad)])!r}. Pass probabilities (e.g. softmax or sigmoid of the "
            "scores), not raw scores or logits.")
    if arr.ndim == 2 and arr.shape[0]:
        sums = arr.sum(axis=1)
        off = np.abs(sums - 1.0) > _SUM_TOLERANCE
        if off.any():
            row = int(np.argmax(off))
            raise UserError(
                f"each row of y_proba must sum to 1; row {row} sums to {float(sums[row]):.6g}. "
                "Pass one column per class with normalised probabilities (softmax).")
        arr = arr / sums[:, None]
    return arr


def _check_lengths(y: Array, pred: Array | None, proba: Array | None) -> None:
    for name, arr in (("y_pred", pred), ("y_proba", proba)):
        if arr is not None and arr.shape[0] != y.shape[0]:
            raise UserError(f"y has {y.shape[0]} rows but {name} has {arr.shape[0]}; they must "
                            "describe the same rows in the same order.")
    if y.shape[0] == 0:
        raise UserError("y is empty: there is nothing to evaluate.")


def _missing_mask(arr: Array) -> Array:
    if arr.dtype.kind == "f":
        return np.isnan(arr)  # type: ignore[no-any-return]
    if arr.dtype.kind == "O":
        return np.array([v is None or (isinstance(v, float) and v != v) for v in arr], dtype=bool)
    return np.zeros(arr.shape[0], dtype=bool)


def _check_missing(arr: Array, what: str) -> None:
    missing = _missing_mask(arr)
    if missing.any():
        raise UserError(f"{what} holds {int(missing.sum())} missing value(s) (NaN/None; first "
                        f"in row {int(np.argmax(missing))}); drop or fill those rows first.")
    if arr.dtype.kind == "f" and np.isinf(arr).any():
        raise UserError(f"{what} holds infinite values (first in row "
                        f"{int(np.argmax(np.isinf(arr)))}); drop or fix those rows first.")


def _is_integral(arr: Array) -> bool:
    if arr.dtype.kind in "iub":
        return True
    return arr.dtype.kind == "f" and bool(np.all(arr == np.round(arr)))


def _resolve_task(task: str, y: Array, pred: Array | None, proba: Array | None,
                  labels: Sequence[Any] | None) -> str:
    numeric = y.dtype.kind in "iuf"
    if task == "regression":
        if proba is not None:
            raise UserError("task='regression' but y_proba was given; probabilities belong to "
                            "classification. Drop y_proba, or use task='classification'.")
        if not numeric or pred is None or pred.dtype.kind not in "iuf":
            raise UserError("task='regression' needs numeric y and numeric y_pred.")
        return "regression"
    if task != "auto":
        return "classification"
    if proba is not None or labels is not None or not numeric:
        return "classification"
    assert pred is not None  # prepare() checked that one of them is given
    if pred.dtype.kind not in "iufb":
        return "classification"
    if _is_integral(y) and not _is_integral(pred) and set(np.unique(y).tolist()) <= {0, 1}:
        frac = float(pred[pred != np.round(pred)][0])
        raise UserError(
            f"cannot tell whether this is classification or regression: y holds only the "
            f"labels 0 and 1, but y_pred holds fractional values (e.g. {frac:.6g}), which look "
            "like probabilities or scores. For a classifier pass them as y_proba= "
            "(probabilities of class 1) or pass predicted labels as y_pred=; if they really "
            "are predicted values of a 0/1 target, pass task='regression'.")
    if not _is_integral(y) or not _is_integral(pred):
        return "regression"
    distinct = np.unique(np.concatenate([y, pred]))
    if distinct.size <= _MAX_AUTO_CLASSES:
        return "classification"
    raise UserError(
        f"cannot tell whether this is classification or regression: y and y_pred are "
        f"whole numbers with {distinct.size} distinct values. Pass task='classification' "
        "or task='regression'.")


def _prepare_regression(y: Array, pred: Array | None, proba: Array | None) -> Prepared:
    if pred is None:
        raise UserError("regression needs y_pred (predicted values); y_proba is for classifiers.")
    if pred.dtype.kind not in "iuf" or y.dtype.kind not in "iuf":
        raise UserError("regression needs numeric y and y_pred.")
    return Prepared(task="regression", y=y.astype(np.float64), pred=pred.astype(np.float64),
                    proba=None)


def _prepare_classification(y: Array, pred: Array | None, proba: Array | None, task: str,
                            labels: Sequence[Any] | None, positive_label: Any) -> Prepared:
    classes = _class_labels(y, pred, proba, labels)
    if len(classes) < 2:
        raise UserError(f"classification needs at least two classes; y holds only "
                        f"{[label_value(c) for c in classes]}. Pass labels=[...] with every class.")
    kind = "binary" if len(classes) == 2 else "multiclass"
    if task in ("binary", "multiclass") and task != kind:
        raise UserError(f"task={task!r} but there are {len(classes)} classes "
                        f"({[label_value(c) for c in classes][:10]}).")
    positive = _positive_index(classes, positive_label) if kind == "binary" else None
    if positive_label is not None and kind != "binary":
        raise UserError("positive_label= only applies to binary classification; this task has "
                        f"{len(classes)} classes.")
    probs = _proba_columns(proba, classes, positive)
    y_idx = _to_index(y, classes, "y")
    if pred is not None:
        pred_idx = _to_index(pred, classes, "y_pred")
    elif probs is not None and positive is not None:
        pred_idx = np.where(probs[:, positive] >= 0.5, positive, 1 - positive)
    else:
        assert probs is not None
        pred_idx = np.argmax(probs, axis=1)
    return Prepared(task=kind, y=y_idx, pred=pred_idx.astype(np.int64), proba=probs,
                    labels=tuple(label_value(c) for c in classes), positive=positive)


def _sorted_unique(arr: Array, what: str) -> list[Any]:
    try:
        return list(np.unique(arr))
    except TypeError:
        raise UserError(f"{what} mixes label types that cannot be ordered (e.g. numbers and "
                        "strings); use one type for every label.") from None


def _class_labels(y: Array, pred: Array | None, proba: Array | None,
                  labels: Sequence[Any] | None) -> list[Any]:
    observed = _sorted_unique(y if pred is None else np.concatenate([y, pred]), "y/y_pred")
    k = proba.shape[1] if proba is not None and proba.ndim == 2 else None
    if labels is not None:
        classes = list(labels)
        if len(set(map(label_value, classes))) != len(classes):
            raise UserError(f"labels has duplicates: {[label_value(c) for c in classes]}.")
        if k is not None and k != len(classes):
            raise UserError(f"y_proba has {k} columns but labels has {len(classes)} classes; "
                            "give one probability column per label, in the order of labels.")
        return classes
    if k is None:
        if proba is not None and len(observed) < 2 and set(map(label_value, observed)) <= {0, 1}:
            return [0, 1]
        return observed
    if len(observed) == k:
        return observed
    if all(isinstance(label_value(v), int) and 0 <= label_value(v) < k for v in observed):
        return list(range(k))
    raise UserError(
        f"y_proba has {k} columns but y/y_pred hold {len(observed)} distinct labels "
        f"({[label_value(c) for c in observed][:10]}); say which column is which class with "
        "labels=[...] (for scikit-learn models: model.classes_).")


def _positive_index(classes: list[Any], positive_label: Any) -> int:
    values = [label_value(c) for c in classes]
    if positive_label is not None:
        wanted = label_value(positive_label)
        if wanted not in values:
            raise UserError(f"positive_label={wanted!r} is not one of the classes {values}.")
        return values.index(wanted)
    if any(isinstance(v, str) for v in values):
        raise UserError(f"binary labels {values} are strings, so which one is 'positive' is not "
                        f"obvious; pass positive_label= (one of {values}).")
    return 1  # scikit-learn's convention: the greater label (classes_[1]) is positive


def _proba_columns(proba: Array | None, classes: list[Any], positive: int | None) -> Array | None:
    if proba is None:
        return None
    if proba.ndim == 2:
        return proba
    if positive is None:
        raise UserError(f"y_proba is one column (binary) but there are {len(classes)} classes; "
                        "give one probability column per class.")
    out = np.empty((proba.shape[0], 2), dtype=np.float64)
    out[:, positive], out[:, 1 - positive] = proba, 1.0 - proba
    return out


def _to_index(values: Array, classes: list[Any], what: str) -> Array:
    lookup = {label_value(c): i for i, c in enumerate(classes)}
    uniq, inverse = np.unique(values, return_inverse=True)
    unknown = [label_value(u) for u in uniq if label_value(u) not in lookup]
    if unknown:
        raise UserError(f"{what} holds label(s) {unknown[:10]} that are not among the classes "
                        f"{list(lookup)[:20]}; pass labels=[...] listing every class (for a "
                        "scikit-learn model, its classes_), or fix the targets.")
    codes = np.array([lookup[label_value(u)] for u in uniq], dtype=np.int64)
    return codes[inverse.reshape(-1)]
