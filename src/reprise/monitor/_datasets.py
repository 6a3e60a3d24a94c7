"""Drift between two dataset versions (``reprise monitor compare churn@3 churn@4``).

The first version is the reference (read twice, a batch at a time: bins, then counts);
the second is the window (read once, a batch at a time). Memory is bounded by a batch
and the summaries, whatever the versions' sizes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reprise.core.errors import UserError
from reprise.monitor._compare import DriftReport, compare
from reprise.monitor._policy import DriftPolicy
from reprise.monitor._reference import Reference, fit_reference
from reprise.monitor._window import Window

__all__ = ["DatasetDrift", "compare_datasets"]

_TABULAR = ("csv", "parquet", "jsonl")


@dataclass
class DatasetDrift:
    reference_ref: str
    window_ref: str
    reference: Reference
    window: Window
    report: DriftReport

    def to_dict(self) -> dict[str, Any]:
        return {"reference": self.reference_ref, "current": self.window_ref,
                **self.report.to_dict()}


def compare_datasets(reference: str, current: str, *, workspace: Any = None,
                     policy: DriftPolicy | None = None, **fit: Any) -> DatasetDrift:
    """Drift of dataset version ``current`` against version ``reference``.

    Args:
        reference: ``NAME@N`` (or ``NAME`` for the newest) whose rows are the reference.
        current: ``NAME@N`` compared with it (any dataset with common columns).
        workspace: The workspace (default: found from the current directory).
        policy: How drift is judged (default :class:`DriftPolicy`).
        **fit: Passed to :func:`fit_reference` (``fine_bins``, ``chunks``...).

    Example:
        >>> compare_datasets("churn@3", "churn@4").report.verdict  # doctest: +SKIP
        'no_drift'
    """
    from reprise.data._dataset import Dataset

    a, b = Dataset(reference, workspace=workspace), Dataset(current, workspace=workspace)
    for d in (a, b):
        if d.record.format not in _TABULAR:
            raise UserError(f"{d.record.ref} is {d.record.format} data; drift is measured "
                            "on tables (CSV, Parquet, JSON Lines).")
    cols_a, cols_b = list(a.record.schema or {}), list(b.record.schema or {})
    if not set(cols_a) & set(cols_b):
        raise UserError(f"{a.record.ref} and {b.record.ref} have no column in common "
                        f"({_names(cols_a)} vs {_names(cols_b)}); compare versions of the "
                        "same table.")
    if policy is not None:
        policy.check_columns([*cols_a, *cols_b], f"{a.record.ref} or {b.record.ref}")
    if not a.record.rows:
        raise UserError(f"{a.record.ref} has no rows; pick a reference version with data.")
    ref = fit_reference(lambda: a.batches(), na_values=a.na_values, **fit)
    window = Window(ref)
    for batch in b.batches():
        window.update(batch)
    return DatasetDrift(a.record.ref, b.record.ref, ref, window,
                        compare(ref, window, policy))


def _names(cols: list[str]) -> str:
    shown = ", ".join(cols[:8])
    return shown + (f" and {len(cols) - 8} more" if len(cols) > 8 else "") if cols else "none"
