"""Shared helpers for the benchmarks: timing, medians, result files.

Every benchmark measures Reprise and its peer in the same process run, repeats,
and reports medians, because the machines are shared and noisy.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
WORK = Path(__file__).resolve().parent / ".work"


def median_time(fn: Callable[[], Any], repeats: int) -> tuple[float, list[float]]:
    """Median wall seconds of ``fn`` over ``repeats`` calls, and every sample."""
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples), samples


def command_time(argv: list[str], repeats: int, env: dict[str, str] | None = None,
                 cwd: Path | None = None, warmup: bool = True) -> tuple[float, list[float]]:
    """Median wall seconds of running ``argv`` to completion (after one warm-up, unless
    ``warmup`` is false: for commands that change state, such as adding a file).

    Bytecode writing is left on (a user's default) so every tool, peer or Reprise,
    starts from cached ``.pyc`` files after the warm-up run, even when the shell
    running the benchmarks sets ``PYTHONDONTWRITEBYTECODE``.
    """
    run_env = {**os.environ, **(env or {})}
    run_env.pop("PYTHONDONTWRITEBYTECODE", None)

    def once() -> None:
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       env=run_env, cwd=cwd)

    if warmup:
        once()
    return median_time(once, repeats)


def machine() -> dict[str, Any]:
    return {"python": platform.python_version(), "platform": platform.platform(),
            "cpus": os.cpu_count(), "processor": platform.processor()}


def write_result(name: str, payload: dict[str, Any]) -> Path:
    """Write ``bench/results/<name>.json`` (with the machine and the time)."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    doc = {"benchmark": name, "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
           "machine": machine(), **payload}
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)
    return path


def python() -> str:
    return sys.executable


def finish(name: str, result: dict[str, Any], *, quick: bool,
           fmt: Callable[[str, float], str] = lambda k, v: f"{v:>14,.3f}") -> dict[str, Any]:
    """Write the result file (unless ``quick``) and print figures and ratios."""
    if not quick:
        write_result(name, result)
    for k, v in result["figures"].items():
        print(f"  {k:40s} {fmt(k, v)}")
    for k, v in result["ratios"].items():
        print(f"  {k:40s} {v:>13.2f}x")
    return result
