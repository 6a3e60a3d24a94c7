"""The Ray executor on a local two-node cluster (the tests' cluster: a head and a
second node on loopback, 1 CPU each), side by side with the local executor and
with plain Ray tasks doing the same work.

1. Per-step overhead: a chain of 100 trivial steps (each adds 1 to an int), cache
   off, with ``--executor ray`` and with the local executor (which runs a chain in
   its own process); plain Ray: 100 chained ``ray.remote`` calls, each waiting for
   the previous one's result (the floor Ray itself sets).
2. Scale-out: 8 independent steps of 2 seconds on the 2 one-CPU nodes: the ideal
   wall time is 8 s; goal <= 1.2 x ideal. Plain Ray: 8 tasks sleeping 2 s.

The driver connects to the cluster once (the connect time is reported apart), as a
long-lived driver would; each run is a full ``run_pipeline`` (cache keys, snapshot,
recording) with the cache off.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from _common import WORK, finish, median_time

ROOT = Path(__file__).resolve().parents[1]

FLOW = '''
import time
import reprise
from reprise import step


@step(cache=False)
def start() -> int:
    return 0


@step(cache=False)
def inc(x: int) -> int:
    return x + 1


@reprise.pipeline
def chain(n: int = 100):
    x = start()
    for _ in range(n - 1):
        x = inc(x)
    return x


@step(cache=False)
def work(i: int, seconds: float) -> int:
    time.sleep(seconds)
    return i


@reprise.pipeline
def fan(k: int = 8, seconds: float = 2.0):
    return [work(i, seconds) for i in range(k)]
'''

STEPS, WIDE, SECONDS, NODES = 100, 8, 2.0, 2


def _remote_inc(x: int) -> int:
    return x + 1


def _remote_sleep(i: int, seconds: float) -> int:
    time.sleep(seconds)
    return i


def measure(address: str, root: Path, repeats: int, wide_repeats: int) -> dict[str, Any]:
    import ray

    import reprise
    from reprise.pipeline import RayExecutor
    from reprise.pipeline._load import load_pipeline
    from reprise.pipeline._runner import run_pipeline

    (root / "flow.py").write_text(FLOW)
    os.chdir(root)
    ws = reprise.init(root)
    chain, fan = load_pipeline("flow.py:chain"), load_pipeline("flow.py:fan")
    t0 = time.perf_counter()
    ray.init(address=address, log_to_driver=False, configure_logging=False)
    connect = time.perf_counter() - t0

    def on_ray(pipe: Any, params: dict[str, Any]) -> None:
        run_pipeline(pipe, params, workspace=ws, cache=False, executor=RayExecutor(),
                     progress=None)

    def local(pipe: Any, params: dict[str, Any]) -> None:
        run_pipeline(pipe, params, workspace=ws, cache=False, executor="local", workers=NODES)

    inc, sleep = ray.remote(num_cpus=1)(_remote_inc), ray.remote(num_cpus=1)(_remote_sleep)

    def raw_chain() -> None:
        x = 0
        for _ in range(STEPS):
            x = ray.get(inc.remote(x))

    on_ray(chain, {"n": 5})  # warm the workers up (imports), as a second run would find them
    figures: dict[str, float] = {"ray_connect_s": connect}
    samples: dict[str, list[float]] = {}
    figures["ray_chain_s"], samples["ray_chain"] = median_time(
        lambda: on_ray(chain, {"n": STEPS}), repeats)
    figures["local_chain_s"], samples["local_chain"] = median_time(
        lambda: local(chain, {"n": STEPS}), repeats)
    figures["plain_ray_chain_s"], samples["plain_ray_chain"] = median_time(raw_chain, repeats)
    figures["ray_fan_s"], samples["ray_fan"] = median_time(
        lambda: on_ray(fan, {"k": WIDE, "seconds": SECONDS}), wide_repeats)
    figures["plain_ray_fan_s"], samples["plain_ray_fan"] = median_time(
        lambda: ray.get([sleep.remote(i, SECONDS) for i in range(WIDE)]), wide_repeats)
    ray.shutdown()
    ws.close()
    for k in ("ray_chain_s", "local_chain_s", "plain_ray_chain_s"):
        figures[k.replace("_chain_s", "_ms_per_step")] = 1000 * figures[k] / STEPS
    figures["fan_ideal_s"] = WIDE * SECONDS / NODES
    return {"figures": figures, "samples": samples}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="one repeat each, no result file")
    args = ap.parse_args(argv)
    wide_repeats = 3
    if args.quick:
        args.repeats, wide_repeats = 1, 1
    sys.path.insert(0, str(ROOT))
    from tests._ray_cluster import LOOPBACK, ray_cluster

    os.environ.update(LOOPBACK)  # before Ray is imported: it reads this then
    try:
        import ray  # noqa: F401
    except ImportError:
        print("  ray is not installed (pip install 'reprise-ml[ray]'); skipping")
        return {}
    root = WORK / "ray_executor"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    here = os.getcwd()
    load_before = os.getloadavg()
    try:
        with ray_cluster(cpus_per_node=1) as cluster:
            measured = measure(cluster.address, root, args.repeats, wide_repeats)
    finally:
        os.chdir(here)
        shutil.rmtree(root, ignore_errors=True)
    f = measured["figures"]
    ratios = {
        "ray_vs_local_per_step": f["ray_ms_per_step"] / f["local_ms_per_step"],
        "ray_vs_plain_ray_per_step": f["ray_ms_per_step"] / f["plain_ray_ms_per_step"],
        "fan_wall_vs_ideal": f["ray_fan_s"] / f["fan_ideal_s"],
        "plain_ray_fan_vs_ideal": f["plain_ray_fan_s"] / f["fan_ideal_s"],
    }
    result = {**measured, "ratios": ratios, "repeats": args.repeats,
              "wide_repeats": wide_repeats, "peer": "plain Ray tasks (ray.remote) and the "
              "local executor", "cluster": "2 nodes on loopback, 1 CPU each",
              "load_average": {"before": list(load_before), "after": list(os.getloadavg())},
              "goal": "8 independent 2 s steps on 2 nodes: wall <= 1.2 x ideal (8 s)"}
    return finish("ray_executor", result, quick=args.quick)


if __name__ == "__main__":
    sys.exit(0 if main() is not None else 1)
