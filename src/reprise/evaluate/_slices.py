"""Slices (metrics per segment of a column), the worst slice, and fairness gaps.

A column is cut into segments that partition the rows: a categorical column
by value, a numeric one with more distinct values than ``bins`` into quantile
bins labelled ``age∈[30, 45)`` (the last bin closed), and missing values into
their own ``age=missing`` segment. Segments smaller than ``min_size`` are
kept in the table, flagged ``too_small``, and never chosen as the worst slice:
hiding them would hide exactly the groups a model serves worst. Nor are they
counted in the fairness gaps, where a 3-row group would decide the gap; both
list what they left out.

Each fairness gap (max - min of a per-group rate) gets an interval from
simultaneous Wilson intervals of the group rates (Bonferroni: each at level
1 - alpha/G for G groups). If every group rate lies in its interval, which
happens with probability at least the confidence, the gap lies between
max(0, max lower - min upper) and max upper - min lower. A percentile bootstrap
of max - min cannot do this: its lower bound sits above 0 whenever the groups
differ by chance, so a gap that is truly 0 is almost never covered
(bench/bench_fairness_intervals.py measures both).
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


def _edge_texts(edges: Array) -> list[str]:
    """Bin edges as short text, with as many significant digits (4 at least) as it takes
    for distinct edges to read differently: 100000 and 100004 are not both ``1e+05``."""
    for digits in range(4, 18):  # 17 significant digits tell any two float64s apart
        texts = [format(float(v), f".{digits}g") for v in edges]
        if len(set(texts)) == len(texts):
            return texts
    return [repr(float(v)) for v in edges]  # not reached: np.unique made the edges distinct


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
    text = _edge_texts(edges)
    out = []
    for i in range(len(edges) - 1):
        close = "]" if i == len(edges) - 2 else ")"
        label = f"{column}∈[{text[i]}, {text[i + 1]}{close}"
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
    """For each slice metric, the segment where it is worst, among those of sufficient
    size where it is defined. The segments left out are listed beside it: ``too_small``
    and ``undefined`` (e.g. F1 of a segment with no positive row or prediction). When
    no segment is left, the entry's segment and value are None (a gate on it fails as
    undefined)."""
    out: dict[str, dict[str, Any]] = {}
    for row in rows:
        for name, value in row["metrics"].items():
            worst = out.setdefault(name, {"column": None, "segment": None, "n": None,
                                          "value": None, "too_small": [], "undefined": []})
            if row["too_small"]:
                worst["too_small"].append(row["segment"])
            elif value is None:
                worst["undefined"].append(row["segment"])
            elif worst["value"] is None or (value < worst["value"]
                                            if METRICS[name].higher_is_better
                                            else value > worst["value"]):
                worst.update(column=row["column"], segment=row["segment"], n=row["n"],
                             value=value)
    return out


FAIRNESS_INTERVAL_METHOD = "simultaneous Wilson (Bonferroni over groups)"


def fairness(p: Prepared, X: Any, sensitive: str, *, bins: int, min_size: int,
             confidence: float | None = None) -> dict[str, Any]:
    """Per-group positive-prediction rate and true-positive rate over ``sensitive``, and
    the gaps between the groups of at least ``min_size`` rows: demographic parity
    difference and equal opportunity difference (max - min; None with fewer than two
    groups to compare). With ``confidence``, an interval for each gap.

    Example:
        >>> from reprise.evaluate._inputs import prepare
        >>> fair = fairness(prepare([1, 0, 1, 0, 1, 0], [1, 0, 1, 1, 1, 1]),
        ...                 {"g": list("aabbcc")}, "g", bins=4, min_size=2)
        >>> fair["demographic_parity_difference"], fair["left_out"]
        (0.5, {'too_small': [], 'no_positives': []})
    """
    if p.positive is None:
        raise UserError(f"fairness gaps are defined for binary classification; this is a "
                        f"{p.task} evaluation. Drop sensitive=, or evaluate one class against "
                        "the rest.")
    groups: list[dict[str, Any]] = []
    for label, mask in segments(column_values(X, sensitive, p.n), sensitive, bins):
        pred_pos = p.pred[mask] == p.positive
        actual_pos = p.y[mask] == p.positive
        n, positives = int(mask.sum()), int(actual_pos.sum())
        groups.append({"group": label, "n": n, "too_small": n < min_size,
                       "positive_rate": float(pred_pos.mean()),
                       "true_positive_rate": (float(pred_pos[actual_pos].mean()) if positives
                                              else None),
                       "predicted_positive": int(pred_pos.sum()), "positives": positives,
                       "true_positives": int((pred_pos & actual_pos).sum())})
    kept = [g for g in groups if not g["too_small"]]
    with_positives = [g for g in kept if g["positives"]]
    counts = {"demographic_parity_difference":
              [(g["predicted_positive"], g["n"]) for g in kept],
              "equal_opportunity_difference":
              [(g["true_positives"], g["positives"]) for g in with_positives]}
    out: dict[str, Any] = {
        "sensitive": sensitive, "positive_label": p.labels[p.positive], "groups": groups,
        "min_size": min_size,
        "left_out": {"too_small": [g["group"] for g in groups if g["too_small"]],
                     "no_positives": [g["group"] for g in kept if not g["positives"]]}}
    for gap, pairs in counts.items():
        rates = [k / n for k, n in pairs]
        out[gap] = float(max(rates) - min(rates)) if len(rates) >= 2 else None
    if confidence is not None:
        out["intervals"] = {gap: gap_interval(pairs, confidence) for gap, pairs in counts.items()}
        out["interval"] = {"method": FAIRNESS_INTERVAL_METHOD, "confidence": confidence}
    return out


def gap_interval(pairs: Sequence[tuple[int, int]], confidence: float) -> dict[str, float | None]:
    """Interval for max - min of the rates ``k/n`` of ``pairs`` (see the module docstring);
    None bounds with fewer than two groups.

    Example:
        >>> ci = gap_interval([(30, 100), (50, 100)], 0.95)
        >>> 0.0 < ci["ci_low"] < 0.2 < ci["ci_high"] < 0.4
        True
    """
    from scipy.stats import binomtest

    if len(pairs) < 2:
        return {"ci_low": None, "ci_high": None}
    level = 1.0 - (1.0 - confidence) / len(pairs)
    bounds = [binomtest(k, n).proportion_ci(confidence_level=level, method="wilson")
              for k, n in pairs]
    lows = [float(b.low) for b in bounds]
    highs = [float(b.high) for b in bounds]
    return {"ci_low": max(0.0, max(lows) - min(highs)), "ci_high": max(highs) - min(lows)}
