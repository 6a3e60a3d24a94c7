"""The public surface of reprise.monitor is pinned."""

from __future__ import annotations

import reprise.monitor


def test_exported_members() -> None:
    assert sorted(reprise.monitor.__all__) == sorted([
        "ColumnDrift", "DriftPolicy", "DriftReport", "Reference", "Window", "compare",
        "compare_datasets", "fit_reference", "load_drift_policy", "render_drift_report",
        # the request log and feedback (tests/monitor/test_requests.py)
        "ExportReport", "add_feedback", "add_feedback_file", "export_labelled",
        "iter_requests", "list_request_chunks", "prune_requests", "read_requests",
        # live windows of a served model (tests/monitor/test_live.py)
        "LiveReport", "LiveWindow", "ModelReference", "live_report", "model_reference",
        # the closed loop (tests/monitor/test_loop.py)
        "LoopActions", "TickResult", "TriggerPolicy", "load_trigger_policy", "watch",
        "watch_once"])
    for name in reprise.monitor.__all__:
        assert getattr(reprise.monitor, name) is not None
