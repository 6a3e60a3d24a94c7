"""Drift gauges in ``/metrics``, read from the window summaries the monitor stores.

``reprise monitor`` (and the trigger loop) compute live windows and store each one's
summary in the metadata store (``monitor_windows``); a server exports the newest window
of every version of the models it serves, without importing ``reprise.monitor`` (the two
are siblings): the records are read through ``reprise.store``. Reading happens when
``/metrics`` is scraped, at most once per ``ttl`` seconds (cached in between), and a
store that cannot be read leaves the gauges out rather than failing the scrape.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from reprise.core._monitor_types import WindowRecord

__all__ = ["DriftCollector"]

_logger = logging.getLogger("reprise.serve")
_ALARMS = {"input_drift": "input_verdict", "prediction_drift": "prediction_verdict",
           "performance": "performance_verdict"}
_ALARMING = {"drift", "degraded"}


class DriftCollector:
    """A Prometheus collector over the newest stored window of each served model."""

    def __init__(self, workspace: Any, names: Callable[[], Iterable[str]],
                 clock: Callable[[], float], ttl: float = 5.0) -> None:
        self.workspace, self.names, self.clock, self.ttl = workspace, names, clock, ttl
        self._lock = threading.Lock()
        self._cached: tuple[float, list[WindowRecord]] | None = None

    def records(self) -> list[WindowRecord]:
        now = self.clock()
        with self._lock:
            if self._cached is not None and now - self._cached[0] < self.ttl:
                return self._cached[1]
        try:
            found = list(self.workspace.metadata.latest_monitor_windows())
        except Exception as exc:  # the scrape goes on without the drift gauges
            _logger.warning("drift gauges: cannot read the monitor windows: %s", exc)
            found = []
        with self._lock:
            self._cached = (now, found)
        return found

    def describe(self) -> Iterator[Any]:
        yield from self._families()

    def collect(self) -> Iterator[Any]:
        families = self._families()
        stat, p_value, alarm, rows, end = families
        served = set(self.names())
        for rec in self.records():
            if rec.name not in served:
                continue
            mv = [rec.name, str(rec.version)]
            rows.add_metric(mv, float(rec.rows))
            end.add_metric(mv, rec.end)
            for kind, attr in _ALARMS.items():
                alarm.add_metric([*mv, kind], 1.0 if getattr(rec, attr) in _ALARMING else 0.0)
            for part in ("input", "prediction"):
                for col in (rec.summary.get(part) or {}).get("columns") or []:
                    labels = [*mv, part, str(col.get("column"))]
                    if isinstance(col.get("statistic"), int | float):
                        stat.add_metric([*labels, str(col.get("method"))],
                                        float(col["statistic"]))
                    if isinstance(col.get("p_adjusted"), int | float):
                        p_value.add_metric(labels, float(col["p_adjusted"]))
        yield from families

    @staticmethod
    def _families() -> tuple[Any, ...]:
        from prometheus_client.core import GaugeMetricFamily

        mv = ["model", "version"]
        return (
            GaugeMetricFamily("reprise_drift_statistic", "The drift statistic of each "
                              "column in the newest monitored window (ks, chi2, "
                              "wasserstein in reference std, js), by part (input or "
                              "prediction).", labels=[*mv, "part", "column", "method"]),
            GaugeMetricFamily("reprise_drift_p_value", "Its p-value after the "
                              "multiple-testing correction (absent where the test has "
                              "none).", labels=[*mv, "part", "column"]),
            GaugeMetricFamily("reprise_drift_alarm", "1 while the newest monitored window "
                              "raised an alarm of that kind (input_drift, prediction_drift, "
                              "performance).", labels=[*mv, "kind"]),
            GaugeMetricFamily("reprise_drift_window_rows", "Rows of the newest monitored "
                              "window.", labels=mv),
            GaugeMetricFamily("reprise_drift_window_end_seconds", "Time (Unix seconds) of "
                              "the last request in the newest monitored window.", labels=mv),
        )
