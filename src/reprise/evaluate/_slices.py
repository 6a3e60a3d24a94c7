"""Slices (metrics per segment of a column), the worst slice, and fairness gaps.

A column is cut into segments that partition the rows: a categorical column
by value, a numeric one with more distinct values than ``bins`` into quantile
bins labelled ``age∈[30, 45)`` (the last bin closed), and missing values into
their own ``age=missing`` segment. Segments smaller than ``min_size`` are
kept in the table, flagged ``too_small``, and never chosen as the worst slice:
hiding them would hide exactly the groups a model serves worst.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from reprise.core.errors import UserError
from reprise.evaluate._inputs import Array, Prepared, label_value
from reprise.evaluate._metrics import METRICS, point_metrics

__all__ = ["column_values", "fairness", "segments", "slice_metrics", "slice_table",
           "worst_slices"]

MAX_SEGMENTS = 100


def slice_metrics(p: Prepared) -> list[str]:
    """The metrics computed per slice: cheap ones, plus ROC AUC when probabilities exist."""
    if not p.is_classification:
        return ["mae", "rmse", "r2", "mape"]
    names = ["accuracy", "balanced_accuracy", "precision", "recall", "f1"]
    return [*names, "roc_auc"] if p.proba is not None else names


def column_values(X: Any, name: str, n: int) -> Array:
    """Column ``name`` of ``X`` (a DataFrame or a mapping of columns) as an array of n rows."""
    columns = getattr(X, "columns", None)
    if X is None or (columns is None and not isinstance(X, Mapping)):
        raise UserError(f"slicing by {name!r} needs X as a DataFrame (or a dict of columns) "
                        "holding that column.")
    known = [str(c) for c in (columns if columns is not None else X.keys())]
    if name not in known:
        raise UserError(f"X has no column {name!r}; its columns are {known[:30]}.")
    raw = X[name]
    to_numpy = getattr(raw, "to_numpy", None)
    arr = np.asarray(to_numpy() if callable(to_numpy) else raw)
    if arr.ndim != 1 or arr.shape[0] != n:
        raise UserError(f"column {name!r} has shape {arr.shape}; it needs one value per row "
                        f"({n} rows).")
    return arr


def _is_missing(v: Any) -> bool:
    if v is None:
        return True
    try:
        return bool(v != v)  # NaN
    except TypeError:  # pandas.NA refuses bool(); it is missing
        return True


def _missing(values: Array) -> Array:
    if values.dtype.kind == "f":
        return np.isnan(values)  # type: ignore[no-any-return]
    if values.dtype.kind == "O":  # only object arrays can hold None / pandas.NA
        return np.array([_is_missing(v) for v in values], dtype=bool)
    return np.zeros(values.shape[0], dtype=bool)


def _fmt(v: float) -> str:
    return format(float(v), ".4g")


def segments(values: Array, column: str, bins: int = 4) -> list[tuple[str, Array]]:
    """``(label, row mask)`` of each segment of ``values``; the masks partition the rows.

    Example:
        >>> [label for label, _ in segments(np.array([1.0, 2.0, 3.0, 4.0]), "x", bins=2)]
        ['x∈[1, 2.5)', 'x∈[2.5, 4]']
    """
    missing = _missing(values)
    present = values[~missing]
    numeric = values.dtype.kind in "iuf"
    if numeric and np.unique(present).size > bins:
        out = _numeric_segments(values.astype(np.float64), missing, column, bins)
    else:
        out = _categorical_segments(values, missing, column)
    if missing.any():
        out.append((f"{column}=missing", missing))
    return out


def _numeric_segments(values: Array, missing: Array, column: str,
                      bins: int) -> list[tuple[str, Array]]:
    present = values[~missing]
    edges = np.unique(np.quantile(present, np.linspace(0.0, 1.0, bins + 1)))
    ids = np.searchsorted(edges[1:-1], np.where(missing, edges[0], values), side="right")
    out = []
    for i in range(len(edges) - 1):
        close = "]" if i == len(edges) - 2 else ")"
        label = f"{column}∈[{_fmt(edges[i])}, {_fmt(edges[i + 1])}{close}"
        mask = (ids == i) & ~missing
        if mask.any():
            out.append((label, mask))
    return out


def _categorical_segments(values: Array, missing: Array, column: str) -> list[tuple[str, Array]]:
    if values.dtype.kind == "O":
        text = np.array(["" if m else str(label_value(v))
                         for v, m in zip(values, missing, strict=True)])
    else:  # vectorised: str() of each value, as label_value would give
        text = values.astype(str)
    uniq = sorted(set(text[~missing].tolist()))
    if len(uniq) > MAX_SEGMENTS:
        raise UserError(f"column {column!r} has {len(uniq)} distinct values; slices need at most "
                        f"{MAX_SEGMENTS}. Slice on a coarser column (or a numeric one, which is "
                        "binned).")
    return [(f"{column}={u}", (text == u) & ~missing) for u in uniq]


def slice_table(p: Prepared, X: Any, columns: Sequence[str], *, bins: int,
                min_size: int) -> list[dict[str, Any]]:
    """One row per segment of every column: size, ``too_small`` flag and metrics."""
    names = slice_metrics(p)
    rows = []
    for column in columns:
        for label, mask in segments(column_values(X, column, p.n), column, bins):
            n = int(mask.sum())
            rows.append({"column": column, "segment": label, "n": n, "too_small": n < min_size,
                         "metrics": point_metrics(p.subset(mask), names)})
    return rows


def worst_slices(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """For each slice metric, the segment (of sufficient size) where it is worst."""
    out: dict[str, dict[str, Any]] = {}
    for row in rows:
        if row["too_small"]:
            continue
        for name, value in row["metrics"].items():
            if value is None:
                continue
            best = out.get(name)
            higher = METRICS[name].higher_is_better
            if best is None or (value < best["value"] if higher else value > best["value"]):
                out[name] = {"column": row["column"], "segment": row["segment"],
                             "n": row["n"], "value": value}
    return out


def fairness(p: Prepared, X: Any, sensitive: str, *, bins: int, min_size: int) -> dict[str, Any]:
    """Per-group positive-prediction rate and true-positive rate over ``sensitive``, and
    the gaps: demographic parity difference and equal opportunity difference (max - min)."""
    if p.positive is None:
        raise UserError(f"fairness gaps are defined for binary classification; this is a "
                        f"{p.task} evaluation. Drop sensitive=, or evaluate one class against "
                        "the rest.")
    groups: list[dict[str, Any]] = []
    rates: list[float] = []
    tprs: list[float] = []
    for label, mask in segments(column_values(X, sensitive, p.n), sensitive, bins):
        pred_pos = p.pred[mask] == p.positive
        actual_pos = p.y[mask] == p.positive
        tpr = float(pred_pos[actual_pos].mean()) if actual_pos.any() else None
        rates.append(float(pred_pos.mean()))
        tprs.extend([] if tpr is None else [tpr])
        groups.append({"group": label, "n": int(mask.sum()),
                       "too_small": bool(mask.sum() < min_size), "positive_rate": rates[-1],
                       "true_positive_rate": tpr})
    return {"sensitive": sensitive, "positive_label": p.labels[p.positive], "groups": groups,
            "demographic_parity_difference": float(max(rates) - min(rates)),
            "equal_opportunity_difference": float(max(tprs) - min(tprs)) if tprs else None}
