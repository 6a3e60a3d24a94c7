"""Compare a window with its reference: per-column tests, then one dataset verdict.

Per column (each result is a :class:`ColumnDrift`, never an exception):

- numeric, up to ``ks_max_rows`` values: the two-sample KS test on the binned CDF
  (statistic ``D``, p-value, and the most the binning can hide, ``ks_error``);
- categorical, up to ``ks_max_rows`` values: Pearson's χ² test of homogeneity over the
  reference's categories, its "other" cell and one cell of unseen labels;
- larger windows: the distance (normalised Wasserstein or Jensen-Shannon) against the
  threshold learned from the reference's chunks, or a fixed one from the policy;
- every column: the change in its missing rate (χ² on the 2×2 table, Fisher's exact
  test where counts are small).

Effect sizes are reported whatever decided: ``wasserstein`` (in reference standard
deviations), ``js`` (Jensen-Shannon distance on coarse bins or categories, 0 to 1),
``tvd`` for categories (the largest total change in shares, so a 20-point move of one
category reads 0.2), and the missing rates. Unseen labels are reported on their own.

Dataset level: every p-value of every column (the tests', and for learned thresholds the
normal tail NannyML's ``mean + k·std`` rule implies) is adjusted by the policy's
correction (Holm by default, or Benjamini-Hochberg), and the dataset drifts when one
adjusted p-value is at most ``alpha`` or a fixed-threshold column alarms. A column's own
``verdict`` is the uncorrected one; ``significant`` says whether it survives the
correction.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from reprise.monitor._policy import DriftPolicy
from reprise.monitor._reference import (
    Reference,
    Summary,
    category_counts,
    coarse_counts,
    distance,
)
from reprise.monitor._stats import (
    adjust,
    chi2_test,
    gaussian_tail,
    js_distance,
    ks_binned,
    missing_test,
    wasserstein_binned,
)
from reprise.monitor._summary import CategoricalSummary, NumericSummary
from reprise.monitor._window import Window

__all__ = ["VERDICTS", "ColumnDrift", "DriftReport", "compare"]

VERDICTS = ("drift", "no_drift", "insufficient", "absent", "unsupported", "ignored")


@dataclass
class ColumnDrift:
    column: str
    kind: str
    verdict: str  # one of VERDICTS
    reason: str = ""
    method: str | None = None  # ks | chi2 | wasserstein | js
    statistic: float | None = None
    p_value: float | None = None
    threshold: float | None = None
    threshold_source: str | None = None  # learned | policy
    p_adjusted: float | None = None
    significant: bool = False
    rows: int = 0
    values: int = 0
    reference_values: int = 0
    effect: dict[str, float | None] = field(default_factory=dict)
    missing_rate: float | None = None
    reference_missing_rate: float | None = None
    missing_p_value: float | None = None
    unseen: dict[str, Any] | None = None
    ks_error: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class DriftReport:
    verdict: str  # drift | no_drift | insufficient
    correction: str
    alpha: float
    reference_rows: int
    window_rows: int
    columns: list[ColumnDrift]
    absent: list[str]
    extra: list[str]
    policy: dict[str, Any]

    @property
    def drifted(self) -> list[str]:
        return [c.column for c in self.columns if c.significant]

    def column(self, name: str) -> ColumnDrift:
        return next(c for c in self.columns if c.column == name)

    def as_check(self) -> dict[str, Any]:
        """The verdict in the rollout analysis' vocabulary (``reprise.serve``'s
        ``CheckResult`` fields), so a deployment can plug drift in as its ``input_drift``
        check: ``fail`` on drift, ``pass`` on none, ``insufficient`` without a verdict;
        the value is the smallest adjusted p-value, the limit ``alpha``. Plain data: the
        monitoring and serving layers are siblings and do not import each other."""
        adjusted = [c.p_adjusted for c in self.columns if c.p_adjusted is not None]
        verdict = {"drift": "fail", "no_drift": "pass"}.get(self.verdict, "insufficient")
        if self.verdict == "drift":
            message = (f"input drift in {', '.join(self.drifted[:5])}"
                       f"{' ...' if len(self.drifted) > 5 else ''} ({self.correction} at "
                       f"alpha {self.alpha:g})")
        elif self.verdict == "no_drift":
            message = f"no input drift ({self.correction} at alpha {self.alpha:g})"
        else:
            message = (f"insufficient data: {self.window_rows} rows, fewer than "
                       f"{self.policy['min_rows']} values in every column")
        return {"name": "input_drift", "verdict": verdict,
                "value": min(adjusted) if adjusted else None, "limit": self.alpha,
                "message": message}

    def to_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "correction": self.correction, "alpha": self.alpha,
                "reference_rows": self.reference_rows, "window_rows": self.window_rows,
                "drifted": self.drifted, "absent": self.absent, "extra": self.extra,
                "policy": self.policy, "columns": [c.to_dict() for c in self.columns]}


def compare(reference: Reference, window: Window,
            policy: DriftPolicy | None = None) -> DriftReport:
    """Judge ``window`` against ``reference`` (see the module docstring).

    Example:
        >>> import numpy as np, pyarrow as pa
        >>> from reprise.monitor import Window, fit_reference
        >>> rng = np.random.default_rng(0)
        >>> ref = fit_reference(pa.table({"x": rng.normal(size=5000)}))
        >>> w = Window(ref); w.update(pa.table({"x": rng.normal(1.0, size=500)}))
        >>> compare(ref, w).verdict
        'drift'
    """
    policy = policy or DriftPolicy()
    results = [_column(name, kind, reference, window, policy)
               for name, kind in reference.kinds.items()]
    verdict = _dataset_verdict(results, policy)
    absent = [c.column for c in results if c.verdict == "absent"]
    return DriftReport(verdict, policy.correction, policy.alpha, reference.rows, window.rows,
                       results, absent, sorted(window.extra), policy.to_dict())


def _column(name: str, kind: str, reference: Reference, window: Window,
            policy: DriftPolicy) -> ColumnDrift:
    if policy.ignored(name):
        return ColumnDrift(name, kind, "ignored", "ignored by the policy")
    if kind == "unsupported" or name not in reference.columns:
        return ColumnDrift(name, kind, "unsupported",
                           "nested or binary values are not compared")
    ref, cur = reference.columns[name], window.columns[name]
    if window.rows and window.absent_rows.get(name, 0) == window.rows:
        return ColumnDrift(name, kind, "absent", "the window has no such column",
                           rows=window.rows)
    out = ColumnDrift(name, kind, "insufficient", rows=cur.rows, values=cur.present,
                      reference_values=ref.present)
    ref_missing, cur_missing = _missing(ref), _missing(cur)
    out.reference_missing_rate = ref_missing / ref.rows if ref.rows else None
    out.missing_rate = cur_missing / cur.rows if cur.rows else None
    if isinstance(cur, CategoricalSummary) and cur.present:
        top = sorted(cur.unseen_counts.items(), key=lambda kv: (-kv[1], kv[0]))[:10]
        out.unseen = {"rows": cur.unseen, "share": cur.unseen / cur.present,
                      "labels": dict(top)}
    if cur.rows < policy.min_rows:
        out.reason = (f"{cur.rows} rows, fewer than the minimum of {policy.min_rows}: no "
                      "verdict")
        return out
    out.missing_p_value = missing_test(ref_missing, ref.rows, cur_missing, cur.rows)
    if ref.present == 0:
        out.reason = "the reference has no value in this column"
    elif cur.present < policy.min_rows:
        out.reason = (f"{cur.present} values, fewer than the minimum of {policy.min_rows}: "
                      "no verdict on the distribution")
    else:
        _distribution(out, ref, cur, reference, policy)
    tested = out.method is not None
    alarms = (out.missing_p_value <= policy.alpha
              or (tested and out.p_value is not None and out.p_value <= policy.alpha)
              or (tested and out.threshold is not None and out.statistic is not None
                  and out.statistic > out.threshold))
    if alarms:
        out.verdict = "drift"
    elif tested:
        out.verdict = "no_drift"
    return out


def _missing(s: Summary) -> int:
    return s.missing + (s.invalid if isinstance(s, NumericSummary) else 0)


def _distribution(out: ColumnDrift, ref: Summary, cur: Summary, reference: Reference,
                  policy: DriftPolicy) -> None:
    std = ref.std if isinstance(ref, NumericSummary) else 0.0
    _effects(out, ref, cur, std)
    fixed = policy.fixed_threshold(out.column)
    learned = reference.thresholds.get(out.column)
    if fixed is None and cur.present <= policy.ks_max_rows:
        if isinstance(ref, NumericSummary) and isinstance(cur, NumericSummary):
            out.method = "ks"
            out.statistic, out.p_value, out.ks_error = ks_binned(ref.counts, cur.counts)
        else:
            out.method = "chi2"
            assert isinstance(ref, CategoricalSummary) and isinstance(cur, CategoricalSummary)
            out.statistic, out.p_value, _ = chi2_test(category_counts(ref),
                                                      category_counts(cur))
        return
    out.method, stat = distance(ref, cur, std)
    out.statistic = float(stat)
    if fixed is not None:
        out.threshold, out.threshold_source = fixed, "policy"
    elif learned is not None and learned.statistic == out.method:
        out.threshold = learned.limit(policy.k, cur.present, ref.present)
        out.threshold_source = "learned"
        scale = out.threshold / (learned.mean + policy.k * learned.std) \
            if learned.mean + policy.k * learned.std > 0 else 1.0
        out.p_value = gaussian_tail(out.statistic, learned.mean * scale, learned.std * scale)
    else:
        out.reason = ("no threshold: the reference is too small to learn one from its "
                      "chunks and the policy sets none for this column")


def _effects(out: ColumnDrift, ref: Summary, cur: Summary, std: float) -> None:
    if isinstance(ref, NumericSummary) and isinstance(cur, NumericSummary):
        w = wasserstein_binned(ref.counts, cur.counts, ref.spec.edges,
                               (ref.low_sum, ref.high_sum), (cur.low_sum, cur.high_sum))
        out.effect = {"wasserstein": float(w / std) if std > 0 else None,
                      "js": js_distance(coarse_counts(ref), coarse_counts(cur)),
                      "mean_shift": (cur.mean - ref.mean) / std if std > 0 else None}
    else:
        assert isinstance(ref, CategoricalSummary) and isinstance(cur, CategoricalSummary)
        a, b = category_counts(ref), category_counts(cur)
        out.effect = {"js": js_distance(a, b),
                      "tvd": float(np.abs(a / a.sum() - b / b.sum()).sum() / 2)}


def _dataset_verdict(results: list[ColumnDrift], policy: DriftPolicy) -> str:
    family: list[tuple[ColumnDrift, float]] = []
    fixed_alarm = False
    for c in results:
        if c.missing_p_value is not None:
            family.append((c, c.missing_p_value))
        if c.method is None:
            continue
        if c.p_value is not None:
            family.append((c, c.p_value))
        elif c.threshold is not None and c.statistic is not None and c.statistic > c.threshold:
            c.significant = fixed_alarm = True
    adjusted = adjust([p for _, p in family], policy.correction)
    for (c, _), q in zip(family, adjusted, strict=True):
        c.p_adjusted = q if c.p_adjusted is None else min(c.p_adjusted, q)
        if q <= policy.alpha:
            c.significant = True
    if fixed_alarm or any(q <= policy.alpha for q in adjusted):
        return "drift"
    return "no_drift" if family else "insufficient"
