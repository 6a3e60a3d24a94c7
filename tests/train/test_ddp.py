"""Two CPU processes on gloo through torchrun equal one process with the same global batch,
and a run whose rank 1 is killed resumes to the uninterrupted DDP result."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from reprise.core.errors import UserError
from reprise.train import launch
from tests.train._procs import survivors

JOB = Path(__file__).with_name("_ddp_job.py")
ENV = {"PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1"}


def final(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(str(folder / "final.safetensors"))


def test_two_ranks_equal_one_process_with_the_same_global_batch(tmp_path: Path) -> None:
    single, ddp = tmp_path / "single", tmp_path / "ddp"
    assert launch(JOB, [str(single), "32"], nproc=1, env=ENV, timeout=240) == 0
    assert launch(JOB, [str(ddp), "16"], nproc=2, env=ENV, timeout=240) == 0
    a, b = final(single), final(ddp)
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-5, atol=1e-6)
    # rank 0 alone checkpoints
    assert {p.name for p in (ddp / "ckpt").iterdir()} == {"ckpt-000000016", "ckpt-000000024",
                                                          "ckpt-000000020"}


def test_killing_one_rank_then_resuming_matches_the_uninterrupted_run(tmp_path: Path) -> None:
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    assert launch(JOB, [str(whole), "16"], nproc=2, env=ENV, timeout=240) == 0
    # rank 1 dies in epoch 1, after checkpoints at steps 4 and 8
    assert launch(JOB, [str(killed), "16", "1", "11"], nproc=2, env=ENV, timeout=240) != 0
    assert survivors(killed) == []  # rank 0, blocked in a collective, went too
    assert not (killed / "final.safetensors").exists()
    assert any(p.name.startswith("ckpt-") for p in (killed / "ckpt").iterdir())
    assert launch(JOB, [str(killed), "16"], nproc=2, env=ENV, timeout=240) == 0
    a, b = final(whole), final(killed)
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_launch_refuses_bad_input(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="not a file"):
        launch(tmp_path / "missing.py")
    with pytest.raises(UserError, match="nproc"):
        launch(JOB, nproc=0)
    assert os.environ.get("WORLD_SIZE") is None


def test_reprise_train_cli_launches_two_ranks(tmp_path: Path) -> None:
    from tests.pipeline.test_pipelines import cli

    out = tmp_path / "out"
    res = cli(tmp_path, "train", "--nproc", "2", str(JOB), str(out), "16")
    assert (out / "final.safetensors").is_file(), res.stderr
    assert "device cpu" in res.stderr  # rank 0 logs, once
    assert res.stderr.count("reprise.train: trained:") == 1
    bad = cli(tmp_path, "train", str(tmp_path / "nope.py"), check=False)
    assert bad.returncode == 2 and "is not a file" in bad.stderr
