"""The statistics on binned summaries agree with scipy on raw values."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from scipy import stats

from reprise.monitor import Window, fit_reference
from reprise.monitor._stats import adjust, chi2_test, js_distance, ks_binned, wasserstein_binned


def _pair(x: np.ndarray, y: np.ndarray) -> tuple[object, object]:
    ref = fit_reference(pa.table({"v": x}), chunks=4)
    w = Window(ref)
    w.update(pa.table({"v": y}))
    return ref.columns["v"], w.columns["v"]


def test_ks_on_discrete_values_equals_scipy() -> None:
    rng = np.random.default_rng(0)
    x, y = rng.poisson(4, 20_000).astype(float), rng.poisson(4.3, 800).astype(float)
    r, c = _pair(x, y)
    d, p, _ = ks_binned(r.counts, c.counts)  # type: ignore[attr-defined]
    ref = stats.ks_2samp(x, y, method="asymp")
    assert d == pytest.approx(ref.statistic, abs=1e-12)
    assert p == pytest.approx(ref.pvalue, rel=0.05)


@pytest.mark.parametrize("n1, n2", [(100_000, 30), (100_000, 1000), (20_000, 10_000),
                                    (500, 500)])
def test_ks_p_value_is_close_to_the_finite_sample_distribution(n1: int, n2: int) -> None:
    en = n1 * n2 / (n1 + n2)
    for d in np.linspace(0.2, 6.0, 30) / np.sqrt(en):  # p from about 1 to 1e-15
        # two samples whose CDFs differ by about d at one point
        half = round(n2 * min(0.5 + d, 1.0))
        a = np.array([n1 // 2, 0, n1 - n1 // 2])
        b = np.array([half, 0, n2 - half])
        dd, p, _ = ks_binned(a, b)
        exact = float(stats.kstwo.sf(dd, round(en)))
        if exact > 1e-8:
            assert p == pytest.approx(exact, rel=0.06, abs=2e-3), (n1, n2, dd)


def test_ks_on_continuous_values_is_within_its_error_bound() -> None:
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=30_000), rng.normal(0.1, 1.2, size=3000)
    y[:5] = [-9.0, 9.0, 12.0, -20.0, 30.0]  # beyond the reference's range
    r, c = _pair(x, y)
    d, p, err = ks_binned(r.counts, c.counts)  # type: ignore[attr-defined]
    exact = stats.ks_2samp(x, y).statistic
    assert d <= exact + 1e-12 <= d + err + 1e-12
    assert err < 0.01


def test_wasserstein_matches_scipy() -> None:
    rng = np.random.default_rng(2)
    x, y = rng.normal(size=30_000), rng.normal(0.5, 1.5, size=5000)
    y[:3] = [15.0, -12.0, 40.0]
    r, c = _pair(x, y)
    w = wasserstein_binned(r.counts, c.counts, r.spec.edges,  # type: ignore[attr-defined]
                           (r.low_sum, r.high_sum), (c.low_sum, c.high_sum))  # type: ignore[attr-defined]
    assert w == pytest.approx(stats.wasserstein_distance(x, y), rel=0.01)


def test_js_and_chi2_match_scipy() -> None:
    a, b = np.array([400, 300, 200, 100]), np.array([20, 50, 20, 10])
    assert js_distance(a, b) == pytest.approx(
        float(stats.entropy  # noqa: F841 - only to show the module is scipy's
              and __import__("scipy.spatial.distance").spatial.distance.jensenshannon(
                  a / a.sum(), b / b.sum(), base=2)), rel=1e-9)
    stat, p, dof = chi2_test(a, b)
    ref = stats.chi2_contingency(np.vstack([a, b]), correction=False)
    assert (stat, dof) == (pytest.approx(ref[0]), ref[2]) and p == pytest.approx(ref[1])


def test_chi2_pools_sparse_cells() -> None:
    a, b = np.array([5000, 4000, 10, 5, 0]), np.array([50, 40, 1, 0, 3])
    _, p, dof = chi2_test(a, b)
    assert dof == 2 and 0 <= p <= 1  # the three sparse cells pooled into one


def test_holm_and_bh_by_hand() -> None:
    p = [0.01, 0.04, 0.03, 0.005]
    assert adjust(p, "holm") == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert adjust(p, "bh") == pytest.approx([0.02, 0.04, 0.04, 0.02])
    assert adjust([], "holm") == []
