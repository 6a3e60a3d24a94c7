"""Killing `reprise run` (or a tuning script) with SIGKILL leaves no worker process behind
(issue 20, item 15): workers end with their parent instead of blocking forever."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.store._live import alive, cli, descendants, kill_all, wait_for

# two independent branches, so the run uses its process pool; each step says where it
# runs, then works for far longer than the test waits
FLOW = textwrap.dedent("""
    import os, time
    import reprise
    from reprise import step

    @step(cache=False)
    def slow(i: int, where: str) -> int:
        open(os.path.join(where, f"{i}.{os.getpid()}"), "w").close()
        time.sleep(120)
        return i

    @step(cache=False)
    def total(a: int, b: int) -> int:
        return a + b

    @reprise.pipeline
    def branches(where: str = "."):
        return total(slow(1, where), slow(2, where))
""")

TUNE = textwrap.dedent("""
    import os, sys, time
    import reprise

    def objective(p):
        open(os.path.join(sys.argv[2], str(os.getpid())), "w").close()
        time.sleep(120)
        return p["x"]

    if __name__ == "__main__":
        ws = reprise.open_workspace(sys.argv[1])
        reprise.tune(objective, {"x": (0.0, 1.0)}, n_trials=4, workers=2, study="s",
                     workspace=ws, pruner=None)
""")

GRACE = 5.0  # seconds the workers get to notice their parent is gone


def _kill_and_check(proc: subprocess.Popen[str], marks: Path, expect: int) -> None:
    try:
        wait_for(lambda: len(os.listdir(marks)) >= expect or proc.poll() is not None, 120,
                 "the workers to start their steps")
        assert proc.poll() is None, (marks.parent / "output.log").read_text()[-3000:]
        workers = {int(name.rsplit(".", 1)[-1]) for name in os.listdir(marks)}
        family = descendants(proc.pid)  # the workers and multiprocessing's resource_tracker
        assert workers <= family and len(workers) == expect
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        deadline = time.monotonic() + GRACE
        while any(alive(p) for p in family) and time.monotonic() < deadline:
            time.sleep(0.05)
        left = {p for p in family if alive(p)}
        kill_all(left)
        assert not left, f"processes left {GRACE:.0f} s after the kill: {sorted(left)}"
    finally:
        kill_all(descendants(proc.pid) | {proc.pid})
        proc.wait(timeout=30)


def _start(cwd: Path, *args: str) -> subprocess.Popen[str]:
    """A process whose output goes to a file: surviving workers then hold no pipe of ours."""
    env = {k: v for k, v in os.environ.items() if k != "REPRISE_WORKSPACE"}
    with open(cwd / "output.log", "w") as log:
        return subprocess.Popen([sys.executable, *args], cwd=cwd, env=env, stdout=log,
                                stderr=subprocess.STDOUT, text=True)


def test_killing_reprise_run_leaves_no_worker(tmp_path: Path) -> None:
    assert cli(tmp_path, "init").returncode == 0
    (tmp_path / "flow.py").write_text(FLOW)
    marks = tmp_path / "marks"
    marks.mkdir()
    run = _start(tmp_path, "-m", "reprise.cli", "run", "flow.py:branches", "-p",
                 f"where={marks}", "--workers", "2", "--progress", "none")
    _kill_and_check(run, marks, 2)


@pytest.mark.slow
def test_killing_a_tuning_script_leaves_no_worker(tmp_path: Path) -> None:
    assert cli(tmp_path, "init").returncode == 0
    (tmp_path / "tune_it.py").write_text(TUNE)
    marks = tmp_path / "marks"
    marks.mkdir()
    proc = _start(tmp_path, "tune_it.py", str(tmp_path), str(marks))
    _kill_and_check(proc, marks, 2)
