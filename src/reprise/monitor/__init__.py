"""Layer 6: monitoring — the request log and feedback (``_requests.py``).

Everything loads on first use: ``import reprise.monitor`` imports neither pyarrow nor
SQLAlchemy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from reprise.core._lazy import lazy_attributes

if TYPE_CHECKING:
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

__all__ = [
    "ExportReport",
    "add_feedback",
    "add_feedback_file",
    "export_labelled",
    "iter_requests",
    "list_request_chunks",
    "prune_requests",
    "read_requests",
]

_LAZY = {name: "reprise.monitor._requests" for name in (
    "ExportReport", "add_feedback", "add_feedback_file", "export_labelled", "iter_requests",
    "list_request_chunks", "prune_requests", "read_requests")}

__getattr__ = lazy_attributes(__name__, _LAZY)
