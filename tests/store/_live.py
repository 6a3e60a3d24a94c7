"""Helpers for the tests that race gc, kills and read-only folders against real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# `make` writes its output; `hold` logs an artifact, waits for a flag file (so gc runs while the run is
# in progress) and then reads `make`'s output; `consume` reads `hold`'s.
FLOW = textwrap.dedent("""
    import os, time
    import numpy as np
    import reprise
    from reprise import step

    @step(cache=False)
    def make(n: int) -> np.ndarray:
        return np.arange(n, dtype=float)

    @step(cache=False)
    def hold(x: np.ndarray, flag: str) -> np.ndarray:
        reprise.log_artifact(np.full(100, 7.0), "early.npy")  # stored now, recorded at the end
        open(flag + ".waiting", "w").close()
        while not os.path.exists(flag):
            time.sleep(0.02)
        return x * 2

    @step(cache=False)
    def consume(y: np.ndarray) -> float:
        return float(y.sum())

    @reprise.pipeline
    def flow(n: int = 1000, flag: str = ""):
        return consume(hold(make(n), flag))
""")


def cli(cwd: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "REPRISE_WORKSPACE"}
    return subprocess.run([sys.executable, "-m", "reprise.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def popen_cli(cwd: Path, *args: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "REPRISE_WORKSPACE"}
    return subprocess.Popen([sys.executable, "-m", "reprise.cli", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def fsck(cwd: Path) -> dict[str, Any]:
    res = cli(cwd, "fsck", "--json", "--no-verify")
    return dict(json.loads(res.stdout))


def wait_for(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry))
    out, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.add(child)
            todo.append(child)
    return out


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie, dead but not yet reaped, counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def kill_all(pids: set[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
