"""Coverage of the evaluation's confidence intervals, by simulation (issue 21).

For every cell of a grid, ``--sets`` (1,000) test sets are drawn from a model whose true
metric values are known, ``reprise.evaluate``'s intervals are computed on each
(``confidence_intervals``, the function ``evaluate`` calls, at 95 %), and the share of
intervals that hold the truth is the coverage. Goal: >= 93 % in every cell.

Families (truths by quadrature, or for multiclass and regression by Monte Carlo on
1 (multiclass) or 4 (regression) million rows, whose error is far below any interval's width):

* ``binormal``: binary, scores N(0, 1) for negatives and N(d, 1) for positives with
  d = sqrt(2) * probit(AUC), probabilities the exact posterior (perfectly calibrated),
  labels predicted for the top ``prevalence`` share of scores. n 50..1,000 x prevalence
  5..50 % x AUC 0.6..0.99, and at n = 5,000 the corners (prevalence 5 or 50 %, AUC 0.6,
  0.9, 0.99; the costliest cells, where every method is closest to its asymptotics):
  every binary metric (ROC/PR AUC, log loss, Brier, calibration
  error whose truth is 0, accuracy, precision, recall, F1, balanced accuracy, macro ones).
* ``accuracy``: each row right with probability ``accuracy`` (up to 0.995), whatever its
  class: accuracy, precision, recall, F1, balanced accuracy and macro averages.
* ``miscalibrated``: binormal probabilities sharpened or flattened (logit x 1.5 or x 0.6):
  calibration error (its truth now > 0), log loss, Brier.
* ``multiclass``: 3 classes (50/30/20 %), class-mean scores in 3-D, exact posteriors.
* ``regression``: y = 20 + a u + e, u uniform, e normal, Laplace or skewed (shifted
  lognormal, sigma 0.5: skewness 1.8), all truncated at 6 standard deviations so every
  moment (and MAPE) is finite; R² 0.5 or 0.9: MAE, RMSE, R², MAPE.
* ``stress`` (outside the goal, reported beside it): what breaks the methods. Binormal
  scores whose positives spread 3 times wider than the negatives (ROC AUC's DeLong and
  Newcombe parts each fail there alone), and strongly skewed regression errors
  (lognormal sigma 0.75: skewness 3.3, the squared errors heavier still).

The goal grid is every cell except those expecting fewer than 5 rows of the rarer class
(n = 50 at 5 % prevalence: 2.5 positives, a third of the sets holding none or one); those
are run and reported too, flagged ``in_goal: false``.

A set where a metric is undefined (no positives drawn) does not count for it; ``defined``
says how many did. Bootstrapped methods use ``--resamples`` (default 200, not the 1,000
of ``evaluate``): noise in a bootstrap bound can only lower the measured coverage (the
bound's distribution is smoothed where its density falls off), so a cell that passes
with 200 passes with 1,000, at a fifth of the time. A metric-cell that falls short of the
goal with 200 is rerun on the same test sets with 1,000, what ``evaluate`` uses (both
figures are kept; the table names the resamples of a rerun worst cell). Cells run in
``--jobs`` processes.

    python bench/bench_coverage.py [--quick] [--family binormal] [--sets 1000] [--jobs 2]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import time
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

GOAL = 0.93
NS = (50, 100, 200, 500, 1000, 5000)
BINARY_THRESHOLD = ("accuracy", "balanced_accuracy", "precision", "recall", "f1",
                    "precision_macro", "recall_macro", "f1_macro")
BINARY_PROBA = ("roc_auc", "pr_auc", "log_loss", "brier", "calibration_error")


@dataclass(frozen=True)
class Cell:
    family: str
    n: int
    params: dict[str, Any] = field(hash=False)

    @property
    def label(self) -> str:
        return ", ".join([f"n={self.n}", *(f"{k}={v}" for k, v in self.params.items())])


def cells(family: str | None, quick: bool) -> list[Cell]:
    ns = (100, 1000) if quick else NS
    grids: dict[str, Iterator[Cell]] = {
        "binormal": (Cell("binormal", n, {"prevalence": pr, "auc": a}) for n, pr, a in
                     itertools.product(ns, (0.05, 0.1, 0.2, 0.5), (0.6, 0.75, 0.9, 0.95, 0.99))
                     if (not quick or (pr, a) in ((0.1, 0.95), (0.5, 0.75)))
                     and (n < 5000 or (pr in (0.05, 0.5) and a in (0.6, 0.9, 0.99)))),
        "accuracy": (Cell("accuracy", n, {"prevalence": pr, "accuracy": a}) for n, pr, a in
                     itertools.product(ns, (0.1, 0.5), (0.8, 0.9, 0.95, 0.99, 0.995))
                     if not quick or a in (0.9, 0.995)),
        "miscalibrated": (Cell("miscalibrated", n, {"prevalence": pr, "auc": 0.8, "sharpen": s})
                          for n, pr, s in itertools.product(
                              (100, 500, 2000) if not quick else (500,), (0.2, 0.5), (1.5, 0.6))),
        "multiclass": (Cell("multiclass", n, {"separation": d}) for n, d in
                       itertools.product((100, 500, 2000) if not quick else (500,), (1.0, 2.5))),
        "regression": (Cell("regression", n, {"errors": e, "r2": r}) for n, e, r in
                       itertools.product(ns, ("normal", "laplace", "skewed"), (0.5, 0.9))
                       if not quick or r == 0.9),
        "stress": itertools.chain(
            (Cell("stress", n, {"prevalence": pr, "auc": a, "spread": 3.0}) for n, pr, a in
             itertools.product((100, 1000) if not quick else (1000,), (0.1, 0.5), (0.9, 0.99))),
            (Cell("stress", n, {"errors": "very skewed", "r2": r}) for n, r in
             itertools.product((50, 200, 1000) if not quick else (200,), (0.5, 0.9)))),
    }
    chosen = [family] if family else list(grids)
    return [c for f in chosen for c in grids[f]]


# ---- binary: binormal scores with exact posteriors -------------------------------------

def _binormal(cell: Cell) -> tuple[float, float, float]:
    from scipy.special import logit, ndtri

    prevalence = cell.params["prevalence"]
    d = float(np.sqrt(2.0) * ndtri(cell.params["auc"]))
    return prevalence, d, float(logit(prevalence))


def _posterior(s: Any, d: float, prior_logit: float, sharpen: float = 1.0) -> Any:
    from scipy.special import expit

    return expit(sharpen * (d * s - d * d / 2 + prior_logit))


def _threshold(prevalence: float, d: float) -> float:
    """The score above which the top ``prevalence`` share of the population lies."""
    from scipy.optimize import brentq
    from scipy.special import ndtr

    return float(brentq(lambda t: prevalence * ndtr(d - t) + (1 - prevalence) * ndtr(-t)
                        - prevalence, -20, 20))


def binary_truth(cell: Cell) -> dict[str, float]:
    from scipy import integrate
    from scipy.special import ndtr

    prevalence, d, prior = _binormal(cell)
    sharpen = cell.params.get("sharpen", 1.0)
    t = _threshold(prevalence, d)
    tpr, fpr = float(ndtr(d - t)), float(ndtr(-t))
    truth = _confusion_truth(prevalence, tpr, fpr)

    def density(s: float, pos: bool) -> float:
        mean = d if pos else 0.0
        return float(np.exp(-0.5 * (s - mean) ** 2) / np.sqrt(2 * np.pi))

    def expect(f: Callable[[float, bool], float]) -> float:
        total = 0.0
        for pos, w in ((True, prevalence), (False, 1 - prevalence)):
            def term(s: float, pos: bool = pos) -> float:
                return f(s, pos) * density(s, pos)
            total += w * integrate.quad(term, -12 + d * pos, 12 + d * pos, limit=200)[0]
        return total

    def prob(s: float) -> float:
        return float(_posterior(s, d, prior, sharpen))

    eps = np.finfo(np.float64).eps
    truth["roc_auc"] = cell.params["auc"]
    truth["log_loss"] = expect(lambda s, pos: -np.log(np.clip(prob(s) if pos else 1 - prob(s),
                                                              eps, 1)))
    truth["brier"] = expect(lambda s, pos: (prob(s) - pos) ** 2)
    truth["pr_auc"] = integrate.quad(
        lambda u: prevalence * ndtr(d - u) / (prevalence * ndtr(d - u) + (1 - prevalence)
                                              * ndtr(-u)) * density(u, True),
        d - 12, d + 12, limit=200)[0]
    truth["calibration_error"] = _binned_gap(prevalence, d, prior, sharpen)
    return truth


def _binned_gap(prevalence: float, d: float, prior: float, sharpen: float) -> float:
    """sqrt(sum_b P(b) E[y - p | b]^2) over 10 equal-width bins of the reported p, which
    increases with the score: bin b is the score range [s(b/10), s((b+1)/10)]."""
    from scipy import integrate
    from scipy.special import logit, ndtr

    def score(q: float) -> float:
        return float((logit(q) / sharpen - prior + d * d / 2) / d) if 0 < q < 1 else (
            -np.inf if q <= 0 else np.inf)

    def mixture(s: float) -> float:
        return float((prevalence * np.exp(-0.5 * (s - d) ** 2)
                      + (1 - prevalence) * np.exp(-0.5 * s * s)) / np.sqrt(2 * np.pi))

    def gap(s: float) -> float:  # E[y | s] - p(s), times the density of s
        return float(_posterior(s, d, prior) - _posterior(s, d, prior, sharpen)) * mixture(s)

    total = 0.0
    for b in range(10):
        lo, hi = score(b / 10), score((b + 1) / 10)
        a, c = max(lo, -12.0), min(hi, d + 12.0)
        mass = (prevalence * (ndtr(hi - d) - ndtr(lo - d))
                + (1 - prevalence) * (ndtr(hi) - ndtr(lo)))
        if mass > 1e-15 and c > a:
            g = integrate.quad(gap, a, c, limit=200)[0] / mass
            total += mass * g * g
    return float(np.sqrt(total))


def _confusion_truth(prevalence: float, tpr: float, fpr: float) -> dict[str, float]:
    tp, fn = prevalence * tpr, prevalence * (1 - tpr)
    fp, tn = (1 - prevalence) * fpr, (1 - prevalence) * (1 - fpr)

    def f1(a: float, b: float, c: float) -> float:
        return 2 * a / (2 * a + b + c)

    out = {"accuracy": tp + tn, "balanced_accuracy": (tpr + 1 - fpr) / 2,
           "precision": tp / (tp + fp), "recall": tpr, "f1": f1(tp, fp, fn)}
    out["precision_macro"] = (out["precision"] + tn / (tn + fn)) / 2
    out["recall_macro"] = out["balanced_accuracy"]
    out["f1_macro"] = (out["f1"] + f1(tn, fn, fp)) / 2
    return out


def binary_sample(cell: Cell, rng: np.random.Generator) -> dict[str, Any]:
    prevalence, d, prior = _binormal(cell)
    y = (rng.random(cell.n) < prevalence).astype(int)
    s = rng.normal(size=cell.n) + d * y
    proba = _posterior(s, d, prior, cell.params.get("sharpen", 1.0))
    pred = (s >= _threshold(prevalence, d)).astype(int)
    return {"y": y, "y_pred": pred, "y_proba": proba, "labels": [0, 1]}


# ---- binary labels only: each row right with a given probability ----------------------

def accuracy_truth(cell: Cell) -> dict[str, float]:
    a = cell.params["accuracy"]
    return _confusion_truth(cell.params["prevalence"], a, 1 - a)


def accuracy_sample(cell: Cell, rng: np.random.Generator) -> dict[str, Any]:
    y = (rng.random(cell.n) < cell.params["prevalence"]).astype(int)
    right = rng.random(cell.n) < cell.params["accuracy"]
    return {"y": y, "y_pred": np.where(right, y, 1 - y), "labels": [0, 1]}


# ---- multiclass: Gaussian class means in 3-D, exact posteriors ------------------------

PRIORS = np.array([0.5, 0.3, 0.2])


def multiclass_sample(cell: Cell, rng: np.random.Generator, n: int | None = None
                      ) -> dict[str, Any]:
    n = cell.n if n is None else n
    d = cell.params["separation"]
    y = rng.choice(3, size=n, p=PRIORS)
    s = rng.normal(size=(n, 3)) + d * np.eye(3)[y]
    logits = d * s + np.log(PRIORS)
    proba = np.exp(logits - logits.max(axis=1, keepdims=True))
    return {"y": y, "y_proba": proba / proba.sum(axis=1, keepdims=True), "labels": [0, 1, 2]}


def multiclass_truth(cell: Cell) -> dict[str, float]:
    from reprise.evaluate._inputs import prepare
    from reprise.evaluate._metrics import default_metrics, point_metrics

    data = multiclass_sample(cell, np.random.default_rng(12345), n=1_000_000)
    p = prepare(**data)
    truth = {k: float(v) for k, v in point_metrics(p, default_metrics(p)).items()
             if v is not None}
    truth["calibration_error"] = 0.0  # exact posteriors: top-label calibrated
    return truth


# ---- regression -----------------------------------------------------------------------

def _errors(kind: str, rng: np.random.Generator, n: int) -> Any:
    if kind == "normal":
        e = rng.normal(size=n)
    elif kind == "laplace":
        e = rng.laplace(scale=1 / np.sqrt(2), size=n)
    else:  # shifted lognormal, standardised: right-skewed
        sigma = 0.5 if kind == "skewed" else 0.75
        raw = rng.lognormal(0.0, sigma, size=n)
        e = ((raw - np.exp(sigma**2 / 2))
             / np.sqrt((np.exp(sigma**2) - 1) * np.exp(sigma**2)))
    return np.clip(e, -6, 6)


def regression_sample(cell: Cell, rng: np.random.Generator, n: int | None = None
                      ) -> dict[str, Any]:
    n = cell.n if n is None else n
    r2 = cell.params["r2"]
    a = np.sqrt(r2 / (1 - r2))  # signal variance a^2 against error variance ~1
    u = rng.uniform(-np.sqrt(3), np.sqrt(3), n)
    pred = 20.0 + a * u
    return {"y": pred + _errors(cell.params["errors"], rng, n), "y_pred": pred,
            "task": "regression"}


def regression_truth(cell: Cell) -> dict[str, float]:
    data = regression_sample(cell, np.random.default_rng(12345), n=4_000_000)
    e = data["y"] - data["y_pred"]
    return {"mae": float(np.mean(np.abs(e))), "rmse": float(np.sqrt(np.mean(e * e))),
            "r2": float(1 - np.mean(e * e) / np.var(data["y"])),
            "mape": float(np.mean(np.abs(e) / np.abs(data["y"])))}


# ---- stress: unequal score spreads; strongly skewed regression errors -----------------

def stress_truth(cell: Cell) -> dict[str, float]:
    from scipy import integrate
    from scipy.special import ndtr, ndtri

    if "errors" in cell.params:
        return regression_truth(cell)
    prevalence, spread, auc = (cell.params[k] for k in ("prevalence", "spread", "auc"))
    d = float(np.sqrt(1 + spread**2) * ndtri(auc))

    def precision_density(t: float) -> float:
        tpr, fpr = ndtr((d - t) / spread), ndtr(-t)
        density = np.exp(-0.5 * ((t - d) / spread) ** 2) / (spread * np.sqrt(2 * np.pi))
        return float(prevalence * tpr / (prevalence * tpr + (1 - prevalence) * fpr) * density)

    ap = integrate.quad(precision_density, d - 12 * spread, d + 12 * spread, limit=200)[0]
    return {"roc_auc": auc, "pr_auc": ap}


def stress_sample(cell: Cell, rng: np.random.Generator) -> dict[str, Any]:
    from scipy.special import expit, ndtri

    if "errors" in cell.params:
        return regression_sample(cell, rng)
    prevalence, spread, auc = (cell.params[k] for k in ("prevalence", "spread", "auc"))
    d = float(np.sqrt(1 + spread**2) * ndtri(auc))
    y = (rng.random(cell.n) < prevalence).astype(int)
    s = np.where(y == 1, d + spread * rng.normal(size=cell.n), rng.normal(size=cell.n))
    return {"y": y, "y_proba": expit(s), "labels": [0, 1]}  # any increasing map of s


FAMILIES: dict[str, tuple[Callable[[Cell], dict[str, float]],
                          Callable[[Cell, np.random.Generator], dict[str, Any]],
                          tuple[str, ...]]] = {
    "binormal": (binary_truth, binary_sample, BINARY_THRESHOLD + BINARY_PROBA),
    "accuracy": (accuracy_truth, accuracy_sample, BINARY_THRESHOLD),
    "miscalibrated": (binary_truth, binary_sample, ("calibration_error", "log_loss", "brier")),
    "multiclass": (multiclass_truth, multiclass_sample,
                   ("accuracy", "balanced_accuracy", "precision", "recall", "f1", "roc_auc",
                    "pr_auc", "log_loss", "brier", "calibration_error")),
    "regression": (regression_truth, regression_sample, ("mae", "rmse", "r2", "mape")),
    "stress": (stress_truth, stress_sample, ("roc_auc", "pr_auc", "mae", "rmse", "r2", "mape")),
}


def in_goal(cell: Cell) -> bool:
    """The goal grid: not the stress family, and at least 5 rows of the rarer class
    expected."""
    if cell.family == "stress":
        return False
    prevalence = cell.params.get("prevalence")
    return prevalence is None or cell.n * min(prevalence, 1 - prevalence) >= 5


def run_cell(cell: Cell, sets: int, resamples: int,
             only: tuple[str, ...] = ()) -> dict[str, Any]:
    from reprise.evaluate._confidence import confidence_intervals
    from reprise.evaluate._inputs import prepare

    truth_fn, sample_fn, names = FAMILIES[cell.family]
    truth = truth_fn(cell)
    names = tuple(n for n in names if n in truth and np.isfinite(truth[n])
                  and (not only or n in only))
    seed = zlib.crc32(f"{cell.family} {cell.label}".encode())  # stable across processes
    rng = np.random.default_rng(seed)
    hits = dict.fromkeys(names, 0)
    low_misses = dict.fromkeys(names, 0)
    defined = dict.fromkeys(names, 0)
    width = dict.fromkeys(names, 0.0)
    methods: dict[str, str] = {}
    t0, cpu0 = time.perf_counter(), time.process_time()
    for i in range(sets):
        data = sample_fn(cell, rng)
        if "labels" in data and len(np.unique(data["y"])) < 2:
            continue  # one class drawn: nothing here is defined
        p = prepare(**data)
        ci = confidence_intervals(p, names, resamples=resamples, seed=i)
        for name in names:
            lo, hi = ci[name]["ci_low"], ci[name]["ci_high"]
            methods[name] = ci[name]["ci_method"]
            if lo is None or hi is None:
                continue
            defined[name] += 1
            hits[name] += lo <= truth[name] <= hi
            low_misses[name] += truth[name] < lo
            width[name] += hi - lo
    return {"family": cell.family, "n": cell.n, "params": cell.params, "label": cell.label,
            "in_goal": in_goal(cell), "resamples": resamples,
            "seconds": round(time.perf_counter() - t0, 2),
            "cpu_seconds": round(time.process_time() - cpu0, 2),
            "metrics": {name: {"truth": truth[name], "method": methods.get(name),
                               "defined": defined[name],
                               "coverage": hits[name] / defined[name] if defined[name] else None,
                               "truth_below_interval": (low_misses[name] / defined[name]
                                                        if defined[name] else None),
                               "mean_width": width[name] / defined[name] if defined[name]
                               else None}
                        for name in names}}


def _run(args: tuple[Cell, int, int] | tuple[Cell, int, int, tuple[str, ...]]
         ) -> dict[str, Any]:
    from threadpoolctl import threadpool_limits

    # one BLAS thread per process: the processes are the parallelism, and a contended
    # OpenBLAS pool made the small products 2-3x slower
    with threadpool_limits(1):
        return run_cell(*args)


def markdown(results: list[dict[str, Any]], goal: bool = True) -> str:
    """Per metric: its method, the number of cells, the worst cell and its coverage (of
    the goal grid's cells, or with ``goal=False`` of the others)."""
    rows: dict[tuple[str, str], list[tuple[float, str, int, str]]] = {}
    for r in results:
        if r["in_goal"] != goal:
            continue
        for name, m in r["metrics"].items():
            if m["coverage"] is not None:
                again = f", {m['resamples']} resamples" if "resamples" in m else ""
                rows.setdefault((name, m["method"]), []).append(
                    (m["coverage"], f"{r['family']}: {r['label']}", m["defined"], again))
    lines = ["| metric | method | cells | median coverage | worst cell | worst coverage |",
             "| --- | --- | ---: | ---: | --- | ---: |"]
    for (name, method), found in sorted(rows.items()):
        worst = min(found)
        median = float(np.median([c for c, _, _, _ in found]))
        lines.append(f"| {name} | {method} | {len(found)} | {median:.3f} | {worst[1]} "
                     f"({worst[2]} sets{worst[3]}) | {worst[0]:.3f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a few cells, 50 sets, no file")
    ap.add_argument("--family", choices=sorted(FAMILIES))
    ap.add_argument("--n", type=int, action="append", default=[],
                    help="only cells of this test-set size (repeat); with --family, the part "
                    "is written as bench/.work/coverage-FAMILY-nN....json, which --merge reads")
    ap.add_argument("--sets", type=int, default=None)
    ap.add_argument("--resamples", type=int, default=200)
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--no-recheck", dest="recheck", action="store_false",
                    help="do not rerun the metric-cells below the goal at evaluate's default "
                    f"{RECHECK_RESAMPLES} resamples")
    ap.add_argument("--merge", action="store_true",
                    help="combine the families run one by one (bench/.work/coverage-*.json) "
                    "into bench/results/coverage.json")
    args = ap.parse_args(argv)
    from _common import WORK, write_result

    sets = args.sets or (50 if args.quick else 1000)
    if args.merge:
        parts = [json.loads(f.read_text()) for f in sorted(WORK.glob("coverage-*.json"))]
        results = [c for part in parts for c in part["cells"]]
        seconds = sum(part["seconds"] for part in parts)
        sets = min(part["sets"] for part in parts)
    else:
        t0 = time.perf_counter()
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            chosen = [c for c in cells(args.family, args.quick) if not args.n or c.n in args.n]
            results = list(pool.map(_run, [(c, sets, args.resamples) for c in chosen]))
            if args.recheck and not args.quick and args.resamples < RECHECK_RESAMPLES:
                recheck(pool, dict(zip(chosen, results, strict=True)), sets)
        seconds = time.perf_counter() - t0
    payload = summary(results, sets=sets, resamples=args.resamples, jobs=args.jobs,
                      seconds=seconds)
    if args.quick:
        return payload
    if args.family:
        WORK.mkdir(parents=True, exist_ok=True)
        part = "".join(f"-n{n}" for n in sorted(args.n))
        (WORK / f"coverage-{args.family}{part}.json").write_text(json.dumps(payload, indent=1))
    else:
        write_result("coverage", payload)
    return payload


RECHECK_RESAMPLES = 1000  # evaluate's default (reprise.evaluate._bootstrap.DEFAULT_RESAMPLES)


def recheck(pool: ProcessPoolExecutor, results: dict[Cell, dict[str, Any]], sets: int) -> None:
    """Rerun each metric-cell of the goal grid below the goal with the 1,000 resamples
    that ``evaluate`` uses, on the same test sets (same seeds): 200 resamples can only
    lower a bootstrapped bound's coverage (see the module's docstring), so this measures
    what a user gets where 200 fell short. Both figures are kept: the metric's entry
    takes the 1,000-resample one and ``coverage_at_200`` (or at --resamples) the other."""
    todo = {cell: tuple(name for name, m in r["metrics"].items()
                        if m["coverage"] is not None and m["coverage"] < GOAL)
            for cell, r in results.items() if r["in_goal"]}
    todo = {cell: names for cell, names in todo.items() if names}
    if not todo:
        return
    print(f"rechecking {sum(map(len, todo.values()))} metric-cells below {GOAL:.0%} at "
          f"{RECHECK_RESAMPLES} resamples", flush=True)
    again = pool.map(_run, [(c, sets, RECHECK_RESAMPLES, names) for c, names in todo.items()])
    for (cell, _), rerun in zip(todo.items(), again, strict=True):
        r = results[cell]
        for name, m in rerun["metrics"].items():
            first = r["metrics"][name]
            r["metrics"][name] = {**m, "resamples": RECHECK_RESAMPLES,
                                  f"coverage_at_{r['resamples']}": first["coverage"]}
        r["seconds"] = round(r["seconds"] + rerun["seconds"], 2)
        r["cpu_seconds"] = round(r["cpu_seconds"] + rerun["cpu_seconds"], 2)


def summary(results: list[dict[str, Any]], *, sets: int, resamples: int, jobs: int,
            seconds: float) -> dict[str, Any]:
    """The result document, and the tables and verdict printed."""
    covered = [(m["coverage"], r["label"], name, r["family"], r["in_goal"]) for r in results
               for name, m in r["metrics"].items() if m["coverage"] is not None]
    goal = [c for c in covered if c[4]]
    below = sorted(c for c in goal if c[0] < GOAL)
    worst = min(goal) if goal else None
    table, outside = markdown(results), markdown(results, goal=False)
    print(table)
    print(f"\n{len(results)} cells x {sets} sets in {seconds:.0f} s ({jobs} processes, "
          f"{resamples} resamples)")
    if worst:
        print(f"goal grid: worst {worst[2]} {worst[0]:.3f} at {worst[3]}: {worst[1]}; "
              f"{len(below)} of {len(goal)} metric-cells below {GOAL:.0%}")
    for c in below:
        print(f"  below goal: {c[2]} {c[0]:.3f} at {c[3]}: {c[1]}")
    print("\noutside the goal grid (stress family; fewer than 5 expected rows of a class):")
    print(outside)
    return {"goal": GOAL, "confidence": 0.95, "sets": sets, "resamples": resamples,
            "jobs": jobs, "seconds": round(seconds, 1),
            "worst": None if worst is None else {
                "metric": worst[2], "family": worst[3], "cell": worst[1],
                "coverage": worst[0]},
            "below_goal": [{"metric": c[2], "family": c[3], "cell": c[1], "coverage": c[0]}
                           for c in below],
            "table": table, "table_outside_goal": outside, "cells": results}


if __name__ == "__main__":
    main()
