"""The rollout analysis' ``input_drift`` check, wired here because only the CLI layer may
import both ``reprise.serve`` (the analysis) and ``reprise.monitor`` (the statistics).

When a rollout's policy sets ``input_drift: {enabled: true}``, the check reads the
candidate's logged requests in the analysis window (the request log) and compares their
inputs with the candidate's reference (:func:`reprise.monitor._live.live_report`, one
window spanning the analysis window); the verdict is :meth:`DriftReport.as_check`'s:
``fail`` on drift, ``pass`` without, ``insufficient`` below the minimum sample or when
the candidate has no reference. Nothing is loaded until a policy asks for it.
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["input_drift_check", "install_input_drift_check"]

_logger = logging.getLogger("reprise.serve")


def install_input_drift_check(workspace: Any) -> None:
    """Register the check (for every analysis in this process) over ``workspace``."""
    from reprise.serve._rollout_checks import register_check

    def check(stable: Any, cand: Any, policy: Any) -> Any:
        return input_drift_check(stable, cand, policy, workspace=workspace)

    register_check("input_drift", check)


def input_drift_check(stable: Any, cand: Any, policy: Any, *, workspace: Any) -> Any:
    from reprise.core.errors import RepriseError
    from reprise.serve._rollout_checks import CheckResult

    if not getattr(policy, "input_drift", False):
        return None
    if not cand.model or cand.since is None or cand.until is None:
        return CheckResult("input_drift", "insufficient", None, None,
                           "insufficient data: the analysis window has no time span")
    from reprise.monitor._live import live_report

    span = max(cand.until - cand.since, 1e-3)
    try:
        report = live_report(f"{cand.model}:{cand.version}", window=f"{span:.3f}s",
                             windows=1, since=cand.since, now=cand.until,
                             workspace=workspace, persist=False)
    except RepriseError as exc:  # no reference, say: the check cannot judge, says why
        return CheckResult("input_drift", "insufficient", None, None,
                           f"insufficient data: {exc}")
    if not report.windows:
        return CheckResult("input_drift", "insufficient", 0.0, None,
                           f"insufficient data: no logged request of candidate "
                           f"v{cand.version} in the window (is the request log on?)")
    result = report.windows[-1].input.as_check()
    return CheckResult(**result)
