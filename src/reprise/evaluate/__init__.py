"""Layer 4: evaluation. Metrics with confidence intervals (a method per metric with known
coverage), cross-validation
(as parallel, separately cached pipeline steps inside a pipeline), slices, fairness
gaps, quality gates against thresholds or a baseline run, and a self-contained
HTML report.

Nothing heavy is imported here: scikit-learn, plotly and pandas load when a
function needs them.

Example:
    >>> from reprise.evaluate import evaluate
    >>> ev = evaluate(y=[0, 1, 1, 0], y_pred=[0, 1, 0, 0], bootstrap=0)
    >>> ev.value("accuracy")
    0.75
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from reprise.core._lazy import lazy_attributes

_EXPORTS: dict[str, str] = {
    "evaluate": "reprise.evaluate._evaluate",
    "Evaluation": "reprise.evaluate._evaluation",
    "cross_validate": "reprise.evaluate._cv",
    "CVResult": "reprise.evaluate._cv",
    "GateFailedError": "reprise.core.errors",
    "Gate": "reprise.evaluate._gates",
    "parse_gates": "reprise.evaluate._gates",
    "check_gates": "reprise.evaluate._gates",
    "baseline_metrics": "reprise.evaluate._baseline",
    "METRICS": "reprise.evaluate._metrics",
    "MetricInfo": "reprise.evaluate._metrics",
    "bootstrap_intervals": "reprise.evaluate._bootstrap",
    "confidence_intervals": "reprise.evaluate._confidence",
    "render_report": "reprise.evaluate._report",
    "load_report": "reprise.evaluate._artifacts",
    "estimator_spec": "reprise.evaluate._spec",
    "build_estimator": "reprise.evaluate._spec",
}

__all__ = [
    "METRICS",
    "CVResult",
    "Evaluation",
    "Gate",
    "GateFailedError",
    "MetricInfo",
    "baseline_metrics",
    "bootstrap_intervals",
    "build_estimator",
    "check_gates",
    "confidence_intervals",
    "cross_validate",
    "estimator_spec",
    "evaluate",
    "load_report",
    "parse_gates",
    "render_report",
]

if TYPE_CHECKING:
    from reprise.core.errors import GateFailedError
    from reprise.evaluate._artifacts import load_report
    from reprise.evaluate._baseline import baseline_metrics
    from reprise.evaluate._bootstrap import bootstrap_intervals
    from reprise.evaluate._confidence import confidence_intervals
    from reprise.evaluate._cv import CVResult, cross_validate
    from reprise.evaluate._evaluate import evaluate
    from reprise.evaluate._evaluation import Evaluation
    from reprise.evaluate._gates import Gate, check_gates, parse_gates
    from reprise.evaluate._metrics import METRICS, MetricInfo
    from reprise.evaluate._report import render_report
    from reprise.evaluate._spec import build_estimator, estimator_spec


__getattr__ = lazy_attributes(__name__, _EXPORTS)


def __dir__() -> list[str]:
    return sorted(__all__)
