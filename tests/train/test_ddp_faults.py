"""DDP under faults, with real torch.distributed (gloo) processes on the CPU: a NaN in
one rank's batch stops every rank, no checkpoint holds NaN weights, and no process
outlives the launch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from reprise.train import CheckpointManager, launch
from reprise.train._nonfinite import nonfinite_in_checkpoint
from tests.train._procs import survivors

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


def test_a_nan_checkpoint_is_found() -> None:
    """The checker the tests above rely on does see NaN."""
    tensors = {"/model/0.weight": torch.tensor([1.0, float("nan")]),
               "/model/mask": torch.tensor([float("-inf")])}
    assert nonfinite_in_checkpoint(tensors, ["0.weight"]) == ["/model/0.weight"]
