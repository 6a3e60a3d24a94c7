"""A rollout's analysis (issue 14.4): every rule of ``decide`` with injected time, the
checks' statistics, and laws checked by hypothesis (insufficient data never promotes;
weights never go down except on rollback)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reprise.core import LATENCY_BOUNDS_MS, BucketRow, RolloutRecord
from reprise.core._rollout_types import latency_index
from reprise.serve._analysis import (
    CHECKS,
    CheckResult,
    Decision,
    VersionWindow,
    burn_rates,
    decide,
    histogram_quantile,
    register_check,
)
from reprise.serve._policy import Policy
from reprise.serve._rollout_checks import share_above

T0 = 1_000_000.0


def rollout(strategy: str = "canary", steps: tuple[int, ...] = (5, 25, 50, 100),
            **kw: Any) -> RolloutRecord:
    phase = {"canary": "steps", "shadow": "shadow", "blue-green": "shadow"}[strategy]
    weight = float(steps[0]) if strategy == "canary" else 0.0
    fields: dict[str, Any] = dict(
        id="r1", name="m", alias="production", stable=1, candidate=2, strategy=strategy,
        steps=list(steps), interval_s=60.0, policy={}, key={}, state="running", step=0,
        weight=weight, phase=phase, step_started_at=T0, created_at=T0, ended_at=None,
        failures=0, decisions=0, reason=None, actor="t")
    fields.update(kw)
    return RolloutRecord(**fields)


def win(role: str, requests: int, errors: int = 0, ms: float = 3.0,
        outputs: dict[str, int] | None = None, mode: str = "live", compared: int = 0,
        agreed: int = 0) -> VersionWindow:
    latency = [0] * (len(LATENCY_BOUNDS_MS) + 1)
    latency[latency_index(ms)] = requests
    if outputs is None:
        outputs = {"0": requests // 2, "1": requests - requests // 2}
    return VersionWindow(1 if role == "stable" else 2, role, mode, requests, errors, latency,
                         outputs, compared, agreed)


STABLE = win("stable", 5000, errors=5)
GOOD = win("candidate", 400)
DUE = T0 + 61


def apply(rec: RolloutRecord, d: Decision) -> RolloutRecord:
    return dataclasses.replace(rec, **d.changes, decisions=rec.decisions + 1)


def verdicts(d: Decision) -> dict[str, str]:
    return {c.name: c.verdict for c in d.checks}


class TestRules:
    def test_waits_for_the_interval(self) -> None:
        d = decide(rollout(), STABLE, GOOD, Policy(), now=T0 + 30)
        assert d.action == "wait" and d.changes == {}
        assert d.reason == "next analysis in 30.0 s"

    def test_insufficient_data_holds_and_says_so(self) -> None:
        d = decide(rollout(), STABLE, win("candidate", 37), Policy(), now=DUE)
        assert d.action == "hold" and d.changes == {"analyzed_at": DUE}
        assert "insufficient data: 37 of 200 requests (candidate v2)" in d.reason
        assert "pass" not in {verdicts(d)[k] for k in ("error_rate", "latency_ratio",
                                                       "prediction_shift")}
        assert all(c.verdict == "insufficient" for c in d.checks), verdicts(d)

    def test_a_hold_delays_the_next_analysis_by_an_interval(self) -> None:
        rec = apply(rollout(), decide(rollout(), STABLE, win("candidate", 37), Policy(), DUE))
        assert decide(rec, STABLE, GOOD, Policy(), now=DUE + 30).action == "wait"
        assert decide(rec, STABLE, GOOD, Policy(), now=DUE + 60).action == "step"

    def test_stable_short_of_data_is_insufficient_too(self) -> None:
        d = decide(rollout(), win("stable", 50), GOOD, Policy(), now=DUE)
        assert d.action == "hold"
        assert "insufficient data: 50 of 200 requests (stable v1)" in d.reason

    def test_hard_failure_rolls_back_at_once(self) -> None:
        d = decide(rollout(), STABLE, win("candidate", 12, errors=12), Policy(), now=T0 + 5)
        assert d.action == "rollback"  # before the interval and the minimum sample
        assert d.changes["state"] == "rolled_back" and d.changes["weight"] == 0.0
        assert d.reason.startswith("hard failure: error rate 100.0% (12 of 12)")
        assert verdicts(d)["error_rate_hard"] == "hard_fail"

    def test_a_few_errors_are_no_hard_failure(self) -> None:
        d = decide(rollout(), STABLE, win("candidate", 4, errors=2), Policy(), now=T0 + 5)
        assert d.action == "wait" and verdicts(d)["error_rate_hard"] == "insufficient"

    def test_threshold_failed_analyses_in_a_row_roll_back(self) -> None:
        bad = win("candidate", 400, errors=80)  # 20 %
        rec = rollout()
        first = decide(rec, STABLE, bad, Policy(threshold=2), now=DUE)
        assert first.action == "hold" and first.changes["failures"] == 1
        assert first.reason.startswith("failed analysis 1 of 2: error_rate: error rate 20.00%")
        rec = apply(rec, first)
        second = decide(rec, STABLE, bad, Policy(threshold=2), now=DUE + 60)
        assert second.action == "rollback"
        assert second.reason.startswith("2 failed analyses in a row (threshold 2)")
        assert second.changes["failures"] == 2

    def test_a_passing_analysis_ends_the_streak(self) -> None:
        rec = rollout(failures=1, analyzed_at=DUE - 60)
        d = decide(rec, STABLE, GOOD, Policy(threshold=2), now=DUE)
        assert d.action == "step" and d.changes["failures"] == 0

    def test_relative_error_rate_against_stable(self) -> None:
        policy = Policy(error_rate_max=0.05)
        worse = win("candidate", 2000, errors=60)  # 3 %: under the absolute limit
        d = decide(rollout(), win("stable", 20000, errors=20), worse, policy, now=DUE)
        assert verdicts(d) | {"error_rate": "pass"} == verdicts(d)
        assert verdicts(d)["error_rate_relative"] == "fail"
        assert "significantly above the stable version's 0.10%" in d.reason
        same = decide(rollout(), win("stable", 20000, errors=600), worse, policy, now=DUE)
        assert verdicts(same)["error_rate_relative"] == "pass" and same.action == "step"

    def test_latency_p99_ratio_and_limits(self) -> None:
        slow = win("candidate", 400, ms=60)
        d = decide(rollout(), win("stable", 5000, ms=6), slow, Policy(), now=DUE)
        assert verdicts(d)["latency_ratio"] == "fail"
        ratio = next(c for c in d.checks if c.name == "latency_ratio")
        assert ratio.value is not None and 8 < ratio.value < 12
        fast = decide(rollout(), win("stable", 5000, ms=0.2), win("candidate", 400, ms=2.5),
                      Policy(), now=DUE)  # 10x, but under the 5 ms floor
        assert verdicts(fast)["latency_ratio"] == "pass"
        capped = decide(rollout(), STABLE, win("candidate", 400, ms=40),
                        Policy(latency_p99_max_ms=30, latency_p50_max_ms=100,
                               latency_p99_ratio_max=None), now=DUE)
        assert verdicts(capped)["latency_p99"] == "fail"
        assert verdicts(capped)["latency_p50"] == "pass"
        assert "latency_ratio" not in verdicts(capped)

    def test_prediction_shift_by_jensen_shannon(self) -> None:
        one_class = win("candidate", 400, outputs={"1": 400})
        d = decide(rollout(), STABLE, one_class, Policy(), now=DUE)
        shift = next(c for c in d.checks if c.name == "prediction_shift")
        assert shift.verdict == "fail" and shift.value == pytest.approx(0.5579, abs=1e-3)
        assert "candidate's top output '1': 100%" in shift.message
        near = win("candidate", 400, outputs={"0": 190, "1": 210})
        assert verdicts(decide(rollout(), STABLE, near, Policy(), DUE))[
            "prediction_shift"] == "pass"
        silent = decide(rollout(), win("stable", 5000, outputs={}),
                        win("candidate", 400, outputs={}), Policy(), DUE)
        assert "prediction_shift" in silent.evidence["skipped"]

    def test_a_shift_above_the_limit_fails_only_when_significant(self) -> None:
        """Two samples of one distribution differ by chance: on the demo's minimum sample
        (100 answers) a healthy candidate's class shares came out 0.11 apart from the
        stable version's and it was rolled back. Above the limit but not significant
        holds (insufficient data); the same shares on ten times the answers fail."""
        policy = Policy(min_requests=100)
        stable = win("stable", 300, outputs={"0": 130, "1": 170})
        noisy = win("candidate", 100, outputs={"0": 31, "1": 69})  # distance 0.109, p 0.03
        d = decide(rollout(), stable, noisy, policy, now=DUE)
        shift = next(c for c in d.checks if c.name == "prediction_shift")
        assert shift.verdict == "insufficient" and shift.value == pytest.approx(0.1086,
                                                                                abs=1e-3)
        assert d.action == "hold" and "failures" not in d.changes
        assert ("insufficient data: Jensen-Shannon distance 0.109 > 0.1 but not significant "
                "on 100 and 300 answers (chi-square p=0.029 >= 0.01" in d.reason)
        many = decide(rollout(), win("stable", 3000, outputs={"0": 1300, "1": 1700}),
                      win("candidate", 1000, outputs={"0": 310, "1": 690}), policy, DUE)
        shift = next(c for c in many.checks if c.name == "prediction_shift")
        assert shift.verdict == "fail" and "significant (chi-square p=5.7e-12 < 0.01" in \
            shift.message
        assert many.action == "hold" and many.changes["failures"] == 1
        lenient = Policy(min_requests=100, alpha=0.05)  # the policy's alpha decides
        assert verdicts(decide(rollout(), stable, noisy, lenient, DUE))[
            "prediction_shift"] == "fail"

    def test_shadow_agreement(self) -> None:
        rec = rollout("shadow")
        low = win("candidate", 500, mode="shadow", compared=500, agreed=400)
        d = decide(rec, STABLE, low, Policy(), now=DUE)
        assert verdicts(d)["shadow_agreement"] == "fail"
        assert "agreement 80.0% on 500 shadowed requests < 90%" in d.reason
        few = win("candidate", 500, mode="shadow", compared=150, agreed=150)
        assert "150 of 200 shadow comparisons" in decide(rec, STABLE, few, Policy(), DUE).reason
        assert "shadow_agreement" not in verdicts(decide(rollout(), STABLE, GOOD, Policy(),
                                                         DUE))

    def test_canary_steps_up_then_promotes_after_the_last_step(self) -> None:
        rec = rollout(steps=(5, 50, 100))
        seen = []
        now = DUE
        while True:
            d = decide(rec, STABLE, GOOD, Policy(), now=now)
            seen.append((d.action, d.changes.get("weight")))
            if d.action == "promote":
                break
            rec = apply(rec, d)
            assert rec.step_started_at == now and rec.failures == 0
            now += 61
        assert seen == [("step", 50.0), ("step", 100.0), ("promote", 100.0)]
        assert d.changes["state"] == "promoted" and d.changes["ended_at"] == now

    def test_shadow_keeps_shadowing_when_checks_pass(self) -> None:
        ok = win("candidate", 500, mode="shadow", compared=500, agreed=499)
        d = decide(rollout("shadow"), STABLE, ok, Policy(), now=DUE)
        assert d.action == "hold" and "rollout promote m --alias production" in d.reason
        assert "weight" not in d.changes

    def test_blue_green_goes_shadow_live_hold_promoted(self) -> None:
        rec = rollout("blue-green")
        policy = Policy(hold_s=120)
        shadow = win("candidate", 500, mode="shadow", compared=500, agreed=500)
        d = decide(rec, STABLE, shadow, policy, now=DUE)
        assert (d.action, d.changes["phase"], d.changes["weight"]) == ("step", "live", 100.0)
        rec = apply(rec, d)
        d = decide(rec, STABLE, GOOD, policy, now=DUE + 61)
        assert (d.action, d.changes["phase"]) == ("step", "hold")
        rec = apply(rec, d)
        d = decide(rec, STABLE, GOOD, policy, now=DUE + 122)  # an interval in, hold not over
        assert d.action == "hold" and "the hold ends in 59.0 s" in d.reason
        rec = apply(rec, d)
        d = decide(rec, STABLE, GOOD, policy, now=DUE + 182)
        assert d.action == "promote"

    def test_blue_green_rolls_back_from_live_on_failure(self) -> None:
        rec = rollout("blue-green", phase="live", weight=100.0)
        d = decide(rec, STABLE, win("candidate", 400, errors=300), Policy(), now=T0 + 1)
        assert d.action == "rollback" and d.changes["weight"] == 0.0

    def test_evidence_holds_window_counts_thresholds_and_verdicts(self) -> None:
        d = decide(rollout(), STABLE, GOOD, Policy(), now=DUE)
        ev = d.evidence
        assert ev["window"] == {"candidate_since": T0, "stable_since": T0, "until": DUE}
        assert ev["versions"]["candidate"]["requests"] == 400
        assert ev["versions"]["stable"]["error_rate"] == pytest.approx(0.001)
        assert ev["policy"]["error_rate"]["max"] == 0.05
        assert {c["name"] for c in ev["checks"]} == set(verdicts(d))
        assert "input_drift" in ev["skipped"]

    def test_every_check_off_still_needs_the_minimum_sample(self) -> None:
        off = Policy(error_rate_max=None, error_rate_hard=None, error_rate_relative=False,
                     latency_p99_ratio_max=None, prediction_shift_max=None)
        d = decide(rollout(), STABLE, win("candidate", 10), off, now=DUE)
        assert d.action == "hold" and verdicts(d) == {"sample": "insufficient"}
        assert decide(rollout(), STABLE, GOOD, off, now=DUE).action == "step"


def test_an_installed_check_takes_part(monkeypatch: pytest.MonkeyPatch) -> None:
    def drift(stable: VersionWindow, cand: VersionWindow, policy: Policy) -> CheckResult:
        return CheckResult("input_drift", "fail", 0.4, 0.2, "PSI 0.4 > 0.2 on 'age'")

    monkeypatch.setitem(CHECKS, "input_drift", CHECKS.get("input_drift", drift))
    register_check("input_drift", drift)
    d = decide(rollout(), STABLE, GOOD, Policy(), now=DUE)
    assert d.action == "hold" and "input_drift: PSI 0.4 > 0.2" in d.reason
    assert "input_drift" not in d.evidence["skipped"]


class TestQuick:
    """``decide(..., quick=True)``, a server's analysis every second: a wait runs only
    the checks that may hard-fail; any other decision is the full one's."""

    def test_a_wait_runs_only_the_hard_checks(self, monkeypatch: pytest.MonkeyPatch) -> None:
        calls: list[float] = []

        def spy(stable: VersionWindow, cand: VersionWindow, policy: Policy) -> CheckResult:
            calls.append(cand.requests)
            return CheckResult("spy", "pass", None, None, "ok")

        monkeypatch.setitem(CHECKS, "spy", spy)
        d = decide(rollout(), STABLE, GOOD, Policy(), now=T0 + 30, quick=True)
        assert d.action == "wait" and d.changes == {} and d.evidence == {}
        assert d.reason == "next analysis in 30.0 s"
        assert calls == [] and verdicts(d) == {"error_rate_hard": "pass"}
        due = decide(rollout(), STABLE, GOOD, Policy(), now=DUE, quick=True)
        assert calls == [400] and due.action == "step"
        assert due == decide(rollout(), STABLE, GOOD, Policy(), now=DUE)

    def test_a_hard_failure_rolls_back_with_the_full_evidence(self) -> None:
        bad = win("candidate", 12, errors=12)
        d = decide(rollout(), STABLE, bad, Policy(), now=T0 + 5, quick=True)
        assert d.action == "rollback" and "prediction_shift" in verdicts(d)
        assert d == decide(rollout(), STABLE, bad, Policy(), now=T0 + 5)

    def test_a_check_installed_as_hard_runs_between_decisions(
            self, monkeypatch: pytest.MonkeyPatch) -> None:
        from reprise.serve import _rollout_checks

        def burning(stable: VersionWindow, cand: VersionWindow,
                    policy: Policy) -> CheckResult:
            return CheckResult("burn", "hard_fail", 20.0, 14.4, "burn rate 20 > 14.4")

        monkeypatch.setattr(_rollout_checks, "HARD", set(_rollout_checks.HARD))
        monkeypatch.setitem(CHECKS, "burn", burning)
        register_check("burn", burning, hard=True)
        d = decide(rollout(), STABLE, GOOD, Policy(), now=T0 + 5, quick=True)
        assert d.action == "rollback" and d.reason == "hard failure: burn rate 20 > 14.4"
        register_check("burn", burning)  # replaced, hard=None: still hard
        assert decide(rollout(), STABLE, GOOD, Policy(), now=T0 + 5, quick=True).action \
            == "rollback"
        register_check("burn", burning, hard=False)  # left for the full analysis
        assert decide(rollout(), STABLE, GOOD, Policy(), now=T0 + 5, quick=True).action \
            == "wait"
        assert decide(rollout(), STABLE, GOOD, Policy(), now=T0 + 5).action == "rollback"
        # wrapping a built-in hard check keeps it running between decisions
        monkeypatch.setitem(CHECKS, "error_rate_hard", CHECKS["error_rate_hard"])
        register_check("error_rate_hard", CHECKS["error_rate_hard"])
        bad = win("candidate", 12, errors=12)
        assert decide(rollout(), STABLE, bad, Policy(), now=T0 + 5, quick=True).action \
            == "rollback"


@settings(max_examples=150, deadline=None)
@given(requests=st.integers(0, 600), error_share=st.floats(0, 1),
       offset=st.floats(0, 120), strategy=st.sampled_from(["canary", "shadow", "blue-green"]))
def test_quick_decides_as_the_full_analysis(requests: int, error_share: float,
                                            offset: float, strategy: str) -> None:
    cand = win("candidate", requests, errors=round(requests * error_share),
               mode="shadow" if strategy != "canary" else "live")
    quick = decide(rollout(strategy), STABLE, cand, Policy(), now=T0 + offset, quick=True)
    full = decide(rollout(strategy), STABLE, cand, Policy(), now=T0 + offset)
    assert (quick.action, quick.changes, quick.reason) == (full.action, full.changes,
                                                           full.reason)
    if full.action != "wait":
        assert quick == full


class TestHistograms:
    def test_quantiles_match_raw_samples_within_a_bucket(self) -> None:
        rng = np.random.default_rng(0)
        samples = rng.lognormal(mean=3, sigma=0.8, size=20000)  # ~20 ms
        counts = [0] * (len(LATENCY_BOUNDS_MS) + 1)
        for ms in samples:
            counts[latency_index(ms)] += 1
        for q in (0.5, 0.9, 0.99):
            exact = float(np.quantile(samples, q))
            i = latency_index(exact)
            width = LATENCY_BOUNDS_MS[i] - (LATENCY_BOUNDS_MS[i - 1] if i else 0)
            assert abs(histogram_quantile(counts, q) - exact) <= width  # type: ignore[operator]

    def test_edges(self) -> None:
        counts = [0] * (len(LATENCY_BOUNDS_MS) + 1)
        assert histogram_quantile(counts, 0.5) is None
        counts[latency_index(6)] = 10  # all in (5, 7]
        assert histogram_quantile(counts, 0.5) == pytest.approx(6.0)
        counts[-1] = 1000
        assert histogram_quantile(counts, 0.99) == 10000.0

    def test_buckets_and_windows_add_up(self) -> None:
        def row(server: str, version: int, n: int) -> BucketRow:
            lat = [0] * (len(LATENCY_BOUNDS_MS) + 1)
            lat[3] = n
            return BucketRow("r", version, 1, server, n, 1, lat, {"a": n}, 2, 1, 0)
        rows = [row("s1", 1, 5), row("s2", 1, 7), row("s1", 2, 100)]
        w = VersionWindow.from_rows(1, "stable", rows)
        assert (w.requests, w.errors, w.latency[3], w.outputs, w.shadow_compared) == (
            12, 2, 12, {"a": 12}, 4)
        merged = rows[0].merge(rows[1])
        assert VersionWindow.from_rows(1, "stable", [merged]).to_dict() == w.to_dict()

    def test_burn_rates(self) -> None:
        w = win("candidate", 1000, errors=2, ms=400)
        rates = burn_rates(w, Policy(slo_availability=0.999, slo_latency_ms=300,
                                     slo_latency_target=0.99))
        assert rates["availability"] == pytest.approx(2.0)
        assert rates["latency"] == pytest.approx(100.0)  # every request is slow
        assert share_above(w.latency, 1000) == 0.0
        assert burn_rates(w, Policy())["latency"] is None


# -- laws ------------------------------------------------------------------------------

windows = st.builds(
    lambda n, e_share, ms, k: (n, int(n * e_share), ms, k),
    st.integers(0, 3000), st.floats(0, 1), st.sampled_from([0.5, 4, 30, 300, 20000]),
    st.integers(0, 3))


def _window(role: str, spec: tuple[int, int, float, int], mode: str = "live") -> VersionWindow:
    n, errors, ms, k = spec
    outputs = {str(i): n // (k + 1) for i in range(k + 1)} if n else {}
    return win(role, n, errors, ms, outputs, mode, compared=n, agreed=n - errors)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["canary", "shadow", "blue-green"]), st.integers(0, 3),
       st.sampled_from(["steps", "shadow", "live", "hold"]), windows, windows,
       st.integers(1, 500), st.floats(0, 300))
def test_insufficient_data_never_moves_a_rollout_forward(
        strategy: str, step: int, phase: str, stable: Any, cand: Any, minimum: int,
        elapsed: float) -> None:
    rec = rollout(strategy, step=step, phase="steps" if strategy == "canary" else phase)
    cw = _window("candidate", cand, "shadow" if rec.phase == "shadow" else "live")
    d = decide(rec, _window("stable", stable), cw, Policy(min_requests=minimum), T0 + elapsed)
    if cw.requests < minimum or stable[0] < minimum:
        assert d.action not in ("step", "promote"), d.reason


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(["canary", "blue-green"]),
       st.lists(st.tuples(windows, st.floats(1, 200)), min_size=1, max_size=12))
def test_weights_never_go_down_except_on_rollback(strategy: str, rounds: Any) -> None:
    rec = rollout(strategy, steps=(5, 25, 50, 100))
    now = T0
    for spec, dt in rounds:
        now += dt
        mode = "shadow" if rec.phase == "shadow" else "live"
        d = decide(rec, STABLE, _window("candidate", spec, mode), Policy(hold_s=90), now)
        if d.action == "wait":
            continue
        after = apply(rec, d)
        if d.action == "rollback":
            assert after.weight == 0 and after.state == "rolled_back"
            return
        assert after.weight >= rec.weight
        assert d.action != "promote" or after.weight == 100
        rec = after
        if rec.state != "running":
            return
