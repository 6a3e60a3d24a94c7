"""The public surface of ``reprise.evaluate`` is pinned."""

from __future__ import annotations

import reprise.evaluate


def test_exported_members() -> None:
    assert reprise.evaluate.__all__ == [
        "METRICS", "CVResult", "Evaluation", "Gate", "GateFailedError", "MetricInfo",
        "baseline_metrics", "bootstrap_intervals", "build_estimator", "check_gates",
        "confidence_intervals", "cross_validate", "estimator_spec", "evaluate", "load_report",
        "parse_gates", "render_report"]
    for name in reprise.evaluate.__all__:
        assert getattr(reprise.evaluate, name) is not None
    assert issubclass(reprise.evaluate.GateFailedError, reprise.errors.UserError)
