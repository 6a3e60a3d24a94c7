"""Layer 6: monitoring — drift statistics over mergeable summaries.

``fit_reference(data)`` fixes each column's bins on a reference dataset (quantile bins
for numbers, the frequent categories for text) and learns thresholds from its chunks; a
``Window`` summarises current data on those bins batch by batch (windows merge across
batches and processes, and travel as JSON); ``compare(reference, window)`` tests each
column and gives a dataset verdict corrected for testing many columns.
``compare_datasets("churn@3", "churn@4")`` does it for two dataset versions, and
``render_drift_report`` writes the offline HTML report.

Nothing heavy is imported here: numpy, pyarrow and scipy load on first use.

Example:
    >>> from reprise.monitor import DriftPolicy
    >>> DriftPolicy().correction
    'holm'
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from reprise.core._lazy import lazy_attributes
from reprise.monitor._policy import DriftPolicy, load_drift_policy

__all__ = ["ColumnDrift", "DriftPolicy", "DriftReport", "Reference", "Window", "compare",
           "compare_datasets", "fit_reference", "load_drift_policy", "render_drift_report"]

_LAZY = {"ColumnDrift": "reprise.monitor._compare", "DriftReport": "reprise.monitor._compare",
         "compare": "reprise.monitor._compare", "Reference": "reprise.monitor._reference",
         "fit_reference": "reprise.monitor._reference", "Window": "reprise.monitor._window",
         "compare_datasets": "reprise.monitor._datasets",
         "render_drift_report": "reprise.monitor._html"}

if TYPE_CHECKING:
    from reprise.monitor._compare import ColumnDrift, DriftReport, compare
    from reprise.monitor._datasets import compare_datasets
    from reprise.monitor._html import render_drift_report
    from reprise.monitor._reference import Reference, fit_reference
    from reprise.monitor._window import Window

__getattr__ = lazy_attributes(__name__, _LAZY)


def __dir__() -> list[str]:
    return sorted(__all__)
