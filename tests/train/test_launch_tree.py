"""launch() leaves no process behind: after its timeout, SIGTERM then SIGKILL reach every
process it started, including those that ignore SIGTERM, sit in a session of their own
(as torchrun's workers do) or were re-parented to PID 1."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from reprise.train import launch
from tests.train._procs import gone

TREE = '''
import os, signal, subprocess, sys, time
folder = sys.argv[1]
signal.signal(signal.SIGTERM, signal.SIG_IGN)
def write(name):
    with open(os.path.join(folder, name), "w") as f:
        f.write(str(os.getpid()))
if len(sys.argv) > 2 and sys.argv[2] == "orphan":
    if os.fork():
        os._exit(0)  # the grandchild below is re-parented to PID 1
    write("pid-orphan")
elif len(sys.argv) > 2:
    write("pid-" + sys.argv[2])
else:
    write("pid-root")
    # like torchrun's workers: a session of their own
    subprocess.Popen([sys.executable, __file__, folder, "child"], start_new_session=True)
    subprocess.Popen([sys.executable, __file__, folder, "orphan"], start_new_session=True)
time.sleep(600)
'''


def test_a_timeout_stops_every_process_even_those_that_ignore_sigterm(tmp_path: Path) -> None:
    """A launch whose processes ignore SIGTERM, sit in sessions of their own or were
    re-parented to PID 1: after the timeout and the grace period, none is left."""
    script = tmp_path / "tree.py"
    script.write_text(TREE)
    t0 = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        launch(script, [str(tmp_path)], timeout=8, grace=1)  # time for 3 starts on a busy box
    assert time.monotonic() - t0 < 25
    pids = {p.name: int(p.read_text()) for p in tmp_path.glob("pid-*")}
    assert set(pids) == {"pid-root", "pid-child", "pid-orphan"}
    assert [pid for pid in pids.values() if not gone(pid)] == []


SLEEPER = '''
import os, signal, sys, time
folder = sys.argv[1]
def term(signum, frame):
    with open(os.path.join(folder, "term-" + os.environ["RANK"]), "w") as f:
        f.write(str(os.getpid()))
    sys.exit(143)
signal.signal(signal.SIGTERM, term)
with open(os.path.join(folder, "pid-" + os.environ["RANK"]), "w") as f:
    f.write(str(os.getpid()))
time.sleep(600)
'''


def test_a_launcher_killed_outright_takes_its_ranks_with_it(tmp_path: Path) -> None:
    """``reprise train`` SIGKILLed cannot stop its children: torchrun sees its parent
    gone and sends the ranks SIGTERM (a Trainer checkpoints), and all of them end."""
    import os
    import signal
    import sys

    import psutil

    script = tmp_path / "sleeper.py"
    script.write_text(SLEEPER)
    cli = subprocess.Popen([sys.executable, "-m", "reprise.cli", "train", "--nproc", "2",
                            str(script), str(tmp_path)], start_new_session=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    tree: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 120
        while not ((tmp_path / "pid-0").exists() and (tmp_path / "pid-1").exists()):
            assert cli.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        tree = psutil.Process(cli.pid).children(recursive=True)  # torchrun and the ranks
        assert len(tree) >= 3
        os.kill(cli.pid, signal.SIGKILL)
        cli.wait(timeout=10)
        _, alive = psutil.wait_procs(tree, timeout=60)
        assert alive == []
        assert {p.name for p in tmp_path.glob("term-*")} == {"term-0", "term-1"}
    finally:
        for p in [*tree, psutil.Process(cli.pid)] if cli.poll() is None else tree:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
