"""Quality gates: declarative thresholds on an evaluation's metrics.

A gate maps a metric name to a rule::

    {"f1": ">= 0.90", "worst_slice.f1": ">= 0.80", "log_loss": "<= 0.3",
     "roc_auc": "no worse than baseline by 0.01"}

Rules are ``>= X``, ``> X``, ``<= X``, ``< X`` and ``no worse than baseline
[by MARGIN]``. "No worse" follows the metric's direction: for a
higher-is-better metric the value may fall at most MARGIN below the baseline's,
for a lower-is-better one (log loss, MAE, RMSE, Brier, calibration error, MAPE,
fairness gaps) rise at most MARGIN above it. Gates are parsed before anything
is computed, so a typo costs nothing.

A metric that is undefined on the evaluated rows (F1 or recall with no positive
row, precision with no positive prediction, ROC AUC with one class, a worst
slice when every large enough slice is undefined, a fairness gap with fewer than
two groups to compare) **fails** its gate, and the failure says "undefined":
a gate vouches for a value, and there is none to vouch for.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reprise.core.errors import UserError
from reprise.evaluate._metrics import METRICS

__all__ = ["Gate", "check_gates", "failure_message", "gate_names", "metric_direction",
           "parse_gates"]

_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_THRESHOLD = re.compile(rf"^\s*(>=|<=|>|<)\s*({_NUMBER})\s*$")
_BASELINE = re.compile(rf"^\s*no\s+worse\s+than\s+baseline(?:\s+by\s+({_NUMBER}))?\s*$",
                       re.IGNORECASE)
_OPERATORS = (">=", ">", "<=", "<")
SLICE_METRICS = ("accuracy", "balanced_accuracy", "precision", "recall", "f1", "roc_auc",
                 "mae", "rmse", "r2", "mape")
FAIRNESS = ("demographic_parity_difference", "equal_opportunity_difference")


def gate_names() -> list[str]:
    """Every metric name a gate may use."""
    return [*METRICS, *(f"{m}.ci_low" for m in METRICS), *(f"{m}.ci_high" for m in METRICS),
            *(f"worst_slice.{m}" for m in SLICE_METRICS),
            *(f"fairness.{f}{b}" for f in FAIRNESS for b in ("", ".ci_low", ".ci_high"))]


def metric_direction(name: str) -> bool:
    """True when higher values of gate metric ``name`` are better."""
    if name.startswith("fairness."):
        return False  # a gap between groups: smaller is fairer
    base = name.removeprefix("worst_slice.").removesuffix(".ci_low").removesuffix(".ci_high")
    return METRICS[base].higher_is_better


@dataclass(frozen=True)
class Gate:
    """One parsed gate. ``op`` is one of ``>= > <= <`` or ``"baseline"``; ``value`` is the
    threshold, or the margin of a baseline comparison."""

    metric: str
    op: str
    value: float

    @property
    def text(self) -> str:
        """The rule in canonical form; :func:`parse_gates` reads it back to an equal gate."""
        if self.op == "baseline":
            return "no worse than baseline" + (f" by {self.value!r}" if self.value else "")
        return f"{self.op} {self.value!r}"

    @property
    def higher_is_better(self) -> bool:
        return metric_direction(self.metric)

    def threshold(self, baseline: float | None) -> float:
        """The value the metric is compared with (baseline comparisons: baseline -/+ margin)."""
        if self.op != "baseline":
            return self.value
        assert baseline is not None
        return baseline - self.value if self.higher_is_better else baseline + self.value

    def passes(self, actual: float, baseline: float | None = None) -> bool:
        limit = self.threshold(baseline)
        if self.op == "baseline":
            return actual >= limit if self.higher_is_better else actual <= limit
        return {">=": actual >= limit, ">": actual > limit, "<=": actual <= limit,
                "<": actual < limit}[self.op]


def parse_gates(gates: Mapping[str, str] | None) -> list[Gate]:
    """Parse ``{metric: rule}``; a ``UserError`` names the first bad entry and the fix.

    Example:
        >>> [g.text for g in parse_gates({"f1": ">= 0.9", "mae": "no worse than baseline"})]
        ['>= 0.9', 'no worse than baseline']
    """
    if gates is None:
        return []
    if not isinstance(gates, Mapping):
        raise UserError(f"gates must be a dict of {{metric: rule}}, e.g. {{'f1': '>= 0.9'}}; got "
                        f"a {type(gates).__name__}.")
    known = gate_names()
    return [_parse_one(metric, rule, known) for metric, rule in gates.items()]


def _parse_one(metric: Any, rule: Any, known: Sequence[str]) -> Gate:
    if not isinstance(metric, str) or metric not in known:
        raise UserError(
            f"gate on unknown metric {metric!r}; known metrics are {', '.join(METRICS)}; "
            f"also <metric>.ci_low and <metric>.ci_high, worst_slice.<{'|'.join(SLICE_METRICS)}>"
            f", and {', '.join(f'fairness.{f}' for f in FAIRNESS)} (also with .ci_low or "
            ".ci_high).")
    if not isinstance(rule, str):
        raise UserError(f"gate {metric!r}: the rule must be a string such as '>= 0.9' or "
                        f"'no worse than baseline by 0.01'; got {rule!r}.")
    match = _THRESHOLD.match(rule)
    if match:
        return Gate(metric, match.group(1), _number(metric, match.group(2)))
    match = _BASELINE.match(rule)
    if match:
        margin = _number(metric, match.group(1)) if match.group(1) else 0.0
        if margin < 0:
            raise UserError(f"gate {metric!r}: the margin must be >= 0, got {margin!r}.")
        return Gate(metric, "baseline", margin)
    forms = ", ".join(f"'{op} X'" for op in _OPERATORS)
    raise UserError(f"gate {metric!r}: cannot read rule {rule!r}; write one of {forms} "
                    "(X a number) or 'no worse than baseline [by X]'.")


def _number(metric: str, text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise UserError(f"gate {metric!r}: {text!r} is not a finite number.")
    return value


def check_gates(gates: Sequence[Gate], actual: Mapping[str, float | None],
                baseline: Mapping[str, float] | None = None) -> list[dict[str, Any]]:
    """Each gate's outcome: rule, threshold, actual value, passed, and ``by`` how much it
    missed (None when it passed). An undefined (None) actual value fails its gate, with
    ``by`` None."""
    results = []
    for gate in gates:
        base = None if baseline is None or gate.op != "baseline" else baseline[gate.metric]
        limit = gate.threshold(base)
        value = actual.get(gate.metric)
        passed = value is not None and gate.passes(value, base)
        results.append({"metric": gate.metric, "rule": gate.text, "threshold": limit,
                        "baseline": base, "actual": value, "passed": passed,
                        "by": None if passed or value is None else abs(value - limit)})
    return results


def _cell(value: float | None) -> str:
    return "undefined" if value is None else f"{value:.4f}"


def failure_message(results: Sequence[Mapping[str, Any]]) -> str:
    """The message of ``GateFailedError``: a table of the gates that failed and the fix."""
    failed = [r for r in results if not r["passed"]]
    rows = [("gate", "threshold", "actual", "failed by")]
    rows += [(f"{r['metric']} {r['rule']}", _cell(r["threshold"]), _cell(r["actual"]),
              _cell(r["by"])) for r in failed]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = ["  " + "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                              for i, (c, w) in enumerate(zip(row, widths, strict=True)))
             for row in rows]
    undefined = [r["metric"] for r in failed if r["actual"] is None]
    why = ("" if not undefined else
           f"\n{', '.join(undefined)} {'is' if len(undefined) == 1 else 'are'} undefined on "
           "these rows, and an undefined value fails its gate (e.g. F1 or recall with no "
           "positive row, precision with no positive prediction, ROC AUC with one class, a "
           "worst slice when every slice large enough is undefined, a fairness gap with "
           "fewer than two groups large enough). Evaluate on rows where it is defined, or "
           "gate on another metric.")
    return (f"{len(failed)} of {len(results)} quality gate(s) failed:\n" + "\n".join(lines)
            + why
            + "\nImprove the model or the data, or change the gates; the evaluation report "
              "(`reprise report RUN`) shows per-class and per-slice results.")
