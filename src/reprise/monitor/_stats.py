"""Two-sample statistics on binned summaries: plain functions of count vectors.

Every function takes the reference's and the window's counts on the same bins, so it
works for any window, merged from any batches and processes. The distributions behind
the p-values come from scipy; the rest is a few lines of numpy, written here because
they read summaries where scipy's functions want raw values.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["adjust", "chi2_test", "js_distance", "ks_binned", "missing_test",
           "wasserstein_binned"]


def ks_binned(ref: np.ndarray, cur: np.ndarray) -> tuple[float, float, float]:
    """The two-sample Kolmogorov-Smirnov statistic on a binned CDF, its p-value, and how
    much the binning may hide: ``(D, p, error)``.

    ``D`` is the largest CDF difference at the bin boundaries, exact there; between two
    boundaries the true difference can be larger by at most the larger share of that bin
    (``error``), so ``D`` never overstates the drift and its p-value errs toward no alarm.
    The p-value is Kolmogorov's limiting distribution (``scipy.special.kolmogorov``) at
    ``(√n + 0.12 + 0.11/√n)·D`` with ``n = n1 n2 / (n1 + n2)``, Stephens' correction for
    finite samples: within a few per cent of the finite-sample distribution
    (``scipy.stats.kstwo``) wherever p > 1e-8 and n ≥ 30 (a test checks it), and a
    ufunc call instead of scipy.stats (whose import alone costs more than a window).
    """
    from scipy.special import kolmogorov

    n1, n2 = int(ref.sum()), int(cur.sum())
    f1, f2 = np.cumsum(ref) / n1, np.cumsum(cur) / n2
    d = float(np.max(np.abs(f1 - f2)))
    inner = slice(1, len(ref) - 2)  # the interval bins (tails and the maximum are points)
    error = float(max((ref[inner] / n1).max(initial=0.0), (cur[inner] / n2).max(initial=0.0)))
    root = math.sqrt(n1 * n2 / (n1 + n2))
    p = float(kolmogorov((root + 0.12 + 0.11 / root) * d)) if d > 0 else 1.0
    return d, min(max(p, 0.0), 1.0), error


def wasserstein_binned(ref: np.ndarray, cur: np.ndarray, edges: np.ndarray,
                       ref_tails: tuple[float, float], cur_tails: tuple[float, float]) -> float:
    """The 1-Wasserstein distance ``∫|F_ref - F_cur| dx`` between two binned samples.

    Inside the reference's range each bin's mass is taken as spread evenly over it (the
    CDFs are linear there), so the integral is exact up to the shape inside one fine bin.
    Beyond the range, ``*_tails`` (the sums of the values below the minimum and above the
    maximum) make it exact when only one side has values there (the reference never
    has; when both do, ``|∫F_ref - ∫F_cur|`` is used, a lower bound).
    """
    n1, n2 = float(ref.sum()), float(cur.sum())
    c1, c2 = np.cumsum(ref) / n1, np.cumsum(cur) / n2
    # CDF just below each edge: edges[j] has F = share of bins 0..j
    g = c1[: len(edges)] - c2[: len(edges)]
    widths = np.diff(edges)
    a, b = g[:-1], g[1:]
    same = a * b >= 0
    denom = np.abs(a) + np.abs(b)
    crossing = np.divide(a * a + b * b, 2 * denom, out=np.zeros_like(a), where=denom > 0)
    inside = float(np.sum(widths * np.where(same, (np.abs(a) + np.abs(b)) / 2, crossing)))
    lo, hi = float(edges[0]), float(edges[-1])
    below = abs((ref[0] * lo - ref_tails[0]) / n1 - (cur[0] * lo - cur_tails[0]) / n2)
    above = abs((ref_tails[1] - ref[-1] * hi) / n1 - (cur_tails[1] - cur[-1] * hi) / n2)
    return float(inside + below + above)


def js_distance(p_counts: np.ndarray, q_counts: np.ndarray) -> float:
    """The Jensen-Shannon distance (square root of the divergence, base 2: 0 to 1)
    between two count vectors on the same bins."""
    p = p_counts / p_counts.sum()
    q = q_counts / q_counts.sum()
    m = (p + q) / 2
    with np.errstate(divide="ignore", invalid="ignore"):
        kl_p = np.where(p > 0, p * np.log2(p / m), 0.0).sum()
        kl_q = np.where(q > 0, q * np.log2(q / m), 0.0).sum()
    return float(math.sqrt(max(0.0, (kl_p + kl_q) / 2)))


def chi2_test(ref: np.ndarray, cur: np.ndarray) -> tuple[float, float, int]:
    """Pearson's χ² test of homogeneity of two count vectors: ``(statistic, p, dof)``.

    Cells where the window's expected count is under 5 are pooled into one cell (the usual
    validity condition of the χ² approximation); categories neither sample has are
    dropped. The same statistic as ``scipy.stats.chi2_contingency(correction=False)``,
    with its tail from ``scipy.special.chdtrc``.
    """
    from scipy.special import chdtrc

    keep = (ref + cur) > 0
    ref, cur = ref[keep].astype(np.float64), cur[keep].astype(np.float64)
    expected = (ref + cur) * cur.sum() / (ref.sum() + cur.sum())
    small = expected < 5
    if small.sum() > 1:
        ref = np.append(ref[~small], ref[small].sum())
        cur = np.append(cur[~small], cur[small].sum())
    if len(ref) < 2:
        return 0.0, 1.0, 0
    table = np.vstack([ref, cur])
    exp = np.outer(table.sum(axis=1), table.sum(axis=0)) / table.sum()
    stat = float(((table - exp) ** 2 / exp).sum())
    dof = len(ref) - 1
    return stat, float(chdtrc(dof, stat)), dof


def missing_test(ref_missing: int, ref_rows: int, cur_missing: int,
                 cur_rows: int) -> float:
    """The two-sided p-value that the missing rate is unchanged: Pearson's χ² on the 2×2
    table when every expected count is at least 5, else Fisher's exact test (the χ² is
    the same test at a fraction of the cost where its approximation holds). 1.0 when
    neither sample has a missing value, or every value is missing in both."""
    total_missing = ref_missing + cur_missing
    total = ref_rows + cur_rows
    if total_missing == 0 or total_missing == total:
        return 1.0
    table = np.array([[ref_missing, ref_rows - ref_missing],
                      [cur_missing, cur_rows - cur_missing]], dtype=np.float64)
    expected = np.outer(table.sum(axis=1), table.sum(axis=0)) / total
    if expected.min() >= 5:
        from scipy.special import chdtrc

        stat = float(((table - expected) ** 2 / expected).sum())
        return float(chdtrc(1, stat))
    from scipy.stats import fisher_exact

    return float(fisher_exact(table.astype(np.int64).tolist())[1])


def adjust(p_values: Sequence[float], method: str) -> list[float]:
    """Adjusted p-values for a family of tests: ``holm`` (step-down Holm-Bonferroni, which
    bounds the family-wise error rate under any dependence) or ``bh`` (Benjamini-Hochberg
    step-up, which bounds the false discovery rate for independent or positively
    dependent tests). A test is rejected at level α when its adjusted p-value is ≤ α.

    Written out here (a few lines) because scipy 1.10, the oldest supported, has neither
    and statsmodels is not a dependency.

    Example:
        >>> [round(p, 3) for p in adjust([0.01, 0.04, 0.03], "holm")]
        [0.03, 0.06, 0.06]
    """
    p = np.asarray(p_values, dtype=np.float64)
    m = len(p)
    if m == 0:
        return []
    order = np.argsort(p, kind="stable")
    ranked = p[order]
    if method == "holm":
        stepped = np.maximum.accumulate(ranked * (m - np.arange(m)))
    elif method == "bh":
        stepped = np.minimum.accumulate((ranked * m / np.arange(1, m + 1))[::-1])[::-1]
    else:
        raise ValueError(f"unknown correction {method!r}")
    out = np.empty(m)
    out[order] = np.minimum(stepped, 1.0)
    return [float(v) for v in out]


def gaussian_tail(value: float, mean: float, std: float) -> float:
    """``P(Z > (value - mean) / std)`` for a normal Z: the p-value that NannyML's
    ``mean + k·std`` threshold implies (0 or 1 when ``std`` is 0)."""
    if std <= 0:
        return 0.0 if value > mean else 1.0
    return float(0.5 * math.erfc((value - mean) / std / math.sqrt(2)))


def as_floats(values: Any) -> list[float]:
    return [float(v) for v in values]
