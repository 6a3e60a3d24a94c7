"""``metric_key_stats`` on both metadata backends: the SQL store's counts in the database
agree with the default that reads every point, steps logged out of order included."""

from __future__ import annotations

from pathlib import Path

import pytest

import reprise
from reprise.store._metadata_base import BaseMetadataStore


def test_metric_key_stats_count_in_the_database(tmp_path: Path, store_url: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REPRISE_STORE_URL", store_url)
    ws = reprise.init(tmp_path)
    try:
        with reprise.start_run("r", workspace=ws) as run:
            for step in (5, 2, 9, 2):  # a step logged twice, out of order
                run.log_metric("loss", 1.0 / step, step=step)
            run.log_metric("val/loss", float("nan"), step=3)
            run.log_metric("once", 1.0)
        with reprise.start_run("other", workspace=ws) as other:
            other.log_metric("loss", 1.0, step=100)
        store = ws.metadata
        stats = store.metric_key_stats(run.id)
        assert stats == {"loss": (4, 2, 9), "val/loss": (1, 3, 3), "once": (1, 0, 0)}
        assert BaseMetadataStore.metric_key_stats(store, run.id) == stats
        assert store.metric_key_stats("0123456789abcdef") == {}
    finally:
        ws.close()
