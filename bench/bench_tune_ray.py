"""Tuning on Ray: ``reprise.tune(executor="ray")`` against Ray Tune (its peer on Ray, with
Optuna's TPE through ``OptunaSearch``) and against Reprise's local worker processes, in the
same run, on the two-node loopback cluster of ``tests/_ray_cluster.py`` (a head and a
second node, one CPU each).

The objective sleeps ``--sleep`` seconds and returns ``(x - 2) ** 2`` (one float in
[-10, 10]): what is timed is each tool's scheduling, not the trial's work. ``--trials``
trials, two at a time (Reprise ``workers=2``; Ray Tune ``max_concurrent_trials=2``, one CPU
per trial); the ideal wall time is ``trials * sleep / 2``. A tool's time is its whole call:
study and tuning run created, every trial tracked (Reprise: a child run per trial, ingested
into SQLite; Ray Tune: its experiment folder and result files), the end. Every tool does a
short search first (imports, Ray workers started), and the repeats interleave the tools
with the order rotated. Figures are medians; ratios are Reprise-on-Ray over each other.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# the driver of a loopback cluster stays on loopback (read by Ray when imported)
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [p for p in (str(ROOT / "src"), str(ROOT)) if p not in sys.path]

from _common import WORK, finish  # noqa: E402

SPACE = {"x": {"low": -10.0, "high": 10.0}}


def sleepy(seconds: float, params: dict[str, Any]) -> float:
    time.sleep(seconds)
    return (params["x"] - 2.0) ** 2


def reprise_run(work: Path, trials: int, sleep: float, executor: str,
                address: str | None) -> float:
    import functools

    import reprise

    root = Path(tempfile.mkdtemp(dir=work))
    ws = reprise.init(root)
    t0 = time.perf_counter()
    res = reprise.tune(functools.partial(sleepy, sleep), SPACE, n_trials=trials, workers=2,
                       pruner=None, report=False, executor=executor, ray_address=address,
                       seed=0, workspace=ws, study="bench")
    took = time.perf_counter() - t0
    assert res.counts["complete"] == trials, res.counts
    ws.close()
    return took


def raytune_run(work: Path, trials: int, sleep: float) -> float:
    from ray import tune
    from ray.tune.search.optuna import OptunaSearch

    def trainable(config: dict[str, Any]) -> dict[str, float]:
        import time  # a closure, sent by value: nothing of this module on the workers

        time.sleep(sleep)
        return {"loss": (config["x"] - 2.0) ** 2}

    t0 = time.perf_counter()
    tuner = tune.Tuner(
        tune.with_resources(trainable, {"cpu": 1}),
        param_space={"x": tune.uniform(-10.0, 10.0)},
        tune_config=tune.TuneConfig(search_alg=OptunaSearch(seed=0), metric="loss",
                                    mode="min", num_samples=trials, max_concurrent_trials=2),
        run_config=tune.RunConfig(storage_path=str(Path(tempfile.mkdtemp(dir=work))),
                                  verbose=0))
    grid = tuner.fit()
    took = time.perf_counter() - t0
    assert len(grid) == trials and not grid.errors, grid.errors
    return took


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=16)
    ap.add_argument("--sleep", type=float, default=1.0, help="seconds per trial")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="small sizes, for a smoke test")
    args = ap.parse_args(argv)
    if args.quick:
        args.trials, args.sleep, args.repeats = 4, 0.5, 1
    os.environ.pop("REPRISE_WORKSPACE", None)
    import ray
    from tests._ray_cluster import ray_cluster

    work = WORK / "tune_ray"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    load = os.getloadavg()
    samples: dict[str, list[float]] = {"reprise_ray": [], "reprise_local": [], "ray_tune": []}
    try:
        with ray_cluster(cpus_per_node=1) as cluster:
            ray.init(address=cluster.address, log_to_driver=False)

            def tools(sleep: float) -> dict[str, Any]:
                return {"reprise_ray": lambda: reprise_run(work, args.trials, sleep, "ray",
                                                           cluster.address),
                        "reprise_local": lambda: reprise_run(work, args.trials, sleep,
                                                             "local", None),
                        "ray_tune": lambda: raytune_run(work, args.trials, sleep)}

            for fn in tools(0.0).values():  # warm-up: imports, Ray workers started
                fn()
            timed, names = tools(args.sleep), list(samples)
            for r in range(args.repeats):
                for name in names[r % 3:] + names[:r % 3]:
                    samples[name].append(timed[name]())
            ray.shutdown()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in samples.items()}
    ideal = args.trials * args.sleep / 2
    result = {
        "settings": {"trials": args.trials, "sleep_s": args.sleep, "repeats": args.repeats,
                     "quick": args.quick, "concurrency": 2, "nodes": 2, "cpus_per_node": 1},
        "load_average": {"before": list(load), "after": list(os.getloadavg())},
        "figures": {f"{k}_wall_s": v for k, v in med.items()} | {"ideal_wall_s": ideal},
        "ratios": {"reprise_ray_over_ray_tune": med["reprise_ray"] / med["ray_tune"],
                   "reprise_ray_over_reprise_local": med["reprise_ray"] / med["reprise_local"],
                   "reprise_ray_over_ideal": med["reprise_ray"] / ideal},
        "samples": samples,
    }
    return finish("tune_ray", result, quick=args.quick)


if __name__ == "__main__":
    main()
