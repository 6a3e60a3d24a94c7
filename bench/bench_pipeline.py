"""No-op re-run of a 3-step numpy pipeline (everything cached), end to end from the
command line: ``reprise run`` against ``dvc repro`` on the same data and steps.

Also measured: the per-step overhead inside one process (a cached step, and an
executed step passing a 1 MB array), excluding the steps' own work.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _common import WORK, command_time, finish, python

STEPS = '''
import sys
import numpy as np

def prepare(src, dst):
    np.save(dst, np.loadtxt(src) * 2.0)

def normalise(src, dst):
    x = np.load(src)
    np.save(dst, (x - x.mean()) / (x.std() + 1e-12))

def summarise(src, dst):
    x = np.load(src)
    with open(dst, "w") as f:
        f.write(f"{x.mean():.6f} {x.std():.6f}\\n")

if __name__ == "__main__":
    globals()[sys.argv[1]](sys.argv[2], sys.argv[3])
'''

DVC_YAML = '''
stages:
  prepare:
    cmd: python steps.py prepare data.txt prepared.npy
    deps: [steps.py, data.txt]
    outs: [prepared.npy]
  normalise:
    cmd: python steps.py normalise prepared.npy normalised.npy
    deps: [steps.py, prepared.npy]
    outs: [normalised.npy]
  summarise:
    cmd: python steps.py summarise normalised.npy summary.txt
    deps: [steps.py, normalised.npy]
    outs: [summary.txt]
'''

FLOW = '''
import numpy as np
import reprise
from reprise import File, step


@step
def prepare(src: File) -> np.ndarray:
    return np.loadtxt(src) * 2.0


@step
def normalise(x: np.ndarray) -> np.ndarray:
    return (x - x.mean()) / (x.std() + 1e-12)


@step
def summarise(x: np.ndarray) -> str:
    return f"{x.mean():.6f} {x.std():.6f}"


@reprise.pipeline
def flow(src: File = File("data.txt")):
    return summarise(normalise(prepare(src)))
'''


def setup(root: Path) -> tuple[Path, Path]:
    if root.exists():
        shutil.rmtree(root)
    data = "\n".join(str(i % 97) for i in range(20_000))
    dvc_dir, rep_dir = root / "dvc", root / "reprise"
    for d in (dvc_dir, rep_dir):
        d.mkdir(parents=True)
        (d / "data.txt").write_text(data)
    (dvc_dir / "steps.py").write_text(STEPS)
    (dvc_dir / "dvc.yaml").write_text(DVC_YAML)
    env = {**os.environ, "PATH": f"{Path(python()).parent}:{os.environ['PATH']}"}
    subprocess.run(["git", "init", "-q"], cwd=dvc_dir, check=True)
    subprocess.run([_bin("dvc"), "init", "-q"], cwd=dvc_dir, check=True, env=env)
    subprocess.run([_bin("dvc"), "repro", "-q"], cwd=dvc_dir, check=True, env=env)
    (rep_dir / "flow.py").write_text(FLOW)
    subprocess.run([_bin("reprise"), "init", "."], cwd=rep_dir, check=True,
                   stdout=subprocess.DEVNULL)
    subprocess.run([_bin("reprise"), "run", "flow.py:flow", "--progress", "none"],
                   cwd=rep_dir, check=True)
    return dvc_dir, rep_dir


def _bin(name: str) -> str:
    return str(Path(python()).parent / name)


def in_process_overhead(root: Path, repeats: int) -> dict[str, float]:
    """Per-step overhead of the runner (cache hit; executed step with a 1 MB array)."""
    import numpy as np

    import reprise
    from reprise import step

    @step
    def big(n: int) -> np.ndarray:
        return np.ones(n // 8)

    @step
    def same(x: np.ndarray) -> np.ndarray:
        return x

    steps = 20

    @reprise.pipeline
    def chain(n: int = 1 << 20) -> None:
        x = big(n)
        for _ in range(steps - 1):
            x = same(x)

    ws = reprise.init(root / "inproc")
    samples_exec, samples_hit = [], []
    for r in range(repeats):
        t0 = time.perf_counter()
        chain.run(workspace=ws, workers=1, cache=False, seed=r)
        samples_exec.append((time.perf_counter() - t0) / steps)
        chain.run(workspace=ws, workers=1, seed=r)
        t0 = time.perf_counter()
        chain.run(workspace=ws, workers=1, seed=r)
        samples_hit.append((time.perf_counter() - t0) / steps)
    import statistics

    return {"executed_step_1mb_ms": 1000 * statistics.median(samples_exec),
            "cache_hit_step_ms": 1000 * statistics.median(samples_hit)}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    if args.quick:
        args.repeats = 2
    if shutil.which("dvc", path=str(Path(python()).parent)) is None:
        print("  dvc is not installed (pip install -e '.[bench]'); skipping")
        return {}
    root = WORK / "pipeline"
    dvc_dir, rep_dir = setup(root)
    env = {"PATH": f"{Path(python()).parent}:{os.environ['PATH']}"}
    figures: dict[str, float] = {}
    samples: dict[str, list[float]] = {}
    figures["dvc_repro_noop_s"], samples["dvc"] = command_time(
        [_bin("dvc"), "repro", "-q"], args.repeats, env=env, cwd=dvc_dir)
    figures["reprise_run_noop_s"], samples["reprise"] = command_time(
        [_bin("reprise"), "run", "flow.py:flow", "--progress", "none"], args.repeats,
        env=env, cwd=rep_dir)
    figures["dvc_cli_floor_s"], samples["dvc_version"] = command_time(
        [_bin("dvc"), "--version"], args.repeats, env=env, cwd=dvc_dir)
    figures.update(in_process_overhead(root, max(3, args.repeats // 2)))
    shutil.rmtree(root, ignore_errors=True)
    ratios = {"reprise_vs_dvc_noop": figures["reprise_run_noop_s"] / figures["dvc_repro_noop_s"]}
    import dvc

    result = {"figures": figures, "ratios": ratios, "samples": samples,
              "repeats": args.repeats, "peer": f"dvc {dvc.__version__}",
              "goal": "reprise no-op <= 0.5 x dvc repro; hit <= 5 ms, executed 1 MB <= 20 ms"}
    return finish("pipeline", result, quick=args.quick)


if __name__ == "__main__":
    sys.exit(0 if main() is not None else 1)
