"""batch_size="auto": the search on out-of-memory, the CPU memory budget, the target
effective batch."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader, TensorDataset

from reprise.core.errors import UserError
from reprise.train import Trainer, find_batch_size
from reprise.train._batch import largest_fitting


class FakeOOM(RuntimeError):
    pass


def is_fake(exc: BaseException) -> bool:
    return isinstance(exc, FakeOOM)


@settings(max_examples=60, deadline=None)
@given(capacity=st.integers(1, 5000), start=st.integers(1, 64), limit=st.integers(1, 6000))
def test_largest_fitting_finds_the_capacity_exactly(capacity: int, start: int,
                                                    limit: int) -> None:
    tried: list[int] = []

    def try_batch(b: int) -> None:
        tried.append(b)
        if b > capacity:
            raise FakeOOM("CUDA out of memory")

    size, tries = largest_fitting(try_batch, start=start, limit=limit, is_oom=is_fake)
    assert size == min(capacity, limit)
    assert tries == len(tried) and max(tried) <= limit
    assert tries <= 2 * (limit.bit_length() + 1) + 1  # doubling then bisection, not a scan


def test_largest_fitting_reraises_other_errors_and_refuses_when_nothing_fits() -> None:
    def broken(b: int) -> None:
        raise ValueError("a bug in the model")

    with pytest.raises(ValueError, match="a bug"):
        largest_fitting(broken, is_oom=is_fake)

    def never(b: int) -> None:
        raise FakeOOM

    with pytest.raises(UserError, match="not even a batch of 1"):
        largest_fitting(never, is_oom=is_fake)


def mlp(width: int) -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(16, width), torch.nn.ReLU(),
                               torch.nn.Linear(width, 2))


def step(model: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(model(batch[0]), batch[1])


def probe() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(8, 16), torch.randint(0, 2, (8,))


def test_cpu_budget_scales_with_memory_and_activation_size() -> None:
    small = find_batch_size(mlp(64), probe(), step, memory_budget=4 << 20)
    big = find_batch_size(mlp(64), probe(), step, memory_budget=64 << 20)
    wide = find_batch_size(mlp(1024), probe(), step, memory_budget=64 << 20)
    assert small["method"] == "memory-budget"
    assert small["batch_size"] < big["batch_size"]
    assert wide["batch_size"] < big["batch_size"]
    for found in (small, big, wide):
        b = found["batch_size"]
        assert b & (b - 1) == 0  # a power of two
        assert found["fixed_bytes"] + b * found["per_sample_bytes"] <= found["memory_budget"]
    with pytest.raises(UserError, match="memory_budget"):
        find_batch_size(mlp(4096), probe(), step, memory_budget=1000)


def table(n: int) -> pa.Table:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 16)).astype(np.float32)
    return pa.table({**{f"x{i}": x[:, i] for i in range(16)},
                     "y": (x[:, 0] > 0).astype(np.int64)})


def test_trainer_auto_batch_keeps_the_target_effective_batch() -> None:
    trainer = Trainer(mlp(256), lambda p: torch.optim.SGD(p, lr=0.1),
                      loss=torch.nn.functional.cross_entropy, batch_size="auto",
                      target_batch_size=600, memory_budget=2 << 20, label="y", device="cpu")
    result = trainer.fit(table(1200))
    choice = trainer.batch_choice
    assert choice["accumulate"] > 1
    assert choice["batch_size"] * choice["accumulate"] >= 600
    assert choice["batch_size"] * (choice["accumulate"] - 1) < 600
    assert result.summary["accumulate"] == choice["accumulate"]
    assert result.global_step == 2  # 1200 rows, effective batch 600
    assert "target effective batch 600" in choice["reason"]


def test_auto_batch_needs_a_table_not_a_loader() -> None:
    loader = DataLoader(TensorDataset(torch.randn(8, 16), torch.zeros(8, dtype=torch.long)),
                        batch_size=4)
    trainer = Trainer(mlp(8), lambda p: torch.optim.SGD(p, lr=0.1),
                      loss=torch.nn.functional.cross_entropy, batch_size="auto", device="cpu")
    with pytest.raises(UserError, match="batch_size='auto' needs a table"):
        trainer.fit(loader)
    with pytest.raises(UserError, match="target_batch_size goes with batch_size='auto'"):
        Trainer(mlp(8), lambda p: torch.optim.SGD(p, lr=0.1),
                loss=torch.nn.functional.cross_entropy, target_batch_size=64)
