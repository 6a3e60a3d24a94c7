"""Interval formulas with known behaviour: exact binomial, MOVER, DeLong, Newcombe, BCa.

Pure functions of counts, scores and resampled values; which metric uses which is
decided in :mod:`reprise.evaluate._confidence`. Sample weights enter as Kish's
effective sample size, ``(sum w)**2 / sum w**2``: equal weights change nothing,
unequal ones count for fewer rows (a row weighing 10 is not 10 independent rows).
Everything here is hand-written on ``scipy.special`` because neither scipy nor
scikit-learn offers these intervals on weighted, vectorised inputs (scipy's
``binomtest`` takes one integer count at a time; nothing offers DeLong).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from reprise.evaluate._inputs import Array

__all__ = ["bca", "bootstrap_t", "clopper_pearson", "delong", "delong_variance",
           "effective_count", "logit_interval", "mover", "newcombe_auc", "wilson", "z_value"]


def z_value(confidence: float) -> float:
    """The two-sided normal quantile: 1.96 for 0.95."""
    from scipy.special import ndtri

    return float(ndtri(0.5 + confidence / 2.0))


def effective_count(w: Array, axis: int | None = None) -> Any:
    """Kish's effective number of rows of weights ``w``: n when all are equal."""
    total = np.sum(w, axis=axis)
    squares = np.sum(np.square(w), axis=axis)
    return np.divide(total * total, squares, out=np.zeros_like(np.asarray(total, float)),
                     where=np.asarray(squares) > 0)


def clopper_pearson(k: Any, n: Any, confidence: float) -> tuple[Array, Array]:
    """Clopper–Pearson ("exact") interval of the proportion ``k / n`` (elementwise).

    Chosen over Wilson for proportions: it covers at least the nominal level for every
    n and true proportion, where Wilson dips below it exactly where gates matter: for
    accuracy 0.995 on 100 rows, Wilson's interval holds the truth with probability 91.0 %
    (2 errors already exclude 0.995), Clopper–Pearson's with 98.6 % (exact binomial
    sums; 0.99 on 100 rows: 92.1 % vs 98.2 %). The cost is little width: 50/50 gives
    [0.9289, 1] (Wilson [0.9287, 1]), 900/1000 [0.8797, 0.9179] (Wilson [0.8798, 0.9171]).
    ``k`` and ``n`` may be fractional (effective counts of weighted rows); NaN where
    ``n`` is 0.
    """
    from scipy.special import betaincinv

    k, n = np.broadcast_arrays(np.asarray(k, np.float64), np.asarray(n, np.float64))
    alpha = 1.0 - confidence
    ok = n > 0
    k, n = np.where(ok, np.clip(k, 0.0, n), 0.5), np.where(ok, n, 1.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        low = np.where(k > 0, betaincinv(np.maximum(k, 1e-300), n - k + 1, alpha / 2), 0.0)
        high = np.where(k < n, betaincinv(k + 1, np.maximum(n - k, 1e-300), 1 - alpha / 2),
                        1.0)
    return np.where(ok, low, np.nan), np.where(ok, high, np.nan)


def wilson(k: Any, n: Any, confidence: float) -> tuple[Array, Array]:
    """Wilson's score interval of ``k / n`` (elementwise; NaN where ``n`` is 0)."""
    k, n = np.broadcast_arrays(np.asarray(k, np.float64), np.asarray(n, np.float64))
    z = z_value(confidence)
    with np.errstate(invalid="ignore", divide="ignore"):
        centre = (k + z * z / 2) / (n + z * z)
        half = z / (n + z * z) * np.sqrt(np.maximum(k * (n - k) / n, 0.0) + z * z / 4)
    ok = n > 0
    return (np.where(ok, np.maximum(centre - half, 0.0), np.nan),
            np.where(ok, np.minimum(centre + half, 1.0), np.nan))


def mover(estimates: Array, low: Array, high: Array,
          corr: Array | None = None) -> tuple[float, float]:
    """Interval of the mean of ``estimates`` from their own intervals (Zou & Donner's MOVER).

    The "method of variance estimates recovery" reads each component's variance off its
    interval, on the side the bound lies (so asymmetric intervals such as Clopper–Pearson
    near 1 keep their shape): ``L = mean - sqrt(sum_ij r_ij (e_i - l_i)(e_j - l_j)) / K``.
    ``corr`` is the components' correlation matrix (identity: independent).
    """
    e, lo, hi = (np.asarray(a, np.float64) for a in (estimates, low, high))
    r = np.eye(e.size) if corr is None else corr
    k = e.size
    down, up = e - lo, hi - e
    mean = float(e.mean())
    return (mean - float(np.sqrt(max(float(down @ r @ down), 0.0))) / k,
            mean + float(np.sqrt(max(float(up @ r @ up), 0.0))) / k)


def logit_interval(estimate: float, se: float, confidence: float) -> tuple[float, float]:
    """A Wald interval on the logit scale (delta method), mapped back into (0, 1)."""
    from scipy.special import expit, logit

    half = z_value(confidence) * se / (estimate * (1.0 - estimate))
    centre = float(logit(estimate))
    return float(expit(centre - half)), float(expit(centre + half))


def delong(score: Array, positive: Array, weight: Array) -> tuple[float, Array, Array]:
    """ROC AUC and DeLong's per-row placement values, weighted.

    Returns ``(auc, psi_pos, psi_neg)``: for each positive, its weighted share of negatives
    scored below it (ties count half) minus the AUC, and for each negative, the share of
    positives above it minus the AUC. DeLong's variance is
    ``sum(w_pos**2 psi_pos**2) / W_pos**2 * m/(m-1) + (same for negatives)`` (Sun & Xu's
    O(n log n) form, with Kish's effective counts for m and n).
    """
    pos, neg = score[positive], score[~positive]
    wp, wn = weight[positive], weight[~positive]
    on, op = np.argsort(neg, kind="stable"), np.argsort(pos, kind="stable")
    sn, sp = neg[on], pos[op]
    cn = np.concatenate([[0.0], np.cumsum(wn[on])])
    cp = np.concatenate([[0.0], np.cumsum(wp[op])])
    below = cn[np.searchsorted(sn, pos, "left")]
    tied = cn[np.searchsorted(sn, pos, "right")] - below
    v10 = (below + 0.5 * tied) / cn[-1]
    lo, hi = cp[np.searchsorted(sp, neg, "left")], cp[np.searchsorted(sp, neg, "right")]
    v01 = (cp[-1] - hi + 0.5 * (hi - lo)) / cp[-1]
    auc = float(wp @ v10 / cp[-1])
    return auc, v10 - auc, v01 - auc


def delong_variance(weight_pos: Array, psi_pos: Array, weight_neg: Array,
                    psi_neg: Array) -> float:
    """DeLong's variance of the AUC from :func:`delong`'s placements (NaN below 2 rows a side)."""
    total = 0.0
    for w, psi in ((weight_pos, psi_pos), (weight_neg, psi_neg)):
        m = float(effective_count(w))
        if m < 1.5:
            return float("nan")
        total += float((w * w) @ (psi * psi)) / float(w.sum()) ** 2 * m / (m - 1.0)
    return total


def newcombe_auc(auc: float, m: float, n: float, confidence: float) -> tuple[float, float]:
    """Newcombe's (2006, method 5) score interval for the AUC of m positives, n negatives.

    Solves ``(auc - t)**2 = z**2 V(t)`` for t, with Hanley & McNeil's variance of an AUC
    t in which both sample sizes are replaced by their mean N: ``V(t) = t(1-t)/(m n) *
    (2N - 1 - 3(N - 1) / ((2 - t)(1 + t)))``. Like Wilson's interval for a proportion it
    is never zero-width, also at AUC 1 (complete separation), where DeLong's collapses.
    """
    from scipy.optimize import brentq

    z2 = z_value(confidence) ** 2
    half_n = (m + n) / 2.0

    def gap(t: float) -> float:
        v = t * (1 - t) / (m * n) * (2 * half_n - 1 - 3 * (half_n - 1) / ((2 - t) * (1 + t)))
        return (auc - t) ** 2 - z2 * v

    eps = 1e-12
    low = 0.0 if auc <= eps else brentq(gap, 0.0, min(auc, 1 - eps), xtol=1e-12)
    high = 1.0 if auc >= 1 - eps else brentq(gap, max(auc, eps), 1.0, xtol=1e-12)
    return float(low), float(high)


def bca(estimate: float, boot: Array, jack: Array, confidence: float) -> tuple[float, float]:
    """Efron's bias-corrected and accelerated bootstrap interval.

    ``boot``: the statistic on each resample (NaN where undefined, skipped); ``jack``:
    on each jackknife deletion (one row or one group of rows each). The bias correction
    counts resamples equal to the estimate as half below (discrete statistics); the
    acceleration is the jackknife skewness ``sum(u**3) / (6 (sum(u**2))**1.5)``.
    """
    from scipy.special import ndtr, ndtri

    boot = boot[np.isfinite(boot)]
    jack = jack[np.isfinite(jack)]
    b = boot.size
    if b == 0 or not np.isfinite(estimate):
        return float("nan"), float("nan")
    below = (np.count_nonzero(boot < estimate) + 0.5 * np.count_nonzero(boot == estimate)) / b
    z0 = float(ndtri(np.clip(below, 0.5 / b, 1 - 0.5 / b)))
    u = jack.mean() - jack if jack.size else np.zeros(1)
    spread = float(np.sum(u * u))
    accel = float(np.sum(u ** 3)) / (6.0 * spread ** 1.5) if spread > 0 else 0.0
    z = np.array([-z_value(confidence), z_value(confidence)])
    den = 1.0 - accel * (z0 + z)
    # a huge acceleration can flip the denominator's sign: the bound goes to the extreme
    levels = np.where(den > 0, ndtr(z0 + (z0 + z) / np.where(den > 0, den, 1.0)), [0.0, 1.0])
    low, high = np.quantile(boot, levels)
    return float(low), float(high)


def bootstrap_t(estimate: float, se: float, boot: Array, boot_se: Array,
                confidence: float) -> tuple[float, float]:
    """The studentized ("bootstrap-t") interval: the quantiles of ``(boot - estimate) /
    boot_se`` replace the normal ones, so a skewed statistic gets a longer tail on the side
    it needs (a mean of rare large losses: the upper side). Resamples without spread are
    skipped (their t is undefined)."""
    ok = np.isfinite(boot) & np.isfinite(boot_se) & (boot_se > 0)
    if not np.isfinite(estimate) or not np.isfinite(se):
        return float("nan"), float("nan")
    if se <= 0 or not ok.any():
        return estimate, estimate  # no spread in the data: nothing to widen by
    t = (boot[ok] - estimate) / boot_se[ok]
    alpha = (1.0 - confidence) / 2.0
    upper_t, lower_t = np.quantile(t, [1.0 - alpha, alpha])
    return float(estimate - upper_t * se), float(estimate - lower_t * se)
