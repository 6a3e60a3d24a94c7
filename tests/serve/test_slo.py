"""SLO burn rates (issue 14.7): the sliding windows and the multiwindow, multi-burn-rate
alerts against hand computations, with time injected; then a real server's /metrics."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from reprise.core.errors import ConfigError
from reprise.serve import Settings, create_app
from reprise.serve._policy import Policy
from reprise.serve._slo import ALERTS, SloBook, SloWindows, WindowCounts, alerts, burn_rates
from tests.serve.fakes import FakeModel, FakeSource, run, wait_until
from tests.serve.test_socket import live_server

GOOD = {"x": 1.0, "y": 3, "plan": "gold"}
BAD = {"x": 1.0, "y": 99, "plan": "gold"}  # the failing model below raises on y == 99


# -- the windows --------------------------------------------------------------------------

def test_a_window_counts_the_requests_since_the_slot_edge_nearest_its_start() -> None:
    w = SloWindows(now=0.0)
    for i in range(360):  # one request every 10 s for an hour; every 4th an error
        w.record(5.0 + 10 * i, error=i % 4 == 0, ms=3.0)
    five = w.window(3600.0, 300.0)  # from 3300: requests at 3305, 3315, ..., 3595
    assert (five.requests, five.errors, five.seconds) == (30, 7, 300.0)
    assert five.latency[2] == 30  # 3 ms: the bucket (2, 3], the third
    thirty = w.window(3600.0, 1800.0)
    assert (thirty.requests, thirty.errors) == (180, 45)
    assert w.window(3604.0, 300.0).requests == 30  # 3304 rounds to the edge at 3300


def test_a_server_younger_than_the_window_counts_all_it_has() -> None:
    w = SloWindows(now=1000.0)
    for i in range(50):
        w.record(1001.0 + i, error=i < 5, ms=1.0)
    day = w.window(1100.0, 21600.0)
    assert (day.requests, day.errors, day.seconds) == (50, 5, 100.0)


def test_long_windows_use_the_coarse_ring_and_idle_time_empties_short_ones() -> None:
    w = SloWindows(now=0.0)
    for i in range(8 * 60):  # one request a minute for 8 hours, the first 2 hours failing
        w.record(30.0 + 60 * i, error=i < 120, ms=20.0)
    six = w.window(8 * 3600.0, 6 * 3600.0)  # from 2 h: exactly on a 5-minute edge
    assert (six.requests, six.errors) == (360, 0)
    assert w.window(8 * 3600.0 + 10.0, 6 * 3600.0).requests == 360  # rounds to the edge
    three_days = w.window(8 * 3600.0, 3 * 86400.0)  # younger: everything
    assert (three_days.requests, three_days.errors) == (480, 120)
    later = 8 * 3600.0 + 3600.0  # an hour without requests
    assert w.window(later, 300.0).requests == 0 and w.window(later, 3600.0).requests == 0
    assert w.window(later, 6 * 3600.0).requests == 300


def test_the_fine_ring_wraps_without_losing_the_short_windows() -> None:
    w = SloWindows(now=0.0)
    t = 0.0
    while t < 5 * 3600:  # five hours, one request every 2 s; errors in the last 10 min
        w.record(t, error=t >= 5 * 3600 - 600, ms=1.0)
        t += 2.0
    five = w.window(5 * 3600.0, 300.0)
    hour = w.window(5 * 3600.0, 3600.0)
    assert (five.requests, five.errors) == (150, 150)
    assert (hour.requests, hour.errors) == (1800, 300)


# -- burn rates and alerts ------------------------------------------------------------------

def test_burn_rates_are_the_bad_share_over_the_budget() -> None:
    latency = [0] * 24
    latency[5] = 970  # (7, 10] ms
    latency[13] = 30  # (150, 200] ms: above a 100 ms objective, whatever the interpolation
    counts = WindowCounts(1000, 20, latency, 300.0)
    rates = burn_rates(counts, Policy(slo_availability=0.99, slo_latency_ms=100,
                                      slo_latency_target=0.99))
    assert rates["availability"] == pytest.approx(0.02 / 0.01)
    assert rates["latency"] == pytest.approx(0.03 / 0.01)
    assert burn_rates(counts, Policy())["latency"] is None  # no latency objective
    assert burn_rates(WindowCounts(0, 0, [0] * 24, 300.0), Policy())["availability"] is None


@pytest.mark.parametrize(("rates", "page", "ticket"), [
    ({"1h": 15.0, "5m": 15.0}, True, False),
    ({"1h": 15.0, "5m": 14.0}, False, False),  # the short window says it stopped
    ({"1h": 14.0, "5m": 100.0}, False, False),  # a short spike is no page
    ({"6h": 6.5, "30m": 7.0}, True, False),
    ({"6h": 6.5, "30m": 6.0}, False, False),  # above, not at
    ({"3d": 1.2, "6h": 1.5}, False, True),
    ({"3d": 1.2, "6h": 6.5, "30m": 7.0}, True, True),
    ({"1h": 20.0, "5m": None}, False, False),  # a window without requests never fires
])
def test_alerts_need_both_windows_above_the_factor(rates: dict[str, float | None],
                                                   page: bool, ticket: bool) -> None:
    keyed = {("availability", window): rate for window, rate in rates.items()}
    assert alerts(keyed, ["availability"]) == {("availability", "page"): page,
                                               ("availability", "ticket"): ticket}


def test_the_alert_rules_are_the_workbooks() -> None:
    assert [(r.severity, r.long, r.short, r.factor) for r in ALERTS] == [
        ("page", "1h", "5m", 14.4), ("page", "6h", "30m", 6.0), ("ticket", "3d", "6h", 1.0)]


def _scrape(book: SloBook) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    registry = CollectorRegistry()
    registry.register(book)
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in registry.collect():
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def test_the_book_exposes_objectives_burn_rates_and_alerts_at_scrape_time() -> None:
    clock = [0.0]
    policies = {"churn": Policy(slo_availability=0.999, slo_latency_ms=50,
                                slo_latency_target=0.9)}
    book = SloBook(["churn"], lambda name: policies[name], lambda: clock[0])
    for i in range(1000):  # 100 s of traffic: 2 % errors, 5 % at 70 ms
        book.record("churn", i * 0.1, error=i % 50 == 0, seconds=0.07 if i % 20 == 0 else 0.004)
    book.record("elsewhere", 1.0, error=True, seconds=1.0)  # a name not served: ignored
    clock[0] = 100.0
    got = _scrape(book)
    rate = got["reprise_slo_burn_rate"]
    for window in ("5m", "30m", "1h", "6h", "3d"):  # all younger than the server: the same
        assert rate[(("model", "churn"), ("objective", "availability"),
                     ("window", window))] == pytest.approx(0.02 / 0.001)
        assert rate[(("model", "churn"), ("objective", "latency"),
                     ("window", window))] == pytest.approx(0.05 / 0.1)
    alert = got["reprise_slo_alert"]
    assert alert[(("model", "churn"), ("objective", "availability"), ("severity", "page"))] == 1
    assert alert[(("model", "churn"), ("objective", "latency"), ("severity", "page"))] == 0
    assert alert[(("model", "churn"), ("objective", "latency"), ("severity", "ticket"))] == 0
    assert got["reprise_slo_objective"] == {
        (("model", "churn"), ("objective", "availability")): 0.999,
        (("model", "churn"), ("objective", "latency")): 0.9}
    policies["churn"] = Policy(slo_availability=0.95)  # the objectives are read when scraped
    got = _scrape(book)
    assert ("latency" not in {dict(k)["objective"] for k in got["reprise_slo_burn_rate"]})
    assert got["reprise_slo_alert"][(("model", "churn"), ("objective", "availability"),
                                     ("severity", "page"))] == 0  # 0.4: within budget


def test_settings_check_the_objectives() -> None:
    assert Settings(slo_latency_ms=250).slo_policy().slo_latency_ms == 250
    with pytest.raises(ConfigError, match="slo.availability"):
        Settings(slo_availability=1.0)
    with pytest.raises(ConfigError, match="slo.latency_ms"):
        Settings(slo_latency_ms=-5)


# -- a real server ------------------------------------------------------------------------

def _families(text: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def test_a_real_servers_metrics_show_burn_rates_and_alerts() -> None:
    """On loopback: 18 good answers, 2 model failures and a client error (not counted):
    a 10 % error rate burns a 99 % objective 10 times too fast: over the 6 h / 30 min
    pair's 6 (page) and the 3 d / 6 h pair's 1 (ticket), under the 1 h / 5 min pair's 14.4."""
    failing = FakeModel("churn", 1, fail_when=lambda cols: 99 in cols["y"].tolist())
    source = FakeSource({"churn": {1: failing}}, {"churn@production": 1})
    settings = Settings(slo_availability=0.99, slo_latency_ms=2000, slo_latency_target=0.95,
                        max_batch_size=1)

    async def main() -> tuple[list[int], str]:
        app = create_app(source, ["churn@production"], settings=settings)
        async with live_server(app) as (_, url):
            await wait_until(lambda: app.state.reprise.ready, 15)
            async with httpx.AsyncClient(base_url=url, timeout=10) as c:
                codes = []
                for i in range(20):
                    r = await c.post("/v1/models/churn/predict", json=[BAD if i % 10 == 3
                                                                       else GOOD])
                    codes.append(r.status_code)
                r = await c.post("/v1/models/churn/predict", json=[{"x": "no"}])
                codes.append(r.status_code)
                await asyncio.sleep(0)
                return codes, (await c.get("/metrics")).text
    codes, text = run(main())
    assert sorted(codes) == [200] * 18 + [422] + [500] * 2
    got = _families(text)
    rates = got["reprise_slo_burn_rate"]
    for window in ("5m", "30m", "1h", "6h", "3d"):
        assert rates[(("model", "churn"), ("objective", "availability"),
                      ("window", window))] == pytest.approx(10.0)
        assert rates[(("model", "churn"), ("objective", "latency"),
                      ("window", window))] == 0.0
    alert = got["reprise_slo_alert"]
    assert alert[(("model", "churn"), ("objective", "availability"), ("severity", "page"))] == 1
    assert alert[(("model", "churn"), ("objective", "availability"),
                  ("severity", "ticket"))] == 1
    assert alert[(("model", "churn"), ("objective", "latency"), ("severity", "page"))] == 0
    assert got["reprise_slo_objective"][(("model", "churn"), ("objective", "latency"))] == 0.95


def test_reprise_serve_takes_the_objectives(workspace: Any, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    import reprise.serve
    from reprise.cli import main

    given: list[Settings] = []
    monkeypatch.setattr(reprise.serve, "run_server",
                        lambda source, refs, *, settings, **kw: given.append(settings))
    with pytest.raises(SystemExit) as info:
        main(["serve", "churn@production", "--slo-availability", "0.99",
              "--slo-latency-ms", "250", "--slo-latency-target", "0.95"])
    assert info.value.code == 0
    policy = given[0].slo_policy()
    assert (policy.slo_availability, policy.slo_latency_ms, policy.slo_latency_target) == (
        0.99, 250.0, 0.95)
    with pytest.raises(SystemExit) as info:
        main(["serve", "churn@production", "--slo-availability", "1.5"])
    assert info.value.code == 2 and "slo.availability must be" in capsys.readouterr().err
