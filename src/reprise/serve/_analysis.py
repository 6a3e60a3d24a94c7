"""A rollout's analysis: a pure step function over recorded outcomes, the clock a parameter.

:func:`decide` takes the rollout, one window per version (the sums of their buckets:
:class:`VersionWindow`), the policy and the time, runs the checks of :data:`CHECKS`
and returns the :class:`Decision` the rules below give, with its evidence (Flagger's
analysis loop; Argo Rollouts keeps every measurement). Nothing here does I/O:
``serve._rollouts.analyze_once`` reads the buckets, calls :func:`decide` and applies
the decision by compare-and-set.

Rules, in order:

1. a check that *hard-fails* rolls back at once, even before the interval is up;
2. before the interval has passed since the step began (or the last decision): wait;
3. a failing check fails the analysis; ``threshold`` failed analyses in a row roll
   back, fewer hold (the streak is kept on the record; a passing analysis ends it);
4. a check without enough data holds and says so (``insufficient data: 37 of 200
   requests``): it never passes;
5. every check passing moves on: the next canary step, and promotion after the last;
   blue-green goes shadow -> live (100 %) -> hold (the old version kept warm for
   ``blue_green.hold``) -> promoted; a shadow rollout keeps shadowing, answering
   nothing, until someone promotes or aborts it.

Windows: the candidate's is its current step or phase (since ``step_started_at``);
the stable version's is the same, so both are measured on the traffic of the same
buckets, except while the candidate takes every live request (weight 100 %: a canary's
last step, blue-green's live and hold phases), when it is the whole rollout (since
``created_at``), its baseline (:func:`stable_since`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from reprise.core._rollout_types import RolloutRecord
from reprise.serve._policy import Policy
from reprise.serve._rollout_checks import (
    CHECKS,
    Check,
    CheckResult,
    VersionWindow,
    burn_rates,
    histogram_quantile,
    register_check,
    run_checks,
    run_hard_checks,
)

__all__ = ["ACTIONS", "CHECKS", "Check", "CheckResult", "Decision", "VersionWindow",
           "burn_rates", "decide", "finite_json", "histogram_quantile", "register_check",
           "run_checks", "stable_since"]

ACTIONS = ("wait", "hold", "step", "promote", "rollback", "abort")


@dataclass
class Decision:
    """What one analysis decided, with the checks and the evidence behind it.

    ``changes`` are the record fields the decision sets (applied by compare-and-set);
    ``applied`` is set by whoever applies it (False: a ``wait``, or another caller's
    decision came first).
    """

    action: str  # wait | hold | step | promote | rollback | abort (by hand)
    changes: dict[str, Any]
    checks: list[CheckResult]
    evidence: dict[str, Any]
    reason: str = ""
    applied: bool = False

    def to_dict(self) -> dict[str, Any]:
        return finite_json({"action": self.action, "changes": self.changes,  # type: ignore[no-any-return]
                            "reason": self.reason, "applied": self.applied,
                            "checks": [c.to_dict() for c in self.checks],
                            "evidence": self.evidence})


def finite_json(obj: Any) -> Any:
    """``obj`` with non-finite floats as strings (``"inf"``): audit payloads and ``--json``
    stay strict JSON (a p99 ratio over a stable p99 of 0 is infinite)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, dict):
        return {k: finite_json(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite_json(v) for v in obj]
    return obj


def stable_since(rollout: RolloutRecord) -> float:
    """Where the stable version's window starts: with the candidate's step while the
    stable version answers live traffic in it, else (the candidate at 100 %) with the
    rollout."""
    return rollout.step_started_at if rollout.weight < 100 else rollout.created_at


def decide(rollout: RolloutRecord, stable_w: VersionWindow, cand_w: VersionWindow,
           policy: Policy, now: float, *, quick: bool = False) -> Decision:
    """The decision the rules (module docstring) give for ``rollout`` at ``now``.

    ``quick``: before the interval is up, run only the checks that may hard-fail
    (:data:`~reprise.serve._rollout_checks.HARD`) and answer ``wait`` with no evidence
    unless one does; the decision is the same, only a wait's checks and evidence are
    left out. A server's decider analyses every second for the hard failures, and the
    other checks (a contingency test, an input-drift report reading the request log)
    were most of that work, on the serving process, for nothing (issue 14).

    Example:
        >>> import time
        >>> from reprise.core import RolloutRecord
        >>> r = RolloutRecord("r1", "m", "production", 1, 2, "canary", [5, 100], 60.0, {},
        ...                   {}, "running", 0, 5.0, "steps", 0.0, 0.0, None, 0, 0, None, "me")
        >>> d = decide(r, VersionWindow(1, "stable"), VersionWindow(2, "candidate"),
        ...            Policy(), now=61.0)
        >>> d.action, d.reason
        ('hold', 'insufficient data: 0 of 200 requests (candidate v2)')
    """
    due = rollout.due_at()
    if quick and now < due:
        hard = run_hard_checks(stable_w, cand_w, policy)
        if not any(c.verdict == "hard_fail" for c in hard):
            return Decision("wait", {}, hard, {}, f"next analysis in {due - now:.1f} s")
    checks, skipped = run_checks(stable_w, cand_w, policy)
    evidence = _evidence(rollout, stable_w, cand_w, policy, now, checks, skipped)
    hard = [c for c in checks if c.verdict == "hard_fail"]
    if hard:
        return _rollback(rollout, now, checks, evidence, failures=rollout.failures + 1,
                         reason="hard failure: " + "; ".join(c.message for c in hard))
    if now < due:
        return Decision("wait", {}, checks, evidence,
                        f"next analysis in {due - now:.1f} s")
    failed = [c for c in checks if c.verdict == "fail"]
    if failed:
        failures = rollout.failures + 1
        why = "; ".join(f"{c.name}: {c.message}" for c in failed)
        if failures >= policy.threshold:
            return _rollback(rollout, now, checks, evidence, failures=failures,
                             reason=f"{failures} failed analyses in a row "
                                    f"(threshold {policy.threshold}): {why}")
        return Decision("hold", {"failures": failures, "analyzed_at": now}, checks, evidence,
                        f"failed analysis {failures} of {policy.threshold}: {why}")
    short = [c for c in checks if c.verdict == "insufficient"]
    if short:
        return Decision("hold", {"analyzed_at": now}, checks, evidence,
                        "; ".join(dict.fromkeys(c.message for c in short)))
    return _advance(rollout, policy, now, checks, evidence)


def _advance(rollout: RolloutRecord, policy: Policy, now: float, checks: list[CheckResult],
             evidence: dict[str, Any]) -> Decision:
    """Every check passed: the next step or phase, or promotion."""
    step_up = {"failures": 0, "step_started_at": now, "analyzed_at": None}
    if rollout.strategy == "canary":
        if rollout.step + 1 < len(rollout.steps):
            weight = float(rollout.steps[rollout.step + 1])
            return Decision("step", {**step_up, "step": rollout.step + 1, "weight": weight},
                            checks, evidence, f"all checks pass: weight {rollout.weight:g}% -> "
                                              f"{weight:g}%")
        return _promote(now, checks, evidence, f"all checks pass at the last step "
                                               f"({rollout.weight:g}%)")
    if rollout.strategy == "shadow":
        return Decision("hold", {"failures": 0, "analyzed_at": now}, checks, evidence,
                        "all checks pass on shadow traffic; the candidate answers only once "
                        f"promoted: `reprise rollout promote {rollout.name} --alias "
                        f"{rollout.alias}`")
    if rollout.phase == "shadow":  # blue-green
        return Decision("step", {**step_up, "phase": "live", "weight": 100.0}, checks,
                        evidence, "all checks pass on shadow traffic: the candidate takes "
                                  "100% at once; the stable version stays warm")
    hold = policy.hold_seconds(rollout.interval_s)
    if rollout.phase == "live":
        return Decision("step", {**step_up, "phase": "hold"}, checks, evidence,
                        f"all checks pass on live traffic: holding the stable version warm "
                        f"for {hold:g} s before promotion")
    if now < rollout.step_started_at + hold:
        return Decision("hold", {"failures": 0, "analyzed_at": now}, checks, evidence,
                        f"all checks pass; the hold ends in "
                        f"{rollout.step_started_at + hold - now:.1f} s")
    return _promote(now, checks, evidence, "all checks pass at the end of the hold")


def _promote(now: float, checks: list[CheckResult], evidence: dict[str, Any],
             reason: str) -> Decision:
    return Decision("promote", {"state": "promoted", "weight": 100.0, "ended_at": now,
                                "failures": 0, "analyzed_at": now, "reason": reason},
                    checks, evidence, reason)


def _rollback(rollout: RolloutRecord, now: float, checks: list[CheckResult],
              evidence: dict[str, Any], *, failures: int, reason: str) -> Decision:
    return Decision("rollback", {"state": "rolled_back", "weight": 0.0, "ended_at": now,
                                 "failures": failures, "analyzed_at": now, "reason": reason},
                    checks, evidence, reason)


def _evidence(rollout: RolloutRecord, stable_w: VersionWindow, cand_w: VersionWindow,
              policy: Policy, now: float, checks: list[CheckResult],
              skipped: list[str]) -> dict[str, Any]:
    """What the decision saw: the window, per-version counts and metrics, the thresholds
    and every check's verdict (an audit event keeps it)."""
    return {
        "time": now, "strategy": rollout.strategy, "phase": rollout.phase,
        "step": rollout.step, "weight": rollout.weight, "failures": rollout.failures,
        "window": {"candidate_since": rollout.step_started_at,
                   "stable_since": stable_since(rollout), "until": now},
        "versions": {"stable": _metrics(stable_w, policy), "candidate": _metrics(cand_w, policy)},
        "policy": policy.to_dict(),
        "checks": [c.to_dict() for c in checks],
        "skipped": skipped,
    }


def _metrics(w: VersionWindow, policy: Policy) -> dict[str, Any]:
    return {**w.to_dict(), "burn_rates": burn_rates(w, policy)}

