"""The result of :func:`reprise.evaluate.evaluate`: a JSON-able ``dict``.

``Evaluation`` subclasses ``dict`` so that a step can return it and Reprise's
JSON materializer stores it as is (canonical JSON: the same evaluation always
has the same bytes and hash). Loading a stored one gives a plain dict back;
:meth:`Evaluation.from_dict` wraps it again.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from reprise.core.errors import UserError

__all__ = ["FORMAT_VERSION", "Evaluation"]

FORMAT_VERSION = 1
_REQUIRED = ("task", "n", "metrics")


class Evaluation(dict[str, Any]):
    """Metrics with confidence intervals, per-class results, confusion matrix, curves,
    slices, fairness and gate results of one evaluation.

    Keys: ``version``, ``task`` (binary/multiclass/regression), ``n``, ``labels``,
    ``positive_label``, ``metrics`` (``{name: {"value", "ci_low", "ci_high",
    "ci_method"}}``, plus ``"resamples"`` where the interval is bootstrapped),
    ``sample_weight`` (``{"total", "effective_rows"}`` or None), ``bootstrap``,
    ``per_class``, ``confusion_matrix``, ``curves``, ``slices``, ``worst_slice``,
    ``fairness``, ``gates``, ``baseline``.

    Example:
        >>> ev = Evaluation.from_dict({"task": "binary", "n": 2,
        ...                            "metrics": {"f1": {"value": 0.5}}})
        >>> ev.value("f1"), ev.passed
        (0.5, None)
    """

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Evaluation:
        """Wrap a stored evaluation (a plain dict, e.g. a step output loaded back)."""
        if not isinstance(data, Mapping) or any(k not in data for k in _REQUIRED):
            raise UserError("this is not an evaluation: it needs the keys "
                            f"{', '.join(_REQUIRED)} (as returned by reprise.evaluate.evaluate).")
        return cls(data)

    @property
    def task(self) -> str:
        return str(self["task"])

    @property
    def metrics(self) -> dict[str, dict[str, Any]]:
        return dict(self["metrics"])

    @property
    def passed(self) -> bool | None:
        """True/False when gates were checked, None when there were none."""
        gates = self.get("gates")
        return None if not gates else bool(gates["passed"])

    def value(self, name: str) -> float | None:
        """The point estimate of metric ``name`` (None when undefined)."""
        if name not in self["metrics"]:
            raise KeyError(f"no metric {name!r}; this evaluation has {sorted(self['metrics'])}")
        found = self["metrics"][name].get("value")
        return None if found is None else float(found)

    def gate_values(self) -> dict[str, float | None]:
        """Every value a gate can check: metrics, interval bounds, worst slices, fairness."""
        out: dict[str, float | None] = {}
        for name, m in self["metrics"].items():
            out[name] = m.get("value")
            out[f"{name}.ci_low"], out[f"{name}.ci_high"] = m.get("ci_low"), m.get("ci_high")
        for name, worst in (self.get("worst_slice") or {}).items():
            out[f"worst_slice.{name}"] = worst["value"]
        fair = self.get("fairness") or {}
        for key in ("demographic_parity_difference", "equal_opportunity_difference"):
            if fair:
                out[f"fairness.{key}"] = fair.get(key)
                interval = (fair.get("intervals") or {}).get(key) or {}
                out[f"fairness.{key}.ci_low"] = interval.get("ci_low")
                out[f"fairness.{key}.ci_high"] = interval.get("ci_high")
        return out

    def headline(self) -> dict[str, float]:
        """The flat metrics logged to the run (defined values only), ``gates.passed`` as 1/0."""
        out = {k: float(v) for k, v in self.gate_values().items() if v is not None}
        if self.passed is not None:
            out["gates.passed"] = 1.0 if self.passed else 0.0
        return out

    def to_html(self, history: Mapping[str, Any] | None = None) -> bytes:
        """The self-contained HTML report (see :func:`reprise.evaluate.render_report`)."""
        from reprise.evaluate._report import render_report

        return render_report(self, history=history)

    def save_html(self, path: str | os.PathLike[str]) -> Path:
        """Write the HTML report to ``path`` atomically; return the path."""
        from reprise.core._atomic import atomic_write_bytes

        atomic_write_bytes(path, self.to_html())
        return Path(path)

    def __repr__(self) -> str:
        shown = {k: m.get("value") for k, m in list(self["metrics"].items())[:6]}
        gates = "" if self.passed is None else f", gates {'passed' if self.passed else 'FAILED'}"
        return f"<Evaluation {self['task']} n={self['n']} {shown}{gates}>"
