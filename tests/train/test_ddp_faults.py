"""DDP under faults, with real torch.distributed (gloo) processes on the CPU: a NaN in
one rank's batch, a rank stalled while its peer is blocked in a collective, a launch
that runs past its timeout (a rank SIGKILLed is in test_ddp.py). Every rank stops, no
checkpoint holds NaN weights, and no process outlives the launch. Also what the ranks
must agree on: validation metrics, ``batch_size="auto"`` and the summary's throughput."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from reprise.train import CheckpointManager, launch
from reprise.train._nonfinite import nonfinite_in_checkpoint
from tests.train._procs import gone, survivors

JOB = Path(__file__).with_name("_ddp_fault_job.py")
ENV = {"PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1"}


def run(folder: Path, timeout: float = 120, grace: float = 3, **spec: Any) -> int:
    """Launch the job on 2 ranks; its exit code. The timeout bounds every run (a hang
    fails the test); it is generous because 2 shared cores can be slow to start torch."""
    folder.mkdir(parents=True, exist_ok=True)
    return launch(JOB, [json.dumps({"dir": str(folder), **spec})], nproc=2, env=ENV,
                  timeout=timeout, grace=grace)


def result(folder: Path, rank: int) -> dict[str, Any]:
    return dict(json.loads((folder / f"result-{rank}.json").read_text()))


def checkpoints_without_nan(folder: Path, model_params: list[str]) -> list[str]:
    mgr = CheckpointManager(folder / "ckpt")
    names = []
    for path in mgr.checkpoints():
        tensors, _ = mgr.load(path)
        assert nonfinite_in_checkpoint(tensors, model_params) == [], path
        names.append(path.name)
    return names


PARAMS = ["0.weight", "0.bias", "2.weight", "2.bias"]


# -- item 9: a NaN on one rank --------------------------------------------------------------


@pytest.mark.parametrize(("at", "log_every", "expected"), [
    (1, 1, []),  # the case: rank 0 saw a finite loss and wrote NaN weights at step 1
    (6, 50, ["ckpt-000000004"]),  # later: the checkpoint before it stands, none after
], ids=["first-batch", "after-a-checkpoint"])
def test_a_nan_on_one_rank_stops_every_rank_and_no_checkpoint_holds_it(
        tmp_path: Path, at: int, log_every: int, expected: list[str]) -> None:
    code = run(tmp_path, fault="poison", rank=1, at=at, log_every=log_every,
               checkpoint_every=1 if at == 1 else 4)
    assert code == 0
    for rank in (0, 1):
        res = result(tmp_path, rank)
        assert res["stopped"] == "nonfinite", res
        assert res["global_step"] == at - 1  # the step that saw the NaN was not taken
        assert res["finite"] and res["checkpoint"] is None
    assert checkpoints_without_nan(tmp_path, PARAMS) == expected
    assert survivors(tmp_path) == []


# -- item 9: a rank stalls, a launch times out (a rank SIGKILLed: test_ddp.py) -------------


def test_a_rank_blocked_in_a_collective_exits_on_sigterm_within_seconds(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """Rank 1 stalls in a callback; rank 0 waits in the next all-reduce, where no
    Python signal handler runs. SIGTERM to rank 0 alone ends it within seconds (its
    watchdog); torchrun then stops rank 1 the same way."""
    timings: dict[str, float] = {}

    def terminate_rank0() -> None:
        deadline = time.monotonic() + 100
        while not (tmp_path / "stalled-1").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)  # rank 0 reaches the collective and blocks there
        pid = int((tmp_path / "pid-0").read_text())
        t0 = time.monotonic()
        os.kill(pid, signal.SIGTERM)
        while not gone(pid) and time.monotonic() - t0 < 30:
            time.sleep(0.05)
        timings["rank0"] = time.monotonic() - t0

    helper = threading.Thread(target=terminate_rank0)
    helper.start()
    code = run(tmp_path, fault="stall", rank=1, at=5, checkpoint_every=4)
    helper.join()
    assert code != 0
    assert timings["rank0"] < 10, timings
    assert "no progress for" in capfd.readouterr().err
    assert survivors(tmp_path) == []
    assert checkpoints_without_nan(tmp_path, PARAMS) == ["ckpt-000000004"]


@pytest.mark.reliability
def test_a_deaf_stalled_rank_is_killed_when_the_launch_times_out(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """The issue's hang with torchrun: rank 1 ignores SIGTERM and sleeps, rank 0 blocks
    in a collective; launch(timeout=...) returns and leaves no worker behind."""
    with pytest.raises(subprocess.TimeoutExpired):
        run(tmp_path, timeout=45, grace=3, fault="stall-deaf", rank=1, at=5,
            checkpoint_every=4)
    assert (tmp_path / "stalled-1").exists()
    assert "no progress for" in capfd.readouterr().err  # rank 0, by its watchdog
    assert survivors(tmp_path) == []


# -- item 11: what the ranks agree on ---------------------------------------------------------


def test_validation_metrics_and_the_summary_count_every_rank(tmp_path: Path) -> None:
    """Rank 0 validates rows 0-7 and rank 1 rows 8-31 (``row_mean`` is the mean row
    index): both must report the mean over all 32 rows, weighted by samples (15.5; 3.5
    on rank 0 alone). 256 rows × 3 epochs were trained, 384 on each rank: 768 in all."""
    assert run(tmp_path, val=True) == 0
    for rank in (0, 1):
        res = result(tmp_path, rank)
        assert [v["row_mean"] for v in res["validations"]] == [15.5, 15.5, 15.5]
        summary = res["summary"]
        assert summary["samples"] == 768
        assert summary["samples_per_s"] == pytest.approx(768 / summary["seconds"])


def test_auto_batch_size_is_the_same_on_every_rank(tmp_path: Path) -> None:
    """Rank 0's memory budget fits a batch of 256, rank 1's 64: both take 64 (and, for a
    target effective batch of 128, accumulate 2)."""
    assert run(tmp_path, budgets=[100_000, 20_000], target=128) == 0
    for rank in (0, 1):
        summary = result(tmp_path, rank)["summary"]
        assert (summary["batch_size"], summary["accumulate"]) == (64, 2)
        assert summary["samples"] == 768


def test_a_nan_checkpoint_is_found() -> None:
    """The checker the tests above rely on does see NaN."""
    tensors = {"/model/0.weight": torch.tensor([1.0, float("nan")]),
               "/model/mask": torch.tensor([float("-inf")])}
    assert nonfinite_in_checkpoint(tensors, ["0.weight"]) == ["/model/0.weight"]
