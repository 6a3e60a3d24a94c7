"""Server settings: batching, limits, validation policy, token; per-model overrides.

Plain dataclasses with no heavy imports, so ``import reprise.serve`` stays cheap.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from reprise.core.errors import ConfigError, UserError

if TYPE_CHECKING:
    from reprise.serve._policy import Policy

__all__ = ["TOKEN_ENV", "ModelSettings", "ResolvedSettings", "Settings"]

TOKEN_ENV = "REPRISE_SERVE_TOKEN"


@dataclass(frozen=True)
class ModelSettings:
    """Overrides for one model name; ``None`` keeps the server-wide value."""

    max_batch_size: int | None = None
    max_wait_ms: float | None = None
    latency_budget_ms: float | None = None
    extra_columns: str | None = None
    out_of_range: str | None = None


@dataclass(frozen=True)
class ResolvedSettings:
    """The settings one model version runs with (server-wide values, then overrides)."""

    max_batch_size: int
    max_wait_ms: float
    latency_budget_ms: float
    extra_columns: str | None
    out_of_range: str | None


@dataclass(frozen=True)
class Settings:
    """How a server batches, limits and protects its models.

    Attributes:
        max_batch_size: most rows in one ``predict`` call (1: no batching).
        max_wait_ms: longest a batch keeps gathering requests that are arriving while the
            model is idle; a lone request never waits for it.
        latency_budget_ms: a request whose estimated queueing time exceeds this gets 503
            with ``Retry-After`` instead of joining the queue.
        max_body_bytes: larger request bodies get 413 (checked before and while reading).
        extra_columns: ``"reject"`` or ``"ignore"`` unknown columns; ``None``: the model
            signature's own policy.
        out_of_range: ``"flag"`` (serve and count in /metrics) or ``"reject"`` (422) values
            outside the training range or categories; ``None``: the signature's policy.
        token: bearer token required on every endpoint but the health probes; ``None``
            reads ``REPRISE_SERVE_TOKEN`` (empty: no token). Never logged or shown.
        max_header_bytes: a request line and headers larger than this get 431.
        header_timeout: seconds a client has to send a request line and headers (408).
        body_timeout: seconds a client has to send a prediction request's body (408).
        max_connections: open connections beyond this are refused at once (503).
        allowed_hosts: host names the ``Host`` header may carry (against DNS
            rebinding); empty: any. The health probes are exempt.
        allowed_origins: browser origins (``https://app.example``) allowed to call the
            server from a page of another site; other cross-site requests get 403.
        poll_interval: seconds between checks of where each followed alias points, and of
            its rollout (weights, state); the server deciding a rollout analyses it every
            ``min(poll_interval, 1)`` seconds.
        drain_timeout: seconds a shutdown or a retired version waits for queued work.
        key_header: during a rollout that names no key of its own, requests carrying this
            header (its value) always reach the same version; others are drawn at random.
        key_column: instead, the value of this input column in a request's first row.
        shadow_queue: copies of requests waiting for a shadowed candidate; beyond this
            they are dropped and counted, never slowing an answer. Short by default
            (100): a copy that waits seconds in a long queue outlives the collector's
            young generations, and a queue of 1,000 copies always full under load put
            the stable version's p99 at 1.55-1.64x that of the same server without a
            rollout, against 1.10-1.15x with 50-100 (bench_rollout's load, quiet
            machine), still comparing 330-480 copies a second (0.45-0.7x as many).
        server_name: this server's name in the rollouts' outcome buckets and decision
            lease; default ``HOST:PID:RANDOM``.
        request_log: log a sample of answered predictions (inputs, outputs, version,
            latency, request id, time) into the workspace (``_reqlog.py``).
        log_sample: the share of requests logged, 0..1.
        log_cap: at most this many requests logged in any one second.
        log_exclude: input or output columns never logged (PII).
        log_buffer: rows waiting to be written; beyond this, records are dropped and
            counted, never slowing an answer.
        log_flush_rows: write as soon as this many rows wait...
        log_flush_s: ...or every this many seconds.
        log_max_age_days: chunks of the served models older than this are removed
            (checked after a flush, at most every five minutes); ``None``: kept.
        log_max_mb: then the oldest chunks beyond this size per model; ``None``: kept.
        slo_availability: the availability objective of every model without a running
            rollout (a rollout's policy gives its own): the share of requests answered
            without a server error; ``/metrics`` shows its burn rates and alerts.
        slo_latency_ms: the latency objective's threshold (``None``: no latency objective).
        slo_latency_target: the share of requests that must be faster than that.
        otel: export OpenTelemetry spans of prediction requests, configured by the SDK's
            ``OTEL_*`` environment variables (the ``otel`` extra).
        cache_mb: the response cache's bound in MiB (answers of recent rows per model
            version, ``_cache.py``); 0: no cache.
        cache_admit: ``"second"``: once the cache is full (or while the version is
            bypassed), a row is stored the second time it misses (a doorkeeper
            remembers first misses; a row asked once costs no store and evicts
            nothing); while it has room, every miss is stored;
            ``"first"``: every miss is stored.
        cache_min_hit_rate: a version whose rows hit less often than this (over a window
            of 2,048 lookups) has only one request in 64 looked up until they hit again,
            so traffic that never repeats stops paying for the cache; 0: always look up.
        warmup_idle: a served version idle this many seconds gets a warm-up call with its
            package's example rows (then again after each such period while idle), so the
            first request after a quiet hour is not a cold one; 0: never.
        models: per-model-name overrides.

    Example:
        >>> Settings(max_batch_size=32, models={"churn": ModelSettings(max_wait_ms=0)}
        ...          ).for_model("churn").max_wait_ms
        0
    """

    max_batch_size: int = 64
    max_wait_ms: float = 2.0
    latency_budget_ms: float = 1000.0
    max_body_bytes: int = 4 * 1024 * 1024
    extra_columns: str | None = None
    out_of_range: str | None = None
    token: str | None = field(default=None, repr=False)
    max_header_bytes: int = 64 * 1024
    header_timeout: float = 10.0
    body_timeout: float = 60.0
    max_connections: int = 1000
    allowed_hosts: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()
    poll_interval: float = 5.0
    drain_timeout: float = 30.0
    key_header: str | None = "x-request-key"
    key_column: str | None = None
    shadow_queue: int = 100
    server_name: str | None = None
    request_log: bool = True
    log_sample: float = 0.1
    log_cap: int = 100
    log_exclude: tuple[str, ...] = ()
    log_buffer: int = 50_000
    log_flush_rows: int = 10_000
    log_flush_s: float = 10.0
    log_max_age_days: float | None = 30.0
    log_max_mb: float | None = 1024.0
    slo_availability: float = 0.999
    slo_latency_ms: float | None = None
    slo_latency_target: float = 0.99
    otel: bool = False
    cache_mb: float = 0.0
    cache_admit: str = "second"
    cache_min_hit_rate: float = 0.01
    warmup_idle: float = 300.0
    models: Mapping[str, ModelSettings] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_model(self.max_batch_size, self.max_wait_ms, self.latency_budget_ms,
                     self.extra_columns, self.out_of_range, "")
        for name, m in self.models.items():
            _check_model(m.max_batch_size, m.max_wait_ms, m.latency_budget_ms,
                         m.extra_columns, m.out_of_range, f"models[{name!r}].")
        if self.max_body_bytes < 1:
            raise ConfigError(f"max_body_bytes must be 1 or more; got {self.max_body_bytes}")
        _check_http(self)
        _check_rollouts(self)
        _check_request_log(self)
        self.slo_policy()  # checks the objectives as a policy file's slo section is checked
        if not self.cache_mb >= 0 or self.cache_mb > 1024 * 1024:
            raise ConfigError(f"cache_mb must be between 0 (no cache) and 1048576 MiB; "
                              f"got {self.cache_mb}")
        if self.cache_admit not in ("first", "second"):
            raise ConfigError(f"cache_admit must be 'first' (store every miss) or 'second' "
                              f"(once the cache is full, store a row when it misses again); "
                              f"got {self.cache_admit!r}")
        if not 0 <= self.cache_min_hit_rate < 1:
            raise ConfigError(f"cache_min_hit_rate must be at least 0 (always look up) and "
                              f"under 1; got {self.cache_min_hit_rate}")
        if not 0 <= self.warmup_idle < float("inf"):
            raise ConfigError(f"warmup_idle must be a number of seconds, 0 or more "
                              f"(0: no warm-up); got {self.warmup_idle}")
        if self.poll_interval <= 0 or self.drain_timeout < 0:
            raise ConfigError("poll_interval must be positive and drain_timeout not negative; "
                              f"got {self.poll_interval} and {self.drain_timeout}")

    def for_model(self, name: str) -> ResolvedSettings:
        """The settings for model ``name``: its overrides over the server-wide values."""
        base = ResolvedSettings(self.max_batch_size, self.max_wait_ms, self.latency_budget_ms,
                                self.extra_columns, self.out_of_range)
        over = self.models.get(name)
        if over is None:
            return base
        changes = {k: v for k, v in vars(over).items() if v is not None}
        return replace(base, **changes)

    def slo_policy(self) -> Policy:
        """The objectives of models without a running rollout, as a policy."""
        from reprise.serve._policy import load_policy

        try:
            return load_policy({"slo": {"availability": self.slo_availability,
                                        "latency_ms": self.slo_latency_ms,
                                        "latency_target": self.slo_latency_target}},
                               source="the server's SLO settings")
        except UserError as exc:
            raise ConfigError(str(exc)) from None

    def resolved_token(self) -> str | None:
        """The token in force: ``token``, else ``REPRISE_SERVE_TOKEN``; ``None`` when empty."""
        token = self.token if self.token is not None else os.environ.get(TOKEN_ENV, "")
        return token or None


def _check_http(s: Settings) -> None:
    for name in ("max_header_bytes", "max_connections"):
        if getattr(s, name) < 1:
            raise ConfigError(f"{name} must be 1 or more; got {getattr(s, name)}")
    for name in ("header_timeout", "body_timeout"):
        if not getattr(s, name) > 0:
            raise ConfigError(f"{name} must be a positive number of seconds; "
                              f"got {getattr(s, name)}")
    for origin in s.allowed_origins:
        if "://" not in origin or origin.endswith("/"):
            raise ConfigError(f"allowed_origins: {origin!r} is not an origin; write it as "
                              "scheme://host[:port], e.g. https://app.example")
    object.__setattr__(s, "allowed_hosts", tuple(h.lower() for h in s.allowed_hosts))


def _check_rollouts(s: Settings) -> None:
    if s.key_header is not None:
        header = s.key_header.strip().lower()
        if not header or any(c.isspace() or c in '"(),/:;<=>?@[\\]{}' or not c.isprintable()
                             for c in header):
            raise ConfigError(f"key_header: {s.key_header!r} is not an HTTP header name; "
                              "use letters, digits and '-', e.g. x-request-key")
        object.__setattr__(s, "key_header", header)
    if s.key_column is not None and not s.key_column:
        raise ConfigError("key_column must be an input column's name; got an empty string")
    if s.shadow_queue < 1:
        raise ConfigError(f"shadow_queue must be 1 or more; got {s.shadow_queue}")


def _check_request_log(s: Settings) -> None:
    if not 0.0 <= s.log_sample <= 1.0:
        raise ConfigError(f"log_sample must be a share between 0 and 1 (0.1 logs 10 % of "
                          f"requests); got {s.log_sample}")
    for name in ("log_cap", "log_buffer", "log_flush_rows"):
        if getattr(s, name) < 1:
            raise ConfigError(f"{name} must be 1 or more; got {getattr(s, name)}")
    if not s.log_flush_s > 0:
        raise ConfigError(f"log_flush_s must be a positive number of seconds; "
                          f"got {s.log_flush_s}")
    for name in ("log_max_age_days", "log_max_mb"):
        value = getattr(s, name)
        if value is not None and not value > 0:
            raise ConfigError(f"{name} must be positive (or None: no limit); got {value}")
    if any(not c for c in s.log_exclude):
        raise ConfigError("log_exclude names columns; got an empty name")
    object.__setattr__(s, "log_exclude", tuple(s.log_exclude))


def _check_model(batch: int | None, wait: float | None, budget: float | None,
                 extra: str | None, out: str | None, where: str) -> None:
    if batch is not None and batch < 1:
        raise ConfigError(f"{where}max_batch_size must be 1 or more; got {batch}")
    if wait is not None and wait < 0:
        raise ConfigError(f"{where}max_wait_ms must not be negative; got {wait}")
    if budget is not None and budget <= 0:
        raise ConfigError(f"{where}latency_budget_ms must be positive; got {budget}")
    if extra not in (None, "reject", "ignore"):
        raise ConfigError(f"{where}extra_columns must be 'reject' or 'ignore'; got {extra!r}")
    if out not in (None, "flag", "reject"):
        raise ConfigError(f"{where}out_of_range must be 'flag' or 'reject'; got {out!r}")
