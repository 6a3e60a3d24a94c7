"""Prometheus metrics of one server (its own registry, so servers in one process, as in
tests, do not share counters). Label children are cached: looking one up through
``labels()`` costs more than the increment itself.

A running rollout's per-version series (every answer of both versions counts there) are
plain sums kept on the event loop and read by a collector when ``/metrics`` is scraped
(also on the loop): a prometheus_client child takes a lock per increment, and a counter
and a histogram cost two or three of them per answer on the request path."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import accumulate
from typing import Any

from reprise.core._rollout_types import LATENCY_BOUNDS_MS, latency_index

__all__ = ["Metrics"]

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                    2.5, 5.0)
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
# the rollout series use the analysis' own latency bounds, so both show the same quantiles
_LATENCY_BOUNDS_S = tuple(ms / 1000 for ms in LATENCY_BOUNDS_MS)
UNKNOWN = "_unknown"  # the model label of requests for names this server does not serve


class Metrics:
    """Requests, errors, latency, batch sizes, queue depth, out-of-range and non-finite
    values."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry(auto_describe=True)
        r, mv = self.registry, ["model", "version"]
        self._requests = Counter("reprise_requests", "Prediction requests answered, by "
                                 "model, version and HTTP status code.", [*mv, "code"],
                                 registry=r)
        self._errors = Counter("reprise_request_errors", "Prediction requests answered "
                               "with an error, by kind.", [*mv, "kind"], registry=r)
        self._latency = Histogram("reprise_request_duration_seconds", "Time from the "
                                  "request to its answer.", mv, buckets=_LATENCY_BUCKETS,
                                  registry=r)
        self._batch = Histogram("reprise_batch_size_rows", "Rows per predict call.", mv,
                                buckets=_BATCH_BUCKETS, registry=r)
        self._predict = Histogram("reprise_predict_duration_seconds", "Time of one "
                                  "predict call (a whole batch).", mv,
                                  buckets=_LATENCY_BUCKETS, registry=r)
        self._queue = Gauge("reprise_queue_depth", "Requests waiting for their batch.", mv,
                            registry=r)
        self._out = Counter("reprise_out_of_range_values", "Values outside the training "
                            "range or categories, by input field.", [*mv, "field"],
                            registry=r)
        self._non_finite = Counter("reprise_non_finite_values", "Requests refused (422) "
                                   "for a NaN or infinite input (as the model converts "
                                   "it) or output, by where and field.",
                                   [*mv, "where", "field"], registry=r)
        self._served = Gauge("reprise_model_served", "1 for each model version this "
                             "server answers with.", mv, registry=r)
        self._weight = Gauge("reprise_rollout_weight", "Share of a followed alias's live "
                             "traffic (percent) each version of a running rollout gets.",
                             [*mv, "rollout"], registry=r)
        self._shadow = Counter("reprise_shadow_copies", "Requests copied to a shadowed "
                               "candidate, by outcome: compared, agreed, failed, or dropped "
                               "(the shadow queue was full or the candidate shed it).",
                               [*mv, "outcome"], registry=r)
        # (rollout, version, mode) -> its series' sums
        self._rollouts: dict[tuple[str, int, str], _RolloutSeries] = {}
        r.register(_RolloutCollector(self._rollouts))
        self._warmups = Counter("reprise_warmups", "Warm-up calls of idle model versions "
                                "(not counted as requests), by outcome: ok or failed.",
                                [*mv, "outcome"], registry=r)
        self._children: dict[tuple[Any, ...], Any] = {}

    def _child(self, metric: Any, *labels: str) -> Any:
        key = (id(metric), *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def request(self, model: str, version: str, code: int, seconds: float,
                error_kind: str | None = None) -> None:
        """Count one answered request and its latency."""
        self._child(self._requests, model, version, str(code)).inc()
        self._child(self._latency, model, version).observe(seconds)
        if error_kind is not None:
            self._child(self._errors, model, version, error_kind).inc()

    def batch(self, model: str, version: str, rows: int, seconds: float) -> None:
        self._child(self._batch, model, version).observe(rows)
        self._child(self._predict, model, version).observe(seconds)

    def queue_depth(self, model: str, version: str, depth: int) -> None:
        self._child(self._queue, model, version).set(depth)

    def out_of_range(self, model: str, version: str, counts: dict[str, int]) -> None:
        for field, n in counts.items():
            self._child(self._out, model, version, field).inc(n)

    def non_finite(self, model: str, version: str, where: str, field: str) -> None:
        """Count a request refused for a non-finite ``where`` ("input" or "output")."""
        self._child(self._non_finite, model, version, where, field).inc()

    def served(self, model: str, version: str, serving: bool) -> None:
        self._child(self._served, model, version).set(1 if serving else 0)

    def rollout_weight(self, model: str, version: str, rollout: str, weight: float) -> None:
        """The share (percent) of live traffic ``version`` gets in ``rollout``."""
        self._child(self._weight, model, version, rollout).set(weight)

    def rollout_request(self, rollout: str, model: str, version: int, role: str, mode: str,
                        *, error: bool, seconds: float, n: int = 1) -> None:
        """Count one answer of ``version`` in ``rollout`` (``mode``: live or shadow), or
        ``n`` alike (a shadow's batch of copies: one call, not one per copy, so that the
        event loop counts a batch of hundreds at once). Call on the event loop."""
        series = self.rollout_series(rollout, model, version, role, mode)
        series.requests += n
        if error:
            series.errors += n
        series.seconds += seconds * n
        series.buckets[latency_index(seconds * 1000)] += n  # as the outcome rows count

    def rollout_series(self, rollout: str, model: str, version: int, role: str,
                       mode: str) -> _RolloutSeries:
        """The series of ``version``'s answers in ``rollout`` and ``mode``, created on first
        use, for a caller on the event loop that counts into it itself (``Split.record``:
        its bucket index is the outcome row's, over the same bounds)."""
        series = self._rollouts.get((rollout, version, mode))
        if series is None:
            series = self._rollouts[(rollout, version, mode)] = _RolloutSeries(
                (model, str(version), rollout, role, mode))
        return series

    def rollout_ended(self, model: str, rollout: str, versions: tuple[str, ...]) -> None:
        """Drop a finished rollout's series (a server runs many rollouts in its life)."""
        for version in versions:
            self._children.pop((id(self._weight), model, version, rollout), None)
            try:
                self._weight.remove(model, version, rollout)
            except KeyError:
                pass
        for key in [k for k in self._rollouts if k[0] == rollout]:
            del self._rollouts[key]

    def warmup(self, model: str, version: str, ok: bool) -> None:
        self._child(self._warmups, model, version, "ok" if ok else "failed").inc()

    def shadow_copy(self, model: str, version: str, outcome: str, n: int = 1) -> None:
        self._child(self._shadow, model, version, outcome).inc(n)

    def render(self) -> tuple[bytes, str]:
        """The text exposition format and its content type."""
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class _RolloutSeries:
    """One version's answers in one rollout and mode: counts, errors, the latency
    histogram's sum and per-bucket counts (``_LATENCY_BOUNDS_S``, then above them)."""

    __slots__ = ("buckets", "errors", "labels", "requests", "seconds")

    def __init__(self, labels: tuple[str, ...]) -> None:
        self.labels = labels
        self.requests = self.errors = 0
        self.seconds = 0.0
        self.buckets = [0] * (len(_LATENCY_BOUNDS_S) + 1)


_ROLLOUT_LABELS = ["model", "version", "rollout", "role", "mode"]


class _RolloutCollector:
    """The rollout series as prometheus_client reads them: ``reprise_rollout_requests``,
    ``reprise_rollout_errors`` (counters) and ``reprise_rollout_request_duration_seconds``
    (a histogram), labelled model, version, rollout, role (stable, candidate) and mode
    (live traffic, or shadow copies)."""

    def __init__(self, series: dict[tuple[str, int, str], _RolloutSeries]) -> None:
        from prometheus_client.utils import floatToGoString

        go: Callable[[float], str] = floatToGoString  # (as a Histogram writes its bounds)
        self._series = series
        self._le = (*map(go, _LATENCY_BOUNDS_S), "+Inf")

    def _families(self) -> tuple[Any, Any, Any]:
        from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

        return (CounterMetricFamily("reprise_rollout_requests", "Answers of each version "
                                    "of a running rollout as its analysis counts them, by "
                                    "role (stable, candidate) and mode (live traffic, or "
                                    "shadow copies).", labels=_ROLLOUT_LABELS),
                CounterMetricFamily("reprise_rollout_errors", "Of those, the errors (5xx, "
                                    "a model exception, a non-finite output).",
                                    labels=_ROLLOUT_LABELS),
                HistogramMetricFamily("reprise_rollout_request_duration_seconds",
                                      "Their latency.", labels=_ROLLOUT_LABELS))

    def describe(self) -> Iterator[Any]:
        yield from self._families()

    def collect(self) -> Iterator[Any]:
        requests, errors, latency = self._families()
        for s in list(self._series.values()):
            labels = list(s.labels)
            requests.add_metric(labels, s.requests)
            errors.add_metric(labels, s.errors)
            latency.add_metric(labels, list(zip(self._le, accumulate(s.buckets), strict=True)),
                               s.seconds)
        yield requests
        yield errors
        yield latency
