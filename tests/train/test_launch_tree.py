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
