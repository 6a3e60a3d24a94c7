"""Rollouts (canary, shadow, blue-green deployments) as the metadata store keeps them.

Plain records, standard library only: the store persists them, the serving layer
routes and decides with them. A :class:`RolloutRecord` is one rollout of a model alias
from its *stable* version to a *candidate*; a :class:`BucketRow` is what one server saw
of one version during one time bucket. Buckets add up: counts, the latency histogram
(fixed bounds, :data:`LATENCY_BOUNDS_MS`) and the output distribution of any set of
rows, servers or buckets combine by addition, so a window is the sum of its buckets.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["LATENCY_BOUNDS_MS", "ROLLOUT_STATES", "STRATEGIES", "BucketRow", "RolloutRecord",
           "bucket_of", "bucket_seconds", "empty_bucket", "latency_index"]

STRATEGIES = ("canary", "shadow", "blue-green")
ROLLOUT_STATES = ("running", "promoted", "rolled_back", "aborted")

# Upper bounds (milliseconds, inclusive) of the latency histogram's buckets; one more
# bucket counts everything above the last bound. Log-spaced so that a ratio of two
# latencies is resolved about equally well from 1 ms to 10 s.
LATENCY_BOUNDS_MS = (1, 2, 3, 5, 7, 10, 15, 20, 30, 50, 70, 100, 150, 200, 300, 500, 700,
                     1000, 1500, 2000, 3000, 5000, 10000)


@dataclass
class RolloutRecord:
    """One rollout of ``name@alias`` from version ``stable`` to ``candidate``."""

    id: str
    name: str
    alias: str
    stable: int
    candidate: int
    strategy: str
    """``canary``, ``shadow`` or ``blue-green`` (:data:`STRATEGIES`)."""
    steps: list[int]
    """The candidate's weights in percent, step by step (canary), e.g. ``[5, 25, 50, 100]``."""
    interval_s: float
    """The least time between two analyses (and a step's least duration)."""
    policy: dict[str, Any]
    """The resolved policy (every default filled in), as JSON."""
    key: dict[str, str]
    """What makes routing sticky: ``{"header": "x-request-key"}``, ``{"column": "id"}`` or
    ``{}`` (a random draw per request)."""
    state: str
    """``running``, ``promoted``, ``rolled_back`` or ``aborted`` (:data:`ROLLOUT_STATES`)."""
    step: int
    """Index into ``steps`` (canary)."""
    weight: float
    """The candidate's share of live traffic now, 0..100."""
    phase: str
    """canary: ``steps``; shadow: ``shadow``; blue-green: ``shadow``, ``live``, ``hold``."""
    step_started_at: float
    """When the current step (or phase) began: the candidate's analysis window starts here."""
    created_at: float
    ended_at: float | None
    failures: int
    """Failed analyses in a row (rollback at the policy's ``threshold``)."""
    decisions: int
    """Decisions applied so far: the compare-and-set token of the next one."""
    reason: str | None
    actor: str
    analyzed_at: float | None = None
    """When the last analysis was decided (a hold); the next one is due an interval later."""

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.alias}"

    @property
    def running(self) -> bool:
        return self.state == "running"

    def due_at(self) -> float:
        """When the next analysis may decide: an interval after the step began or the
        last decision, whichever is later."""
        return max(self.step_started_at, self.analyzed_at or 0.0) + self.interval_s

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class BucketRow:
    """One server's outcomes for one version during one bucket (``floor(t / bucket_s)``)."""

    rollout_id: str
    version: int
    bucket: int
    server: str
    requests: int
    errors: int
    """5xx answers and model exceptions (not the client's 4xx)."""
    latency: list[int]
    """Counts per latency bucket: ``len(LATENCY_BOUNDS_MS) + 1`` (the last: above them)."""
    outputs: dict[str, int]
    """Class label -> count, or ``"bin:<i>"`` -> count for scores and regression."""
    shadow_compared: int = 0
    shadow_agreed: int = 0
    shadow_dropped: int = 0

    @property
    def key(self) -> tuple[str, int, int, str]:
        return self.rollout_id, self.version, self.bucket, self.server

    def merge(self, other: BucketRow) -> BucketRow:
        """The sum of two rows of the same key (what an additive upsert stores)."""
        latency = [a + b for a, b in zip(_padded(self.latency), _padded(other.latency),
                                         strict=True)]
        outputs = dict(self.outputs)
        for k, n in other.outputs.items():
            outputs[k] = outputs.get(k, 0) + n
        return BucketRow(self.rollout_id, self.version, self.bucket, self.server,
                         self.requests + other.requests, self.errors + other.errors, latency,
                         outputs, self.shadow_compared + other.shadow_compared,
                         self.shadow_agreed + other.shadow_agreed,
                         self.shadow_dropped + other.shadow_dropped)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _padded(counts: list[int]) -> list[int]:
    n = len(LATENCY_BOUNDS_MS) + 1
    if len(counts) > n:
        raise ValueError(f"a latency histogram has {n} buckets; got {len(counts)}")
    return list(counts) + [0] * (n - len(counts))


def latency_index(ms: float) -> int:
    """The latency bucket of ``ms`` milliseconds (the last index: above every bound)."""
    return bisect.bisect_left(LATENCY_BOUNDS_MS, ms)


def bucket_seconds(interval_s: float) -> float:
    """The bucket length of a rollout with this analysis interval: short enough that a
    window holds several (and a decision sees data at most a bucket old), never above 5 s.
    Servers and the analysis both use it, so both cut time the same way."""
    return min(5.0, interval_s / 4)


def bucket_of(t: float, bucket_s: float) -> int:
    """The bucket holding time ``t`` (seconds since the epoch)."""
    return math.floor(t / bucket_s)


def _default_latency() -> list[int]:
    return [0] * (len(LATENCY_BOUNDS_MS) + 1)


def empty_bucket(rollout_id: str, version: int, bucket: int, server: str) -> BucketRow:
    """A row with nothing counted yet (what a server starts each bucket with)."""
    return BucketRow(rollout_id, version, bucket, server, 0, 0, _default_latency(), {})

