"""Non-finite weights never reach a checkpoint, and a checkpoint holding them is never
resumed from (one process; the DDP cases are in test_ddp_faults.py)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

from reprise.core.errors import UserError
from reprise.train import Callback, CheckpointManager, Trainer
from reprise.train._nonfinite import nonfinite_in_checkpoint, nonfinite_in_module


class Net(torch.nn.Module):
    """A linear model with a parameter the loss never reads (a head not trained yet), and
    an attention-style mask buffer that is legitimately -inf."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body = torch.nn.Linear(4, 1)
        self.unused = torch.nn.Parameter(torch.zeros(3))
        self.register_buffer("mask", torch.full((2, 2), float("-inf")).triu(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)  # type: ignore[no-any-return]


def data() -> DataLoader[Any]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4, generator=g)
    return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)


def make(folder: Path, **kw: Any) -> Trainer:
    kw.setdefault("max_epochs", 1)
    return Trainer(Net(), lambda p: torch.optim.SGD(p, lr=0.01), loss=F.mse_loss, device="cpu",
                   checkpoint_dir=folder, checkpoint_every=2, keep_last=10, **kw)


class PoisonAt(Callback):
    """Puts NaN into the unused parameter after optimizer step ``at``: the loss stays
    finite, the weights do not."""

    def __init__(self, at: int) -> None:
        self.at = at

    def on_step_end(self, trainer: Trainer) -> None:
        if trainer.global_step == self.at:
            with torch.no_grad():
                trainer.module.unused[1] = float("nan")


def test_non_finite_weights_with_a_finite_loss_stop_before_the_checkpoint(tmp_path: Path) -> None:
    result = make(tmp_path, callbacks=[PoisonAt(3)]).fit(data())
    assert result.stopped == "nonfinite" and result.global_step == 4
    assert result.checkpoint is None
    assert [p.name for p in CheckpointManager(tmp_path).checkpoints()] == ["ckpt-000000002"]


def test_an_infinite_mask_buffer_is_not_taken_for_divergence(tmp_path: Path) -> None:
    result = make(tmp_path).fit(data())
    assert result.stopped == "max_epochs" and result.checkpoint is not None
    assert nonfinite_in_module(Net()) == []


def test_save_checkpoint_refuses_non_finite_weights(tmp_path: Path) -> None:
    t = make(tmp_path)
    t.fit(data())
    before = CheckpointManager(tmp_path).checkpoints()
    with torch.no_grad():
        t.module.body.weight[0, 0] = float("inf")
    with pytest.raises(UserError, match=r"refusing to write a checkpoint.*'body.weight'.*"
                                        r"ckpt-000000008"):
        t.save_checkpoint()
    assert CheckpointManager(tmp_path).checkpoints() == before
    assert not list(tmp_path.glob(".tmp-*"))


def nan_copy(folder: Path, source: str, step: int) -> Path:
    """A checkpoint like ``source`` but with NaN weights (as an older version wrote them)."""
    mgr = CheckpointManager(folder, keep_last=10)
    tensors, state = mgr.load(folder / source)
    tensors = {k: v.clone() for k, v in tensors.items()}
    tensors["/model/body.weight"][0, 1] = float("nan")
    assert nonfinite_in_checkpoint(tensors, ["body.weight"]) == ["/model/body.weight"]
    return mgr.save(step, tensors, state)


def test_resume_auto_passes_over_a_checkpoint_with_nan_weights(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    make(tmp_path, max_steps=4).fit(data())
    bad = nan_copy(tmp_path, "ckpt-000000004", 6)
    with caplog.at_level(logging.WARNING, logger="reprise.train"):
        result = make(tmp_path, resume="auto", max_steps=6).fit(data())
    assert result.resumed_from == str(tmp_path / "ckpt-000000004")
    assert f"skipping checkpoint {bad}" in caplog.text and "'/model/body.weight'" in caplog.text
    assert result.stopped == "max_steps" and result.global_step == 6


def test_resuming_from_a_named_checkpoint_with_nan_weights_is_refused(tmp_path: Path) -> None:
    make(tmp_path, max_steps=2).fit(data())
    bad = nan_copy(tmp_path, "ckpt-000000002", 4)
    with pytest.raises(UserError, match=r"cannot resume from .*ckpt-000000004.*NaN or infinite"):
        make(tmp_path, resume=bad).fit(data())


def test_a_nan_in_a_parameter_buffer_or_optimizer_state_is_found() -> None:
    tensors = {"/model/w": torch.tensor([1.0]), "/model/mask": torch.tensor([-float("inf")]),
               "/model/stats": torch.tensor([float("nan")]),
               "/optimizer/state/0/momentum_buffer": torch.tensor([float("inf")]),
               "/rng/torch": torch.zeros(3, dtype=torch.uint8)}
    assert nonfinite_in_checkpoint(tensors, ["w"]) == [
        "/model/stats", "/optimizer/state/0/momentum_buffer"]
