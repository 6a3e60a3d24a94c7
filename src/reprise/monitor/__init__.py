"""Layer 6: monitoring — drift statistics over mergeable summaries, and the request log
and feedback.

``fit_reference(data)`` fixes each column's bins on a reference dataset (quantile bins
for numbers, the frequent categories for text) and learns thresholds from its chunks; a
``Window`` summarises current data on those bins batch by batch (windows merge across
batches and processes, and travel as JSON); ``compare(reference, window)`` tests each
column and gives a dataset verdict corrected for testing many columns.
``compare_datasets("churn@3", "churn@4")`` does it for two dataset versions, and
``render_drift_report`` writes the offline HTML report.

``live_report("churn@production", window=1000)`` judges the newest windows of a served
version's request log against the version's reference (``model_reference``: its training
dataset and the model's predictions on a sample of it): input drift, prediction drift,
performance when labels arrived, and the alarms (``_live.py``).
``watch(ref, policy, detector)`` runs the closed loop: alarms -> rollback, retrain,
notify, by a :class:`TriggerPolicy` (``load_trigger_policy("loop.yaml")``); one round is
``watch_once`` (``_loop.py``, ``_triggers.py``).

``read_requests`` / ``iter_requests`` read the request log that ``reprise serve`` writes;
``add_feedback`` joins labels to logged requests by request id, and ``export_labelled``
writes logged inputs with their labels (``_requests.py``).

Nothing heavy is imported here: numpy, pyarrow, scipy and SQLAlchemy load on first use.

Example:
    >>> from reprise.monitor import DriftPolicy
    >>> DriftPolicy().correction
    'holm'
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from reprise.core._lazy import lazy_attributes
from reprise.monitor._policy import DriftPolicy, load_drift_policy

__all__ = ["ColumnDrift", "DriftPolicy", "DriftReport", "ExportReport", "LiveReport",
           "LiveWindow", "ModelReference", "Reference", "Window", "add_feedback",
           "add_feedback_file", "compare", "compare_datasets", "export_labelled",
           "fit_reference", "iter_requests", "list_request_chunks", "live_report",
           "load_drift_policy", "model_reference", "prune_requests", "read_requests",
           "render_drift_report",
           # the closed loop (``_triggers.py``, ``_loop.py``)
           "LoopActions", "TickResult", "TriggerPolicy", "load_trigger_policy", "watch",
           "watch_once"]

_LAZY = {"ColumnDrift": "reprise.monitor._compare", "DriftReport": "reprise.monitor._compare",
         "compare": "reprise.monitor._compare", "Reference": "reprise.monitor._reference",
         "fit_reference": "reprise.monitor._reference", "Window": "reprise.monitor._window",
         "compare_datasets": "reprise.monitor._datasets",
         "render_drift_report": "reprise.monitor._html",
         "LiveReport": "reprise.monitor._live", "LiveWindow": "reprise.monitor._live",
         "live_report": "reprise.monitor._live",
         "ModelReference": "reprise.monitor._model_reference",
         "model_reference": "reprise.monitor._model_reference",
         **{name: "reprise.monitor._requests" for name in (
             "ExportReport", "add_feedback", "add_feedback_file", "export_labelled",
             "iter_requests", "list_request_chunks", "prune_requests", "read_requests")},
         **{name: "reprise.monitor._loop" for name in (
             "LoopActions", "TickResult", "watch", "watch_once")},
         **{name: "reprise.monitor._triggers" for name in (
             "TriggerPolicy", "load_trigger_policy")}}

if TYPE_CHECKING:
    from reprise.monitor._compare import ColumnDrift, DriftReport, compare
    from reprise.monitor._datasets import compare_datasets
    from reprise.monitor._html import render_drift_report
    from reprise.monitor._live import LiveReport, LiveWindow, live_report
    from reprise.monitor._loop import LoopActions, TickResult, watch, watch_once
    from reprise.monitor._model_reference import ModelReference, model_reference
    from reprise.monitor._reference import Reference, fit_reference
    from reprise.monitor._requests import (
        ExportReport,
        add_feedback,
        add_feedback_file,
        export_labelled,
        iter_requests,
        list_request_chunks,
        prune_requests,
        read_requests,
    )
    from reprise.monitor._triggers import TriggerPolicy, load_trigger_policy
    from reprise.monitor._window import Window

__getattr__ = lazy_attributes(__name__, _LAZY)


def __dir__() -> list[str]:
    return sorted(__all__)
