"""The checks of a rollout's analysis and the windows they read (see ``_analysis``).

A :class:`VersionWindow` is the sum of a version's buckets over a window: counts, the
latency histogram and the output distribution add up, so a window over any set of
buckets and servers is exact. Each check is a plain function ``(stable, candidate,
policy) -> CheckResult | None`` (None: it does not apply), registered by name in
:data:`CHECKS`; the statistics come from scipy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from reprise.core._rollout_types import LATENCY_BOUNDS_MS, BucketRow
from reprise.serve._policy import Policy

__all__ = ["CHECKS", "HARD", "VERDICTS", "Check", "CheckResult", "VersionWindow", "burn_rates",
           "histogram_quantile", "register_check", "run_checks", "run_hard_checks",
           "share_above"]

VERDICTS = ("pass", "fail", "hard_fail", "insufficient")


@dataclass
class VersionWindow:
    """The summed outcomes of one version over a window of buckets."""

    version: int
    role: str  # stable | candidate
    mode: str = "live"  # live traffic, or shadow copies (candidate only)
    requests: int = 0
    errors: int = 0
    latency: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BOUNDS_MS) + 1))
    outputs: dict[str, int] = field(default_factory=dict)
    shadow_compared: int = 0
    shadow_agreed: int = 0
    shadow_dropped: int = 0
    first_bucket: int | None = None
    last_bucket: int | None = None
    model: str = ""  # whose version: checks that read more than the buckets need it
    since: float | None = None  # the window in Unix seconds (the request log's clock)
    until: float | None = None

    @classmethod
    def from_rows(cls, version: int, role: str, rows: Iterable[BucketRow], *,
                  mode: str = "live", first_bucket: int | None = None,
                  last_bucket: int | None = None, model: str = "",
                  since: float | None = None, until: float | None = None) -> VersionWindow:
        """The sum of ``rows`` of ``version`` (rows of other versions are left out)."""
        w = cls(version, role, mode, first_bucket=first_bucket, last_bucket=last_bucket,
                model=model, since=since, until=until)
        for r in rows:
            if r.version != version:
                continue
            w.requests += r.requests
            w.errors += r.errors
            for i, n in enumerate(r.latency):
                w.latency[i] += n
            for k, n in r.outputs.items():
                w.outputs[k] = w.outputs.get(k, 0) + n
            w.shadow_compared += r.shadow_compared
            w.shadow_agreed += r.shadow_agreed
            w.shadow_dropped += r.shadow_dropped
        return w

    @property
    def error_rate(self) -> float | None:
        return self.errors / self.requests if self.requests else None

    def quantile(self, q: float) -> float | None:
        return histogram_quantile(self.latency, q)

    @property
    def agreement(self) -> float | None:
        return self.shadow_agreed / self.shadow_compared if self.shadow_compared else None

    def to_dict(self) -> dict[str, Any]:
        """The window as evidence: counts, the metrics derived from them, the histogram."""
        return {**asdict(self), "error_rate": self.error_rate, "p50_ms": self.quantile(0.5),
                "p99_ms": self.quantile(0.99), "agreement": self.agreement}


@dataclass(frozen=True)
class CheckResult:
    name: str
    verdict: str  # pass | fail | hard_fail | insufficient
    value: float | None
    limit: float | None
    message: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


Check = Callable[[VersionWindow, VersionWindow, Policy], CheckResult | None]
"""A check: ``(stable, candidate, policy) -> CheckResult``, or None where it does not
apply (turned off in the policy, or not for this strategy)."""


def histogram_quantile(counts: list[int], q: float) -> float | None:
    """The ``q``-quantile (milliseconds) of a latency histogram over
    :data:`LATENCY_BOUNDS_MS`, interpolated linearly inside its bucket as Prometheus'
    ``histogram_quantile`` does (numpy's quantiles need the raw values, which a
    mergeable histogram no longer has). Above the last bound: the last bound (a floor)."""
    total = sum(counts)
    if not total:
        return None
    rank, seen = q * total, 0
    for i, n in enumerate(counts):
        if n and seen + n >= rank:
            if i >= len(LATENCY_BOUNDS_MS):
                return float(LATENCY_BOUNDS_MS[-1])
            low = 0.0 if i == 0 else float(LATENCY_BOUNDS_MS[i - 1])
            return low + (LATENCY_BOUNDS_MS[i] - low) * (rank - seen) / n
        seen += n
    return float(LATENCY_BOUNDS_MS[-1])


def share_above(counts: list[int], ms: float) -> float | None:
    """The share of requests slower than ``ms``, interpolated inside the bucket holding
    ``ms`` (as :func:`histogram_quantile`)."""
    total = sum(counts)
    if not total:
        return None
    slow = 0.0
    for i, n in enumerate(counts):
        low = 0.0 if i == 0 else float(LATENCY_BOUNDS_MS[i - 1])
        high = LATENCY_BOUNDS_MS[i] if i < len(LATENCY_BOUNDS_MS) else math.inf
        if low >= ms:
            slow += n
        elif high > ms and math.isfinite(high):
            slow += n * (high - ms) / (high - low)
    return slow / total


def burn_rates(w: VersionWindow, policy: Policy) -> dict[str, float | None]:
    """How fast a window spends the SLOs' error budgets (1: exactly on budget).

    Availability: the error rate over ``1 - slo.availability``; latency: the share
    slower than ``slo.latency_ms`` over ``1 - slo.latency_target`` (None when unset or
    without requests). Multi-window alerts compare these over a long and a short window
    (e.g. 1 h and 5 min above 14.4, SRE workbook ch. 5)."""
    availability = None if w.error_rate is None else w.error_rate / (1 - policy.slo_availability)
    latency = None
    if policy.slo_latency_ms is not None:
        slow = share_above(w.latency, policy.slo_latency_ms)
        latency = None if slow is None else slow / (1 - policy.slo_latency_target)
    return {"availability": availability, "latency": latency}


# -- the checks ------------------------------------------------------------------------

def _short(w: VersionWindow, policy: Policy, what: str = "requests") -> CheckResult | None:
    return None if w.requests >= policy.min_requests else CheckResult(
        "", "insufficient", float(w.requests), float(policy.min_requests),
        f"insufficient data: {w.requests} of {policy.min_requests} {what} ({w.role} "
        f"v{w.version})")


_NOTHING = CheckResult("", "insufficient", 0.0, None, "insufficient data: no requests")


def _named(name: str, result: CheckResult) -> CheckResult:
    return replace(result, name=name)


def check_error_rate_hard(stable: VersionWindow, cand: VersionWindow,
                          policy: Policy) -> CheckResult | None:
    """Hard failure: the candidate's error rate is significantly above ``error_rate.hard``
    (exact one-sided binomial test): 10 failures out of 10 requests are enough at
    alpha 0.01 against 0.5, one failure in two is not."""
    hard = policy.error_rate_hard
    if hard is None:
        return None
    if cand.requests == 0:
        return _named("error_rate_hard", _short(cand, policy) or _NOTHING)
    from scipy.stats import binomtest

    p = float(binomtest(cand.errors, cand.requests, hard, alternative="greater").pvalue)
    rate = cand.errors / cand.requests
    if p < policy.alpha:
        return CheckResult("error_rate_hard", "hard_fail", rate, hard,
                           f"error rate {rate:.1%} ({cand.errors} of {cand.requests}) is "
                           f"above the hard limit {hard:.0%} (p={p:.2g} < {policy.alpha:g})")
    short = _short(cand, policy)
    if short is not None:
        return _named("error_rate_hard", short)
    return CheckResult("error_rate_hard", "pass", rate, hard,
                       f"error rate {rate:.1%} is not above the hard limit {hard:.0%}")


def check_error_rate(stable: VersionWindow, cand: VersionWindow,
                     policy: Policy) -> CheckResult | None:
    limit = policy.error_rate_max
    if limit is None:
        return None
    short = _short(cand, policy)
    if short is not None:
        return _named("error_rate", short)
    rate = cand.errors / cand.requests
    verdict = "fail" if rate > limit else "pass"
    return CheckResult("error_rate", verdict, rate, limit,
                       f"error rate {rate:.2%} ({cand.errors} of {cand.requests}) "
                       f"{'>' if verdict == 'fail' else '<='} {limit:.2%}")


def check_error_rate_relative(stable: VersionWindow, cand: VersionWindow,
                              policy: Policy) -> CheckResult | None:
    """The candidate's error rate against the stable version's: one-sided Fisher exact
    test (is the candidate's rate higher?) at ``alpha``."""
    if not policy.error_rate_relative:
        return None
    short = _short(cand, policy) or _short(stable, policy)
    if short is not None:
        return _named("error_rate_relative", short)
    from scipy.stats import fisher_exact

    table = [[cand.errors, cand.requests - cand.errors],
             [stable.errors, stable.requests - stable.errors]]
    p = float(fisher_exact(table, alternative="greater").pvalue)
    c, s = cand.errors / cand.requests, stable.errors / stable.requests
    if p < policy.alpha:
        return CheckResult("error_rate_relative", "fail", p, policy.alpha,
                           f"error rate {c:.2%} is significantly above the stable version's "
                           f"{s:.2%} (Fisher exact p={p:.2g} < {policy.alpha:g})")
    return CheckResult("error_rate_relative", "pass", p, policy.alpha,
                       f"error rate {c:.2%} is not significantly above the stable version's "
                       f"{s:.2%} (p={p:.2g})")


def _latency_limit(name: str, q: float, limit: float | None) -> Check:
    def check(stable: VersionWindow, cand: VersionWindow, policy: Policy) -> CheckResult | None:
        if limit is None:
            return None
        short = _short(cand, policy)
        if short is not None:
            return _named(name, short)
        value = cand.quantile(q)
        assert value is not None
        verdict = "fail" if value > limit else "pass"
        return CheckResult(name, verdict, value, limit,
                           f"p{round(q * 100)} latency {value:.1f} ms "
                           f"{'>' if verdict == 'fail' else '<='} {limit:g} ms")
    return check


def check_latency_p50(stable: VersionWindow, cand: VersionWindow,
                      policy: Policy) -> CheckResult | None:
    return _latency_limit("latency_p50", 0.5, policy.latency_p50_max_ms)(stable, cand, policy)


def check_latency_p99(stable: VersionWindow, cand: VersionWindow,
                      policy: Policy) -> CheckResult | None:
    return _latency_limit("latency_p99", 0.99, policy.latency_p99_max_ms)(stable, cand, policy)


def check_latency_ratio(stable: VersionWindow, cand: VersionWindow,
                        policy: Policy) -> CheckResult | None:
    """The candidate's p99 over the stable version's; a candidate p99 under
    ``latency.ratio_floor_ms`` passes whatever the ratio."""
    limit = policy.latency_p99_ratio_max
    if limit is None:
        return None
    short = _short(cand, policy) or _short(stable, policy)
    if short is not None:
        return _named("latency_ratio", short)
    c, s = cand.quantile(0.99), stable.quantile(0.99)
    assert c is not None and s is not None
    ratio = c / s if s > 0 else math.inf
    floor = policy.latency_ratio_floor_ms
    if c <= floor:
        return CheckResult("latency_ratio", "pass", ratio, limit,
                           f"p99 {c:.1f} ms is under the floor {floor:g} ms (stable "
                           f"{s:.1f} ms)")
    verdict = "fail" if ratio > limit else "pass"
    return CheckResult("latency_ratio", verdict, ratio, limit,
                       f"p99 {c:.1f} ms is {ratio:.2f}x the stable version's {s:.1f} ms "
                       f"({'>' if verdict == 'fail' else '<='} {limit:g}x)")


def check_prediction_shift(stable: VersionWindow, cand: VersionWindow,
                           policy: Policy) -> CheckResult | None:
    """Jensen-Shannon distance (base 2, so 0..1) between the two output distributions
    (class shares, or score bins), from scipy. Does not apply when neither version
    recorded outputs.

    The distance of two samples of the *same* distribution is not 0: at the minimum
    sample (200 requests; the demo's 100) a healthy candidate's class shares differ from
    the stable version's by a few points by chance, and on the demo's data a distance
    above the default limit (0.1) came up often enough to roll back a healthy canary in
    CI. So a distance above the limit fails only when the two distributions differ
    significantly (Pearson's chi-square test of homogeneity on the counts, scipy, at the
    policy's ``alpha``); above the limit but not significant is insufficient data (the
    step holds until a window says more), as the error-rate check's Fisher test decides
    on significance too. An all-one-class candidate fails at once: on 200 requests its
    p-value is far below any alpha."""
    limit = policy.prediction_shift_max
    if limit is None:
        return None
    short = _short(cand, policy) or _short(stable, policy)
    if short is not None:
        return _named("prediction_shift", short)
    if not sum(stable.outputs.values()) and not sum(cand.outputs.values()):
        return None
    if not sum(stable.outputs.values()) or not sum(cand.outputs.values()):
        empty = stable if not sum(stable.outputs.values()) else cand
        return CheckResult("prediction_shift", "insufficient", None, limit,
                           f"insufficient data: no outputs recorded for {empty.role} "
                           f"v{empty.version}")
    from scipy.spatial.distance import jensenshannon

    labels = sorted(set(stable.outputs) | set(cand.outputs))
    p = [cand.outputs.get(k, 0) for k in labels]
    q = [stable.outputs.get(k, 0) for k in labels]
    d = float(jensenshannon(p, q, base=2))
    top = max(labels, key=lambda k: cand.outputs.get(k, 0))
    about = f"candidate's top output {top!r}: {cand.outputs.get(top, 0) / sum(p):.0%}"
    if d <= limit:
        return CheckResult("prediction_shift", "pass", d, limit,
                           f"Jensen-Shannon distance {d:.3f} <= {limit:g} ({about})")
    pvalue = _homogeneity_p(p, q)
    if pvalue < policy.alpha:
        return CheckResult("prediction_shift", "fail", d, limit,
                           f"Jensen-Shannon distance {d:.3f} > {limit:g}, significant "
                           f"(chi-square p={pvalue:.2g} < {policy.alpha:g}; {about})")
    return CheckResult("prediction_shift", "insufficient", d, limit,
                       f"insufficient data: Jensen-Shannon distance {d:.3f} > {limit:g} but "
                       f"not significant on {sum(p)} and {sum(q)} answers (chi-square "
                       f"p={pvalue:.2g} >= {policy.alpha:g}; {about})")


def _homogeneity_p(p: list[int], q: list[int]) -> float:
    """p-value of Pearson's chi-square test that the counts ``p`` and ``q`` (of the same
    two or more labels, each counted at least once in one of them: a distance above 0
    has both) come from one distribution."""
    from scipy.stats import chi2_contingency

    return float(chi2_contingency([p, q], correction=False).pvalue)


def check_shadow_agreement(stable: VersionWindow, cand: VersionWindow,
                           policy: Policy) -> CheckResult | None:
    limit = policy.shadow_agreement_min
    if limit is None or cand.mode != "shadow":
        return None
    if cand.shadow_compared < policy.min_requests:
        return CheckResult("shadow_agreement", "insufficient", float(cand.shadow_compared),
                           float(policy.min_requests),
                           f"insufficient data: {cand.shadow_compared} of "
                           f"{policy.min_requests} shadow comparisons "
                           f"({cand.shadow_dropped} copies dropped)")
    rate = cand.shadow_agreed / cand.shadow_compared
    verdict = "fail" if rate < limit else "pass"
    return CheckResult("shadow_agreement", verdict, rate, limit,
                       f"agreement {rate:.1%} on {cand.shadow_compared} shadowed requests "
                       f"{'<' if verdict == 'fail' else '>='} {limit:.0%}")


CHECKS: dict[str, Check] = {
    "error_rate_hard": check_error_rate_hard,
    "error_rate": check_error_rate,
    "error_rate_relative": check_error_rate_relative,
    "latency_p50": check_latency_p50,
    "latency_p99": check_latency_p99,
    "latency_ratio": check_latency_ratio,
    "prediction_shift": check_prediction_shift,
    "shadow_agreement": check_shadow_agreement,
}
"""Every check ``_analysis.decide`` runs, by name. ``input_drift`` is the monitoring layer's
to install (:func:`register_check`); until then it is left out and the evidence says so."""

HARD: set[str] = {"error_rate_hard"}
"""The checks that may answer ``hard_fail`` (a rollback before the interval is up): all
that a server's analysis between two decisions runs (``decide(..., quick=True)``)."""


def register_check(name: str, fn: Check, *, hard: bool | None = None) -> None:
    """Install (or replace) the check ``name``, e.g. ``input_drift``: it is then run by
    every analysis like the built-in ones. ``hard``: it may answer ``hard_fail``, so a
    server runs it between decisions too, and a hard failure rolls back at once; False:
    only when a decision is due (a ``hard_fail`` then rolls back at that analysis);
    None (the default): as the check it replaces was, else False."""
    CHECKS[name] = fn
    if hard:
        HARD.add(name)
    elif hard is not None:
        HARD.discard(name)


def run_hard_checks(stable: VersionWindow, cand: VersionWindow,
                    policy: Policy) -> list[CheckResult]:
    """The results of the checks in :data:`HARD` that apply."""
    results = []
    for name in sorted(HARD):
        fn = CHECKS.get(name)
        out = fn(stable, cand, policy) if fn is not None else None
        if out is not None:
            results.append(out)
    return results


def run_checks(stable: VersionWindow, cand: VersionWindow,
               policy: Policy) -> tuple[list[CheckResult], list[str]]:
    """``(results, skipped)``: every check that applies, and the names of those that do
    not (turned off, not for this strategy, or not installed)."""
    results, skipped = [], []
    for name, fn in CHECKS.items():
        out = fn(stable, cand, policy)
        if out is None:
            skipped.append(name)
        else:
            results.append(out)
    if "input_drift" not in CHECKS:
        skipped.append("input_drift")
    if not any(r.verdict == "insufficient" for r in results):
        short = _short(cand, policy)  # with every data check off, the sample still counts
        if short is not None:
            results.append(_named("sample", short))
    return results, skipped
