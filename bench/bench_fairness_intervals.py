"""Coverage of the fairness-gap intervals: the simultaneous Wilson interval that
``evaluate(sensitive=...)`` reports, against a percentile bootstrap over rows (the
obvious alternative), on simulated test sets whose true gap is known.

A gap is max - min of a per-group rate (the positive-prediction rate for demographic
parity, the true-positive rate for equal opportunity: both are proportions per group,
so one simulation covers both). For each cell of the grid (number of groups, rows per
group, base rate, true gap) it draws ``sims`` test sets, computes each method's 95 %
interval, and records how often it covers the true gap and how wide it is on average.
The goal is >= 93 % coverage in every cell, a true gap of 0 included.

The bootstrap is simulated exactly rather than by materialising rows: resampling N rows
with replacement gives group g a Multinomial(N, n_g/N) number of rows, each positive
with probability k_g/n_g, so its resampled rate is Binomial(n*_g, k_g/n_g)/n*_g.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from typing import Any

import numpy as np

from _common import finish


def _bootstrap(hits: Any, sizes: Any, rng: Any, resamples: int,
               confidence: float) -> tuple[float, float]:
    n = int(sizes.sum())
    drawn = rng.multinomial(n, sizes / n, size=resamples)
    pos = rng.binomial(drawn, hits / sizes)
    with np.errstate(invalid="ignore", divide="ignore"):
        rates = pos / drawn
    ok = np.all(drawn > 0, axis=1)  # a resample that lost a group has no gap
    gaps = rates[ok].max(axis=1) - rates[ok].min(axis=1)
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(gaps, [alpha, 1.0 - alpha])
    return float(low), float(high)


def run(sims: int, resamples: int, seed: int = 0) -> dict[str, Any]:
    from reprise.evaluate._slices import gap_interval

    rng = np.random.default_rng(seed)
    confidence = 0.95
    cells = []
    for groups, per_group, base, gap in itertools.product((2, 4), (30, 100, 1000),
                                                          (0.1, 0.5), (0.0, 0.1, 0.3)):
        rates = np.full(groups, base)
        rates[-1] = base + gap  # one group apart; the others at the base rate
        truth = float(rates.max() - rates.min())
        # group sizes vary around per_group (half to one and a half times)
        sizes = rng.integers(per_group // 2, per_group * 3 // 2 + 1, (sims, groups))
        hits = rng.binomial(sizes, rates)
        wilson = [gap_interval(list(zip(h.tolist(), s.tolist(), strict=True)), confidence)
                  for h, s in zip(hits, sizes, strict=True)]
        boot = [_bootstrap(h, s, rng, resamples, confidence)
                for h, s in zip(hits, sizes, strict=True)]
        w_low = np.array([w["ci_low"] for w in wilson])
        w_high = np.array([w["ci_high"] for w in wilson])
        b_low, b_high = np.array(boot).T
        cells.append({
            "groups": groups, "rows_per_group": per_group, "base_rate": base, "true_gap": truth,
            "wilson_coverage": float(np.mean((w_low <= truth) & (truth <= w_high))),
            "wilson_mean_width": float(np.mean(w_high - w_low)),
            "bootstrap_coverage": float(np.mean((b_low <= truth) & (truth <= b_high))),
            "bootstrap_mean_width": float(np.mean(b_high - b_low))})
    return {"cells": cells, "sims": sims, "resamples": resamples, "confidence": confidence}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="100 test sets per cell, no file")
    ap.add_argument("--sims", type=int, default=1000)
    args = ap.parse_args(argv)
    sims = 100 if args.quick else args.sims
    out = run(sims, resamples=200 if args.quick else 1000)
    cells = out["cells"]
    worst_w = min(cells, key=lambda c: c["wilson_coverage"])
    worst_b = min(cells, key=lambda c: c["bootstrap_coverage"])
    print(f"  {'groups':>6} {'rows':>5} {'base':>5} {'gap':>5}  {'Wilson cov':>10} {'width':>6}"
          f"  {'bootstrap cov':>13} {'width':>6}")
    for c in cells:
        print(f"  {c['groups']:>6} {c['rows_per_group']:>5} {c['base_rate']:>5} "
              f"{c['true_gap']:>5.2f}  {c['wilson_coverage']:>10.3f} "
              f"{c['wilson_mean_width']:>6.3f}  {c['bootstrap_coverage']:>13.3f} "
              f"{c['bootstrap_mean_width']:>6.3f}")
    result = {
        "goal": "every cell's 95 % interval covers the true gap in >= 93 % of test sets",
        "peer": "percentile bootstrap over rows of max - min (1,000 resamples)",
        "figures": {"wilson_worst_coverage": worst_w["wilson_coverage"],
                    "bootstrap_worst_coverage": worst_b["bootstrap_coverage"],
                    "wilson_median_width": float(np.median(
                        [c["wilson_mean_width"] for c in cells])),
                    "bootstrap_median_width": float(np.median(
                        [c["bootstrap_mean_width"] for c in cells]))},
        "ratios": {"wilson_vs_bootstrap_median_width": float(
            np.median([c["wilson_mean_width"] / c["bootstrap_mean_width"] for c in cells]))},
        "worst_cells": {"wilson": worst_w, "bootstrap": worst_b},
        **out}
    finish("fairness_intervals", result, quick=args.quick)


if __name__ == "__main__":
    main(sys.argv[1:])
