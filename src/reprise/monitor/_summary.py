"""Mergeable per-column summaries on bins fixed by the reference.

A summary's size depends on the reference's bins, never on the row count, and two
summaries of the same column add up: a window is the sum of its batches, of its
server processes, of smaller windows, in any order and grouping (merge is associative
and commutative; a test checks it). Everything is plain JSON (``to_dict``), never
pickle.

Numeric columns (:class:`NumericSummary`):

- ``counts`` on the reference's *fine bins*: edges at the reference's quantiles
  ``0, 1/F, ..., 1`` (``F`` = 1,000 by default, so each bin holds about 0.1 % of the
  reference), with the exact reference minimum and maximum as the first and last edges.
  Bin 0 holds values below the reference minimum, then one bin per edge interval, one
  for the maximum itself, and one above it. Equal edges are merged, so an integer column
  with few values gets one bin per value (its CDF is then exact).
  This *binned CDF* is what the KS statistic reads: at the edges it is exact; between
  two edges the true CDF difference can exceed the binned one by at most the larger
  share of the bin it lies in (reported as ``ks_error``; about 0.001 on continuous data).
- exact ``rows``, ``missing`` (null, NaN, a missing-value spelling), ``invalid`` (text
  that is no number, infinities), ``min``, ``max``, and the count, mean and sum of
  squared deviations of the finite values (Chan et al.'s parallel merge);
- ``low_sum``/``high_sum``: the sums of the values below the reference minimum and above
  its maximum, which make the Wasserstein distance's tails exact.

Categorical columns (:class:`CategoricalSummary`): ``counts`` per reference category
(the reference's most frequent ``max_categories``; the rest of its labels share an
``other`` cell), ``unseen``: labels the reference never had, with ``unseen_counts`` for
the first :data:`UNSEEN_KEPT` of them (the total is exact, the list bounded), ``rows``
and ``missing``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from reprise.core.errors import UserError
from reprise.monitor._values import labels_of, numbers_of

__all__ = ["UNSEEN_KEPT", "CategoricalSpec", "CategoricalSummary", "NumericSpec",
           "NumericSummary"]

UNSEEN_KEPT = 50


# --------------------------------------------------------------------------- numeric


@dataclass(frozen=True)
class NumericSpec:
    """The bins of a numeric column, fixed by the reference."""

    edges: np.ndarray  # increasing; edges[0] = reference min, edges[-1] = reference max
    coarse: np.ndarray  # fine bin -> coarse bin (equal reference mass, tails apart)

    @property
    def bins(self) -> int:
        return len(self.edges) + 2  # below, intervals, the maximum, above

    def cut_points(self) -> np.ndarray:
        """The boundaries :func:`numpy.searchsorted` bins on: the edges and, just above
        the maximum, a boundary that keeps the maximum apart from values beyond it."""
        return np.append(self.edges, np.nextafter(self.edges[-1], math.inf))

    def to_dict(self) -> dict[str, Any]:
        return {"edges": [float(e) for e in self.edges], "coarse": [int(c) for c in self.coarse]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> NumericSpec:
        edges = np.asarray(d["edges"], dtype=np.float64)
        coarse = np.asarray(d["coarse"], dtype=np.int64)
        if len(edges) < 1 or np.any(np.diff(edges) <= 0) or len(coarse) != len(edges) + 2:
            raise UserError("a drift reference's numeric bins are malformed (edges must "
                            "increase, one coarse index per bin); rebuild the reference.")
        return cls(edges, coarse)


@dataclass
class NumericSummary:
    spec: NumericSpec
    counts: np.ndarray = field(default=None)  # type: ignore[arg-type]
    rows: int = 0
    missing: int = 0
    invalid: int = 0
    n: int = 0
    mean: float = 0.0
    m2: float = 0.0
    min: float = math.inf
    max: float = -math.inf
    low_sum: float = 0.0
    high_sum: float = 0.0

    def __post_init__(self) -> None:
        if self.counts is None:
            self.counts = np.zeros(self.spec.bins, dtype=np.int64)

    @property
    def present(self) -> int:
        """Values that enter the distribution (finite numbers)."""
        return int(self.counts.sum())

    @property
    def std(self) -> float:
        return math.sqrt(self.m2 / (self.n - 1)) if self.n > 1 else 0.0

    def update(self, arr: pa.Array | pa.ChunkedArray, spellings: pa.Array) -> None:
        v = numbers_of(arr, spellings)
        self.rows += len(arr)
        self.missing += v.missing
        self.invalid += v.invalid
        self.add_values(v.values)

    def add_values(self, x: np.ndarray) -> None:
        if not len(x):
            return
        cuts = self.spec.cut_points()
        idx = np.searchsorted(cuts, x, side="right")
        self.counts += np.bincount(idx, minlength=self.spec.bins)
        below, above = x < cuts[0], x >= cuts[-1]
        self.low_sum += float(x[below].sum()) if below.any() else 0.0
        self.high_sum += float(x[above].sum()) if above.any() else 0.0
        mean = float(x.mean())
        self._merge_moments(len(x), mean, float(((x - mean) ** 2).sum()))
        self.min, self.max = min(self.min, float(x.min())), max(self.max, float(x.max()))

    def _merge_moments(self, n: int, mean: float, m2: float) -> None:
        total = self.n + n
        if total == 0:
            return
        delta = mean - self.mean
        self.m2 += m2 + delta * delta * self.n * n / total
        self.mean += delta * n / total
        self.n = total

    def merge(self, other: NumericSummary) -> NumericSummary:
        """The summary of both (neither is changed)."""
        _same_bins(self.spec.edges, other.spec.edges)
        out = NumericSummary(self.spec, self.counts + other.counts, self.rows + other.rows,
                             self.missing + other.missing, self.invalid + other.invalid,
                             self.n, self.mean, self.m2, min(self.min, other.min),
                             max(self.max, other.max), self.low_sum + other.low_sum,
                             self.high_sum + other.high_sum)
        out._merge_moments(other.n, other.mean, other.m2)
        return out

    def minus(self, part: NumericSummary) -> NumericSummary:
        """The rest of ``self`` once ``part`` (a summary of some of its rows) is taken out:
        the counts subtract exactly; min, max and moments are left unknown (the reference's
        chunk comparisons, their only use, need the counts)."""
        return NumericSummary(self.spec, self.counts - part.counts, self.rows - part.rows,
                              self.missing - part.missing, self.invalid - part.invalid,
                              low_sum=self.low_sum - part.low_sum,
                              high_sum=self.high_sum - part.high_sum)

    def to_dict(self) -> dict[str, Any]:
        finite = self.n > 0
        return {"kind": "numeric", "counts": [int(c) for c in self.counts], "rows": self.rows,
                "missing": self.missing, "invalid": self.invalid, "n": self.n,
                "mean": self.mean, "m2": self.m2, "min": self.min if finite else None,
                "max": self.max if finite else None, "low_sum": self.low_sum,
                "high_sum": self.high_sum}

    @classmethod
    def from_dict(cls, spec: NumericSpec, d: dict[str, Any]) -> NumericSummary:
        counts = np.asarray(d["counts"], dtype=np.int64)
        if len(counts) != spec.bins or np.any(counts < 0):
            raise UserError(f"a numeric summary has {len(counts)} bins where its reference "
                            f"has {spec.bins}; it was made against another reference.")
        return cls(spec, counts, int(d["rows"]), int(d["missing"]), int(d["invalid"]),
                   int(d["n"]), float(d["mean"]), float(d["m2"]),
                   math.inf if d["min"] is None else float(d["min"]),
                   -math.inf if d["max"] is None else float(d["max"]),
                   float(d["low_sum"]), float(d["high_sum"]))


def _same_bins(a: np.ndarray, b: np.ndarray) -> None:
    if a is not b and (len(a) != len(b) or not np.array_equal(a, b)):
        raise UserError("these two summaries were made on different bins (two references); "
                        "only summaries made against the same reference can be merged.")


def numeric_spec(sample: np.ndarray, lo: float, hi: float, fine: int, coarse: int) -> NumericSpec:
    """Bins from a sample of the reference's finite values and its exact min and max."""
    if len(sample):
        q = np.quantile(sample, np.linspace(0.0, 1.0, fine + 1), method="inverted_cdf")
        edges = np.unique(np.concatenate([[lo], q[(q > lo) & (q < hi)], [hi]]))
    else:
        edges = np.array([0.0])  # a column with no value in the reference
    return NumericSpec(edges, np.zeros(len(edges) + 2, dtype=np.int64))


def with_coarse(spec: NumericSpec, ref_counts: np.ndarray, coarse: int) -> NumericSpec:
    """``spec`` with fine bins grouped into ``coarse`` bins of about equal reference mass
    (the two tails are bins of their own: mass the reference never had)."""
    inner = ref_counts[1:-1].astype(np.float64)
    total = inner.sum()
    groups = np.zeros(len(ref_counts), dtype=np.int64)
    if total > 0:
        # a fine bin goes to the coarse bin its reference mass midpoint falls in
        mid = (np.cumsum(inner) - inner / 2) / total
        groups[1:-1] = 1 + np.minimum((mid * coarse).astype(np.int64), coarse - 1)
    else:
        groups[1:-1] = 1
    _, dense = np.unique(groups[1:-1], return_inverse=True)
    groups[1:-1] = dense + 1
    groups[-1] = int(groups[1:-1].max()) + 1
    return NumericSpec(spec.edges, groups)


# --------------------------------------------------------------------------- categorical


@dataclass(frozen=True)
class CategoricalSpec:
    """The categories of a column, fixed by the reference (the most frequent ones)."""

    categories: tuple[str, ...]
    other: bool  # whether the reference had labels beyond ``categories``

    @property
    def bins(self) -> int:
        return len(self.categories) + 1  # the categories, then "other"

    def value_set(self) -> pa.Array:
        return pa.array(self.categories, type=pa.string())

    def to_dict(self) -> dict[str, Any]:
        return {"categories": list(self.categories), "other": self.other}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CategoricalSpec:
        cats = tuple(str(c) for c in d["categories"])
        if len(set(cats)) != len(cats):
            raise UserError("a drift reference lists a category twice; rebuild the reference.")
        return cls(cats, bool(d["other"]))


@dataclass
class CategoricalSummary:
    spec: CategoricalSpec
    counts: np.ndarray = field(default=None)  # type: ignore[arg-type]
    rows: int = 0
    missing: int = 0
    unseen: int = 0
    unseen_counts: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.counts is None:
            self.counts = np.zeros(self.spec.bins, dtype=np.int64)

    @property
    def present(self) -> int:
        return int(self.counts.sum()) + self.unseen

    def update(self, arr: pa.Array | pa.ChunkedArray, spellings: pa.Array, *,
               reference: bool = False) -> None:
        """Count ``arr``; for the reference itself, labels beyond its categories are its
        ``other`` cell, for a window they are unseen labels."""
        labels, missing = labels_of(arr, spellings)
        self.rows += len(arr)
        self.missing += missing
        if not len(labels):
            return
        vc = pc.value_counts(labels)
        values, counts = vc.field("values"), vc.field("counts").to_numpy().astype(np.int64)
        idx = pc.index_in(values, value_set=self.spec.value_set())
        known = idx.is_valid().to_numpy(zero_copy_only=False)
        if known.any():
            pos = idx.drop_null().to_numpy().astype(np.int64)
            self.counts += np.bincount(pos, weights=counts[known],
                                       minlength=self.spec.bins).astype(np.int64)
        if (~known).any():
            extra = counts[~known]
            if reference:
                self.counts[-1] += int(extra.sum())
            else:
                self.unseen += int(extra.sum())
                names = values.filter(pa.array(~known)).to_pylist()
                self._keep_unseen(names, extra)

    def _keep_unseen(self, names: list[Any], counts: Any) -> None:
        for name, c in zip(names, counts, strict=True):
            if name in self.unseen_counts:
                self.unseen_counts[name] += int(c)
            elif len(self.unseen_counts) < UNSEEN_KEPT:
                self.unseen_counts[name] = int(c)

    def merge(self, other: CategoricalSummary) -> CategoricalSummary:
        if self.spec.categories != other.spec.categories:
            raise UserError("these two summaries were made on different categories (two "
                            "references); only summaries of one reference can be merged.")
        out = CategoricalSummary(self.spec, self.counts + other.counts, self.rows + other.rows,
                                 self.missing + other.missing, self.unseen + other.unseen,
                                 dict(self.unseen_counts))
        # the kept labels of a merge are the first ones met in merge order (bounded); the
        # unseen total stays exact whatever is kept
        out._keep_unseen(list(other.unseen_counts), list(other.unseen_counts.values()))
        return out

    def minus(self, part: CategoricalSummary) -> CategoricalSummary:
        return CategoricalSummary(self.spec, self.counts - part.counts, self.rows - part.rows,
                                  self.missing - part.missing, self.unseen - part.unseen)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "categorical", "counts": [int(c) for c in self.counts],
                "rows": self.rows, "missing": self.missing, "unseen": self.unseen,
                "unseen_counts": dict(sorted(self.unseen_counts.items()))}

    @classmethod
    def from_dict(cls, spec: CategoricalSpec, d: dict[str, Any]) -> CategoricalSummary:
        counts = np.asarray(d["counts"], dtype=np.int64)
        if len(counts) != spec.bins or np.any(counts < 0):
            raise UserError(f"a categorical summary has {len(counts)} cells where its "
                            f"reference has {spec.bins}; it was made against another "
                            "reference.")
        return cls(spec, counts, int(d["rows"]), int(d["missing"]), int(d["unseen"]),
                   {str(k): int(v) for k, v in d.get("unseen_counts", {}).items()})
