"""Interval formulas against scipy and brute-force references."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from scipy.optimize import brentq

from reprise.evaluate._intervals import (
    bootstrap_t,
    clopper_pearson,
    delong,
    delong_variance,
    effective_count,
    mover,
    newcombe_auc,
    wilson,
)


@pytest.mark.parametrize(("k", "n"), [(0, 10), (3, 10), (10, 10), (50, 50), (900, 1000),
                                      (1, 7)])
def test_clopper_pearson_and_wilson_equal_scipy(k: int, n: int) -> None:
    exact = stats.binomtest(k, n).proportion_ci(0.95, method="exact")
    score = stats.binomtest(k, n).proportion_ci(0.95, method="wilson")
    assert [float(v) for v in clopper_pearson(k, n, 0.95)] == pytest.approx(
        [exact.low, exact.high], abs=1e-12)
    assert [float(v) for v in wilson(k, n, 0.95)] == pytest.approx([score.low, score.high],
                                                                   abs=1e-12)


def test_a_perfect_score_is_not_a_point() -> None:
    low, high = clopper_pearson(50, 50, 0.95)
    assert float(low) == pytest.approx(0.025 ** (1 / 50)) and float(high) == 1.0  # 0.9289


def test_clopper_pearson_covers_where_wilson_does_not() -> None:
    """Exact coverage (binomial sums, no simulation) at the accuracies gates care about:
    the reason proportions use Clopper–Pearson (issue 21.1: Wilson 92 % at 0.99)."""
    for n, p in ((100, 0.995), (100, 0.99), (200, 0.995), (50, 0.9), (1000, 0.999)):
        k = np.arange(n + 1)
        with np.errstate(divide="ignore", under="ignore"):  # scipy 1.11 (the floor) warns at p near 1
            mass = stats.binom.pmf(k, n, p)
        lo, hi = clopper_pearson(k, n, 0.95)
        assert mass[(lo <= p) & (p <= hi)].sum() >= 0.95
    k = np.arange(101)
    lo, hi = wilson(k, 100, 0.95)
    mass = stats.binom.pmf(k, 100, 0.995)
    assert mass[(lo <= 0.995) & (0.995 <= hi)].sum() == pytest.approx(0.910, abs=0.001)


def test_fractional_counts_and_no_rows() -> None:
    low, high = clopper_pearson([2.5, 0.0], [5.0, 0.0], 0.95)
    assert 0 < low[0] < 0.5 < high[0] < 1 and np.isnan(low[1]) and np.isnan(high[1])
    assert effective_count(np.ones(7)) == pytest.approx(7)
    assert effective_count(np.array([1.0, 1.0, 2.0])) == pytest.approx(16 / 6)
    assert effective_count(np.full(7, 3.5)) == pytest.approx(7)  # scale-free


def test_mover_is_zou_and_donner() -> None:
    est, lo, hi = np.array([0.8, 0.6]), np.array([0.7, 0.45]), np.array([0.85, 0.7])
    low, high = mover(est, lo, hi)
    assert low == pytest.approx(0.7 - np.hypot(0.1, 0.15) / 2)
    assert high == pytest.approx(0.7 + np.hypot(0.05, 0.1) / 2)
    low1, high1 = mover(est, lo, hi, np.ones((2, 2)))  # perfectly correlated: mean of bounds
    assert (low1, high1) == pytest.approx((lo.mean(), hi.mean()))


def _delong_by_hand(score: np.ndarray, positive: np.ndarray) -> tuple[float, float]:
    """DeLong, DeLong & Clarke-Pearson (1988), every pair compared explicitly."""
    x, y = score[positive], score[~positive]
    psi = (x[:, None] > y[None, :]) + 0.5 * (x[:, None] == y[None, :])
    v10, v01 = psi.mean(axis=1), psi.mean(axis=0)
    return float(psi.mean()), float(v10.var(ddof=1) / x.size + v01.var(ddof=1) / y.size)


def test_delong_equals_the_pairwise_definition() -> None:
    rng = np.random.default_rng(0)
    positive = rng.random(120) < 0.3
    score = np.round(rng.normal(size=120) + positive, 1)  # ties
    auc, psi_pos, psi_neg = delong(score, positive, np.ones(120))
    var = delong_variance(np.ones(positive.sum()), psi_pos, np.ones((~positive).sum()), psi_neg)
    want_auc, want_var = _delong_by_hand(score, positive)
    assert auc == pytest.approx(want_auc, abs=1e-12)
    assert var == pytest.approx(want_var, rel=1e-12)


def test_delong_with_integer_weights_equals_repeated_rows_for_the_auc() -> None:
    rng = np.random.default_rng(1)
    positive = rng.random(80) < 0.4
    score = rng.normal(size=80) + positive
    w = rng.integers(1, 4, 80).astype(float)
    auc = delong(score, positive, w)[0]
    rows = np.repeat(np.arange(80), w.astype(int))
    assert auc == pytest.approx(_delong_by_hand(score[rows], positive[rows])[0], abs=1e-12)


def test_newcombe_solves_its_score_equation() -> None:
    def v(t: float, m: int, n: int) -> float:  # Newcombe (2006), method 5
        big = (m + n) / 2
        return t * (1 - t) / (m * n) * ((2 * big - 1) - (3 * big - 3) / ((2 - t) * (1 + t)))

    z2 = stats.norm.ppf(0.975) ** 2
    for auc, m, n in ((0.8, 20, 30), (1.0, 5, 45), (0.95, 10, 90), (0.0, 4, 4)):
        low, high = newcombe_auc(auc, m, n, 0.95)
        for bound in (low, high):
            if 0 < bound < 1:
                assert (auc - bound) ** 2 == pytest.approx(z2 * v(bound, m, n), rel=1e-6)
        if auc == 1.0:
            assert high == 1.0
            def top(t: float, m: int = m, n: int = n) -> float:
                return (1 - t) ** 2 - z2 * v(t, m, n)

            assert low == pytest.approx(brentq(top, 0.01, 1 - 1e-9), abs=1e-9)
            assert low < 0.9  # 5 positives, all ranked first: far from certain
        assert low <= auc <= high


def test_bootstrap_t_is_the_studentized_interval() -> None:
    rng = np.random.default_rng(2)
    v = rng.exponential(size=40)
    idx = rng.integers(0, 40, (2000, 40))
    means, ses = v[idx].mean(axis=1), v[idx].std(axis=1, ddof=1) / np.sqrt(40)
    est, se = v.mean(), v.std(ddof=1) / np.sqrt(40)
    low, high = bootstrap_t(est, se, means, ses, 0.95)
    t = (means - est) / ses
    assert low == pytest.approx(est - np.quantile(t, 0.975) * se)
    assert high == pytest.approx(est - np.quantile(t, 0.025) * se)
    assert high - est > est - low  # a right-skewed mean gets the longer upper side
    assert bootstrap_t(1.0, 0.0, means, ses, 0.95) == (1.0, 1.0)
