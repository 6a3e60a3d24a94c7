"""SLO burn rates from in-process sliding windows, and the multi-window alerts on them.

Each model name a server answers for keeps its running totals (requests, server errors,
the latency histogram over :data:`~reprise.core._rollout_types.LATENCY_BOUNDS_MS`) and,
in two rings, a snapshot of those totals at the start of every slot: 10-second slots for
the last hour and 5-minute slots for the last three days. A window is the newest totals
minus the snapshot nearest its start, so reading one costs a subtraction of two rows, and
recording a request costs three increments (plus, once per slot, a copy of the totals).

The objectives are read when ``/metrics`` is scraped (a rollout's policy while one runs,
else the server's), and the latency histogram is kept rather than a count of slow
requests so that a changed latency objective applies to the windows' past too.

Alerts are the SRE workbook's (chapter 5, "Alerting on SLOs", multiwindow,
multi-burn-rate): an alert fires when the burn rate over both its long and its short
window is above its factor (:data:`ALERTS`); the short window makes it stop soon after
the problem does.

Example:
    >>> w = SloWindows(now=0.0)
    >>> for i in range(1000):
    ...     w.record(1.0 + i * 0.1, error=i < 20, ms=4.0)
    >>> rates = burn_rates(w.window(101.0, 300.0), Policy(slo_availability=0.99))
    >>> round(rates["availability"], 6)
    2.0
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from reprise.core._rollout_types import LATENCY_BOUNDS_MS, latency_index
from reprise.serve._policy import Policy
from reprise.serve._rollout_checks import VersionWindow
from reprise.serve._rollout_checks import burn_rates as _window_burn_rates

__all__ = ["ALERTS", "OBJECTIVES", "WINDOWS", "AlertRule", "SloBook", "SloWindows",
           "WindowCounts", "alerts", "burn_rates"]

WINDOWS: dict[str, float] = {"5m": 300.0, "30m": 1800.0, "1h": 3600.0, "6h": 21600.0,
                             "3d": 259200.0}
"""The windows burn rates are exposed over (the alerts' long and short windows)."""
OBJECTIVES = ("availability", "latency")
_WIDTH = 2 + len(LATENCY_BOUNDS_MS) + 1  # requests, errors, the latency histogram


@dataclass(frozen=True)
class AlertRule:
    """Fire ``severity`` when the burn rate over ``long`` and over ``short`` exceeds
    ``factor`` (``factor`` times the rate that spends the budget exactly in 30 days)."""

    severity: str
    long: str
    short: str
    factor: float


ALERTS: tuple[AlertRule, ...] = (
    AlertRule("page", "1h", "5m", 14.4),  # 2 % of a 30-day budget spent in an hour
    AlertRule("page", "6h", "30m", 6.0),  # 5 % in six hours
    AlertRule("ticket", "3d", "6h", 1.0),  # 10 % in three days
)
"""The SRE workbook's recommended multiwindow, multi-burn-rate alerts (table 5-8)."""


@dataclass(frozen=True)
class WindowCounts:
    """What a window holds: requests, server errors, the latency histogram, and how many
    seconds it really covers (less than asked while the server is younger)."""

    requests: int
    errors: int
    latency: list[int]
    seconds: float


class _Ring:
    """Snapshots of the totals at the start of each of the last ``slots`` slots of
    ``step`` seconds; slot ``k`` starts at ``k * step``."""

    def __init__(self, step: float, slots: int) -> None:
        self.step, self.slots = step, slots
        self.slot_of = array("q", [-1]) * slots  # which slot each place holds
        self.rows = array("q", bytes(8 * slots * _WIDTH))
        self.newest = -1

    def roll(self, slot: int, totals: list[int]) -> None:
        """Snapshot ``totals`` for every slot after the newest up to ``slot`` (no request
        arrived in the slots skipped: they start with the same totals)."""
        if slot <= self.newest:
            return
        row = array("q", totals)
        for s in range(max(self.newest + 1, slot - self.slots + 1), slot + 1):
            i = s % self.slots
            self.slot_of[i] = s
            self.rows[i * _WIDTH:(i + 1) * _WIDTH] = row
        self.newest = slot

    def at(self, slot: int) -> array[int] | None:
        i = slot % self.slots
        if self.slot_of[i] != slot:
            return None
        return self.rows[i * _WIDTH:(i + 1) * _WIDTH]


class SloWindows:
    """The sliding windows of one model's requests; ``now`` is any monotonic clock in
    seconds, the same one on every call (the server's: ``time.perf_counter``).

    Not thread-safe: the server calls it on its event loop only.
    """

    def __init__(self, now: float, *, rings: tuple[tuple[float, int], ...] = (
            (10.0, 370), (300.0, 866))) -> None:
        self.created = now
        self._totals = [0] * _WIDTH
        self._rings = [_Ring(step, slots) for step, slots in rings]
        self._fine = self._rings[0].step
        # every ring rolls at the first one's slot edges: theirs must fall on them
        assert all(r.step % self._fine == 0 for r in self._rings), rings
        self._edge = -math.inf  # when the finest ring's next slot starts
        self._roll(now)

    def record(self, now: float, *, error: bool, ms: float) -> None:
        """Count one request answered at ``now`` after ``ms`` milliseconds."""
        if now >= self._edge:
            self._roll(now)
        totals = self._totals
        totals[0] += 1
        if error:
            totals[1] += 1
        totals[2 + latency_index(ms)] += 1

    def _roll(self, now: float) -> None:
        for ring in self._rings:
            ring.roll(int(now // ring.step), self._totals)
        self._edge = (math.floor(now / self._fine) + 1) * self._fine

    def window(self, now: float, seconds: float) -> WindowCounts:
        """The requests of the last ``seconds`` before ``now``: measured from the slot edge
        nearest its start, in the finest ring that reaches that far back (all of them,
        when the server is younger than the window)."""
        self._roll(now)
        start = now - seconds
        base: Any = None
        if start > self.created:
            for ring in self._rings:
                if ring.slots * ring.step >= seconds + ring.step:
                    slot = min(max(round(start / ring.step), int(self.created // ring.step)),
                               ring.newest)
                    base = ring.at(slot)
                    if base is not None:
                        start = slot * ring.step
                    break
        totals = self._totals
        if base is None:
            return WindowCounts(totals[0], totals[1], totals[2:], now - max(start,
                                                                           self.created))
        diff = [t - b for t, b in zip(totals, base, strict=True)]
        return WindowCounts(diff[0], diff[1], diff[2:], now - max(start, self.created))


def burn_rates(counts: WindowCounts, policy: Policy) -> dict[str, float | None]:
    """The availability and latency burn rates of a window under ``policy``'s objectives
    (see :func:`reprise.serve._rollout_checks.burn_rates`: the rollout status shows the
    same numbers); None without requests, or for latency without a latency objective."""
    w = VersionWindow(0, "model", requests=counts.requests, errors=counts.errors,
                      latency=counts.latency)
    return _window_burn_rates(w, policy)


def alerts(rates: Mapping[tuple[str, str], float | None], objectives: Iterable[str]
           ) -> dict[tuple[str, str], bool]:
    """``(objective, severity) -> firing`` from ``(objective, window) -> burn rate``:
    a severity fires when any of its rules sees both windows above the rule's factor (a
    window without data never fires)."""
    out: dict[tuple[str, str], bool] = {}
    for objective in objectives:
        for rule in ALERTS:
            long, short = rates.get((objective, rule.long)), rates.get((objective, rule.short))
            firing = long is not None and short is not None and long > rule.factor \
                and short > rule.factor
            key = (objective, rule.severity)
            out[key] = out.get(key, False) or firing
    return out


class SloBook:
    """The windows of every model name a server answers for, as a Prometheus collector:
    ``reprise_slo_objective``, ``reprise_slo_burn_rate`` and ``reprise_slo_alert``,
    computed when scraped with the objectives ``objectives(name)`` gives then."""

    def __init__(self, names: Iterable[str], objectives: Callable[[str], Policy],
                 clock: Callable[[], float]) -> None:
        self.clock, self.objectives = clock, objectives
        now = clock()
        self.windows = {name: SloWindows(now) for name in names}

    def record(self, name: str, now: float, *, error: bool, seconds: float) -> None:
        w = self.windows.get(name)
        if w is not None:
            w.record(now, error=error, ms=seconds * 1000)

    def describe(self) -> Iterator[Any]:
        yield from self._families()

    def collect(self) -> Iterator[Any]:
        families = self._families()
        objective, burn, alert = families
        now = self.clock()
        for name, w in self.windows.items():
            policy = self.objectives(name)
            targets = {"availability": policy.slo_availability}
            if policy.slo_latency_ms is not None:
                targets["latency"] = policy.slo_latency_target
            for what, target in targets.items():
                objective.add_metric([name, what], target)
            rates: dict[tuple[str, str], float | None] = {}
            for label, seconds in WINDOWS.items():
                for what, rate in burn_rates(w.window(now, seconds), policy).items():
                    if what in targets:
                        rates[(what, label)] = rate
                        if rate is not None:
                            burn.add_metric([name, what, label], rate)
            for (what, severity), firing in alerts(rates, targets).items():
                alert.add_metric([name, what, severity], 1.0 if firing else 0.0)
        yield from families

    @staticmethod
    def _families() -> tuple[Any, Any, Any]:
        from prometheus_client.core import GaugeMetricFamily

        return (
            GaugeMetricFamily("reprise_slo_objective", "The share of requests each "
                              "objective requires to be good (availability: no server "
                              "error; latency: faster than the policy's slo.latency_ms).",
                              labels=["model", "objective"]),
            GaugeMetricFamily("reprise_slo_burn_rate", "How fast the window spends the "
                              "objective's error budget: its bad share over 1 - objective "
                              "(1: the budget lasts exactly the SLO period). Absent for a "
                              "window without requests.",
                              labels=["model", "objective", "window"]),
            GaugeMetricFamily("reprise_slo_alert", "1 while a multiwindow, multi-burn-rate "
                              "alert fires (SRE workbook ch. 5): page, 1h and 5m above 14.4 "
                              "or 6h and 30m above 6; ticket, 3d and 6h above 1.",
                              labels=["model", "objective", "severity"]),
        )
