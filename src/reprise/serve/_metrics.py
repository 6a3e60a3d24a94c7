"""Prometheus metrics of one server (its own registry, so servers in one process, as in
tests, do not share counters). Label children are cached: looking one up through
``labels()`` costs more than the increment itself."""

from __future__ import annotations

from bisect import bisect_left
from typing import Any

from reprise.core._rollout_types import LATENCY_BOUNDS_MS

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
        rv = [*mv, "rollout", "role", "mode"]
        self._r_requests = Counter("reprise_rollout_requests", "Answers of each version of a "
                                   "running rollout as its analysis counts them, by role "
                                   "(stable, candidate) and mode (live traffic, or shadow "
                                   "copies).", rv, registry=r)
        self._r_errors = Counter("reprise_rollout_errors", "Of those, the errors (5xx, a "
                                 "model exception, a non-finite output).", rv, registry=r)
        self._r_latency = Histogram("reprise_rollout_request_duration_seconds", "Their "
                                    "latency.", rv, buckets=_LATENCY_BOUNDS_S, registry=r)
        self._warmups = Counter("reprise_warmups", "Warm-up calls of idle model versions "
                                "(not counted as requests), by outcome: ok or failed.",
                                [*mv, "outcome"], registry=r)
        self._children: dict[tuple[Any, ...], Any] = {}
        # (rollout, version, mode) -> (labels, requests, errors, latency children)
        self._rollouts: dict[tuple[str, int, str], tuple[tuple[str, ...], Any, Any, Any]] = {}

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
        event loop counts a batch of hundreds at once)."""
        series = self._rollouts.get((rollout, version, mode))
        if series is None:
            labels = (model, str(version), rollout, role, mode)
            series = self._rollouts[(rollout, version, mode)] = (
                labels, self._r_requests.labels(*labels), self._r_errors.labels(*labels),
                self._r_latency.labels(*labels))
        series[1].inc(n)
        if error:
            series[2].inc(n)
        if n == 1:
            series[3].observe(seconds)
        else:
            _observe_many(series[3], seconds, n)

    def rollout_ended(self, model: str, rollout: str, versions: tuple[str, ...]) -> None:
        """Drop a finished rollout's series (a server runs many rollouts in its life)."""
        for version in versions:
            self._children.pop((id(self._weight), model, version, rollout), None)
            try:
                self._weight.remove(model, version, rollout)
            except KeyError:
                pass
        for key in [k for k in self._rollouts if k[0] == rollout]:
            labels = self._rollouts.pop(key)[0]
            for metric in (self._r_requests, self._r_errors, self._r_latency):
                metric.remove(*labels)

    def warmup(self, model: str, version: str, ok: bool) -> None:
        self._child(self._warmups, model, version, "ok" if ok else "failed").inc()

    def shadow_copy(self, model: str, version: str, outcome: str, n: int = 1) -> None:
        self._child(self._shadow, model, version, outcome).inc(n)

    def render(self) -> tuple[bytes, str]:
        """The text exposition format and its content type."""
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST


def _observe_many(histogram: Any, value: float, n: int) -> None:
    """``n`` observations of ``value`` in a histogram child at once: its sum grows by
    ``n * value`` and the bucket of ``value`` by ``n``, as ``n`` calls of ``observe`` would
    leave them (prometheus_client's child keeps cumulative counts only at exposition)."""
    bounds, buckets, total = (getattr(histogram, a, None)
                              for a in ("_upper_bounds", "_buckets", "_sum"))
    if bounds is None or buckets is None or total is None or n < 1:
        for _ in range(max(0, n)):  # another prometheus_client: the plain way
            histogram.observe(value)
        return
    total.inc(value * n)
    buckets[bisect_left(bounds, value)].inc(n)
