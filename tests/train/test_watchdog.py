"""The SIGTERM watchdog, in small real processes: it ends one whose main thread makes no
progress after SIGTERM, and leaves alone one that is moving on or writing a checkpoint.
(A rank blocked in a real gloo collective is in test_ddp_faults.py.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

SCRIPT = '''
import os, signal, sys, time
from reprise.train._watchdog import SigtermWatchdog
mode = sys.argv[1]
state = {"beats": 0, "busy": mode == "busy", "flag": None}
signal.signal(signal.SIGTERM, lambda signum, frame: state.update(flag=signum))
dog = SigtermWatchdog(lambda: state["beats"], busy=lambda: state["busy"],
                      pace=lambda: (0, 0.0), min_grace=0.5, first_step=0.5,
                      duplicate_window=1.0)
assert dog.start()
print("ready", flush=True)
end = time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    time.sleep(0.05)
    if mode != "stuck":
        state["beats"] += 1
dog.stop()
print("finished", state["flag"], flush=True)
'''


def start(tmp_path: Path, mode: str, seconds: float) -> subprocess.Popen[str]:
    script = tmp_path / "dog.py"
    script.write_text(SCRIPT)
    proc = subprocess.Popen([sys.executable, str(script), mode, str(seconds)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    return proc


def test_no_progress_after_sigterm_ends_the_process_within_the_grace(tmp_path: Path) -> None:
    proc = start(tmp_path, "stuck", 60)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 143
    assert 0.4 < time.monotonic() - t0 < 10
    assert "no progress for" in err and "finished" not in out


@pytest.mark.parametrize("mode", ["moving", "busy"])
def test_a_process_moving_on_or_writing_a_checkpoint_is_left_alone(tmp_path: Path,
                                                                   mode: str) -> None:
    proc = start(tmp_path, mode, 2.5)
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)  # the same request, sent twice (torchrun and SLURM)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert out.endswith(f"finished {int(signal.SIGTERM)}\n")


def test_a_second_sigterm_later_ends_the_process_at_once(tmp_path: Path) -> None:
    proc = start(tmp_path, "moving", 60)
    proc.send_signal(signal.SIGTERM)
    time.sleep(1.5)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 143 and time.monotonic() - t0 < 5
    assert "a second SIGTERM" in err
