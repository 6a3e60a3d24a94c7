"""Kill a training run for real (SIGKILL, or SIGTERM) and resume it: the end state must be
byte-identical to the uninterrupted run's, with num_workers 0 and 2."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

JOB = Path(__file__).with_name("_resume_job.py")
MICRO_BATCHES = 39  # 3 epochs × 13 batches of 16 (the last one 8) out of 200 rows
VALIDATION_BATCHES = 10  # 5 validations × 2 batches
CHECKPOINTS = 8  # every 2 of 15 optimizer steps, and the final one


def run_job(folder: Path, workers: int, kill: dict[str, object] | None = None) -> int:
    spec = {"dir": str(folder), "workers": workers, "kill": kill}
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    proc = subprocess.run([sys.executable, str(JOB), json.dumps(spec)], capture_output=True,
                          text=True, env=env, timeout=240)
    if kill is None or proc.returncode not in (-signal.SIGKILL, 143):
        assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.returncode


def final_state(folder: Path) -> tuple[bytes, bytes]:
    return (folder / "final.safetensors").read_bytes(), (folder / "final.json").read_bytes()


_BASELINES: dict[int, tuple[bytes, bytes]] = {}


def baseline(tmp_path_factory: pytest.TempPathFactory, workers: int) -> tuple[bytes, bytes]:
    if workers not in _BASELINES:
        folder = tmp_path_factory.mktemp(f"baseline{workers}")
        run_job(folder, workers)
        _BASELINES[workers] = final_state(folder)
    return _BASELINES[workers]


def kill_and_resume(folder: Path, workers: int, kill: dict[str, object]) -> tuple[bytes, bytes]:
    code = run_job(folder, workers, kill)
    expected = 143 if kill["kind"] == "sigterm" else -signal.SIGKILL
    assert code == expected, f"the job was not killed at {kill} (exit {code})"
    assert not (folder / "final.safetensors").exists()
    run_job(folder, workers)
    return final_state(folder)


QUICK = [
    (0, {"kind": "batch", "at": 17}),  # epoch 1, inside an accumulation window
    (0, {"kind": "checkpoint", "at": 3, "stage": "tensors"}),  # tensors written, no state
    (0, {"kind": "checkpoint", "at": 5, "stage": "state"}),  # whole temp folder, not renamed
    (2, {"kind": "validation", "at": 5}),  # inside the third validation
    (2, {"kind": "sigterm", "at": 23}),  # checkpoint mid-window on SIGTERM, exit 143
    (2, {"kind": "batch", "at": 38}),  # the last epoch's short batch
]


@pytest.mark.parametrize(("workers", "kill"), QUICK,
                         ids=[f"w{w}-{k['kind']}-{k['at']}" for w, k in QUICK])
def test_killed_run_resumes_bit_exact(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory,
                                      workers: int, kill: dict[str, object]) -> None:
    expected = baseline(tmp_path_factory, workers)
    assert kill_and_resume(tmp_path, workers, kill) == expected


def random_kill_points(n: int, seed: int) -> list[dict[str, object]]:
    rng = random.Random(seed)
    points: list[dict[str, object]] = []
    for _ in range(n):
        kind = rng.choice(["batch", "batch", "validation", "checkpoint", "sigterm"])
        if kind == "validation":
            points.append({"kind": kind, "at": rng.randint(1, VALIDATION_BATCHES)})
        elif kind == "checkpoint":
            points.append({"kind": kind, "at": rng.randint(1, CHECKPOINTS - 1),
                           "stage": rng.choice(["tensors", "state"])})
        else:
            points.append({"kind": kind, "at": rng.randint(1, MICRO_BATCHES - 1)})
    return points


RANDOM = [(w, k) for w in (0, 2) for k in random_kill_points(20, seed=2026 + w)]


@pytest.mark.reliability
@pytest.mark.parametrize(("workers", "kill"), RANDOM,
                         ids=[f"w{w}-{i}-{k['kind']}-{k['at']}" for i, (w, k) in enumerate(RANDOM)])
def test_twenty_random_kill_points(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory,
                                   workers: int, kill: dict[str, object]) -> None:
    expected = baseline(tmp_path_factory, workers)
    assert kill_and_resume(tmp_path, workers, kill) == expected
