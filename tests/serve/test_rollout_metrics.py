"""A rollout in /metrics (issue 14.7): per-version request, error and latency series labelled
with the rollout, the version's role and mode, beside its weight; the SLO objectives of
the rollout's policy while it runs; every series of the rollout gone when it ends."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

import reprise
from reprise.registry import RegistrySource, promote, register_package
from reprise.serve import Settings, abort_rollout, start_rollout
from tests.registry.test_registry import pkg
from tests.serve.fakes import run, serving, wait_until

Samples = dict[str, dict[tuple[tuple[str, str], ...], float]]
POLICY = {"slo": {"availability": 0.95, "latency_ms": 300, "latency_target": 0.9}}


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("REPRISE_ACTOR", "tester")
    w = reprise.init(tmp_path)
    register_package("churn", pkg(1.0), workspace=w)
    register_package("churn", pkg(0.5), workspace=w)
    promote("churn", 1, "production", workspace=w)
    yield w
    w.close()


def _rows(n: int) -> list[dict[str, float]]:
    rng = np.random.default_rng(0)
    return [{"a": float(a), "b": float(b)} for a, b in rng.normal(size=(n, 2))]


def _samples(text: str) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def _series(samples: Samples, name: str) -> dict[tuple[str, str, str], float]:
    """(version, role, mode) -> value of a rollout series (histogram buckets left out)."""
    return {(d["version"], d["role"], d["mode"]): v
            for d, v in ((dict(k), v) for k, v in samples.get(name, {}).items())
            if "le" not in d}


def test_a_canary_shows_per_version_series_its_weights_and_its_objectives(ws: Any) -> None:
    rec = start_rollout("churn", 2, steps=[30, 100], interval="1h", policy=POLICY,
                        workspace=ws)
    settings = Settings(poll_interval=0.05, server_name="s1")

    async def main() -> tuple[list[Any], Samples, Samples]:
        async with serving(RegistrySource(ws), ["churn@production"], settings) as (c, app):
            state = app.state.reprise
            await wait_until(lambda: "churn@production" in state.table.splits, 20)
            answers = [await c.post("/v1/models/churn/predict", json=[row],
                                    headers={"x-request-key": f"k{i}"})
                       for i, row in enumerate(_rows(200))]
            await c.post("/v1/models/churn/predict", json=[{"a": "x"}])  # the client's: no
            during = _samples((await c.get("/metrics")).text)
            await asyncio.to_thread(abort_rollout, "churn", "test over", workspace=ws)
            await wait_until(lambda: not state.table.splits, 10)
            # the split goes first; the series once the rollout's lease is given up
            await wait_until(lambda: b"reprise_rollout_weight{" not in state.metrics.render()[0],
                             10)
            return answers, during, _samples((await c.get("/metrics")).text)
    answers, during, after = run(main())
    assert all(a.status_code == 200 for a in answers)
    by_version = Counter(a.headers["x-reprise-model-version"] for a in answers)
    assert set(by_version) == {"1", "2"}
    requests = _series(during, "reprise_rollout_requests_total")
    assert requests == {("1", "stable", "live"): by_version["1"],
                        ("2", "candidate", "live"): by_version["2"]}
    assert set(_series(during, "reprise_rollout_errors_total").values()) == {0.0}
    assert _series(during, "reprise_rollout_request_duration_seconds_count") == requests
    labels = dict(next(iter(during["reprise_rollout_requests_total"])))
    assert labels["rollout"] == rec.id and labels["model"] == "churn"
    weights = {dict(k)["version"]: v for k, v in during["reprise_rollout_weight"].items()}
    assert weights == {"1": 70.0, "2": 30.0}
    assert during["reprise_slo_objective"] == {
        (("model", "churn"), ("objective", "availability")): 0.95,
        (("model", "churn"), ("objective", "latency")): 0.9}
    for name in ("reprise_rollout_requests_total", "reprise_rollout_errors_total",
                 "reprise_rollout_request_duration_seconds_count", "reprise_rollout_weight"):
        assert not after.get(name), name  # the rollout ended: its series went
    assert after["reprise_slo_objective"] == {  # back to the server's own
        (("model", "churn"), ("objective", "availability")): 0.999}
    # the SLO windows kept counting through it all, across versions, not the client error
    rate = after["reprise_slo_burn_rate"][(("model", "churn"), ("objective", "availability"),
                                           ("window", "5m"))]
    assert rate == 0.0


def test_a_shadowed_candidate_is_counted_in_shadow_mode(ws: Any) -> None:
    start_rollout("churn", 2, strategy="shadow", interval="1h", workspace=ws)
    settings = Settings(poll_interval=0.05, server_name="s1")

    async def main() -> Samples:
        async with serving(RegistrySource(ws), ["churn@production"], settings) as (c, app):
            state = app.state.reprise
            await wait_until(lambda: "churn@production" in state.table.splits
                             and state.table.splits["churn@production"].shadow is not None, 20)
            for row in _rows(40):
                assert (await c.post("/v1/models/churn/predict", json=[row])).status_code == 200

            def copied() -> float:
                text = state.metrics.render()[0].decode()
                return _series(_samples(text), "reprise_rollout_requests_total").get(
                    ("2", "candidate", "shadow"), 0.0)
            await wait_until(lambda: copied() == 40, 10)
            return _samples((await c.get("/metrics")).text)
    samples = run(main())
    assert _series(samples, "reprise_rollout_requests_total") == {
        ("1", "stable", "live"): 40.0, ("2", "candidate", "shadow"): 40.0}


@pytest.mark.parametrize("seconds", [0.0004, 0.001, 0.0123, 0.07, 2.0, 99.0])
def test_a_shadow_batch_counted_at_once_reads_as_that_many_answers(seconds: float) -> None:
    """The shadow counts a batch of copies with one call (the event loop is not held for
    hundreds of them); the series read exactly as one call per copy would leave them."""
    from reprise.serve._metrics import Metrics

    one_by_one, at_once = Metrics(), Metrics()
    for error in (False, True):
        for _ in range(7):
            one_by_one.rollout_request("r1", "churn", 2, "candidate", "shadow", error=error,
                                       seconds=seconds)
        at_once.rollout_request("r1", "churn", 2, "candidate", "shadow", error=error,
                                seconds=seconds, n=7)

    def values(m: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for family in text_string_to_metric_families(m.render()[0].decode())
                for s in family.samples if not s.name.endswith("_created")}
    expected = values(one_by_one)
    assert values(at_once) == pytest.approx(expected, rel=1e-12)  # (sums: rounding)
    assert expected[("reprise_rollout_requests_total",
                     (("mode", "shadow"), ("model", "churn"), ("role", "candidate"),
                      ("rollout", "r1"), ("version", "2")))] == 14
