"""The input-bound advice: given only when the wait for data is large and worth acting on."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest
import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset

from reprise.train import Trainer
from reprise.train._advice import (
    INPUT_BOUND_FRACTION,
    INPUT_BOUND_MIN_STEPS,
    INPUT_BOUND_MIN_WAIT_S,
    input_bound,
    input_bound_advice,
)

LONG = {"data_wait_fraction": 0.4, "data_wait_seconds": 120.0, "optimizer_steps": 5000}


def test_a_long_run_that_waits_a_large_share_is_input_bound() -> None:
    assert input_bound(0.4, 120.0, 5000)
    advice = input_bound_advice(LONG)
    assert advice is not None and advice.startswith("input-bound: 40% of step time (120 s)")
    assert "num_workers" in advice


@pytest.mark.parametrize("change", [
    {"data_wait_fraction": INPUT_BOUND_FRACTION / 2},  # a small share, however long
    {"data_wait_seconds": INPUT_BOUND_MIN_WAIT_S / 2},  # a large share of a short run
    {"optimizer_steps": INPUT_BOUND_MIN_STEPS - 1},  # too few steps to tell
])
def test_each_condition_is_needed(change: dict[str, Any]) -> None:
    assert input_bound_advice({**LONG, **change}) is None


def test_the_thresholds_themselves_count() -> None:
    assert input_bound(INPUT_BOUND_FRACTION, INPUT_BOUND_MIN_WAIT_S, INPUT_BOUND_MIN_STEPS)


def test_a_run_without_profile_gets_no_advice() -> None:
    assert input_bound_advice({"optimizer_steps": 10_000}) is None


class _SlowRows(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Rows that take 2 ms each to fetch: most of a tiny model's step is the wait."""

    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(0.002)
        return torch.full((4,), float(i)), torch.ones(1)


def test_a_short_run_waiting_for_data_does_not_warn(caplog: pytest.LogCaptureFixture) -> None:
    trainer = Trainer(torch.nn.Linear(4, 1), lambda p: torch.optim.SGD(p, lr=1e-4),
                      loss=F.mse_loss, device="cpu", max_epochs=2)
    with caplog.at_level(logging.INFO, logger="reprise.train"):
        summary = trainer.fit(DataLoader(_SlowRows(), batch_size=8)).summary
    assert summary["data_wait_fraction"] > INPUT_BOUND_FRACTION  # a large share...
    assert summary["data_wait_seconds"] < INPUT_BOUND_MIN_WAIT_S  # ...of a short run
    assert summary["input_bound"] is False
    assert "trained:" in caplog.text and "input-bound" not in caplog.text
