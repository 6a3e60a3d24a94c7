"""The Trainer's loop on tiny CPU problems: accumulation and its normalisation, the
schedule, clipping, mixed precision, early stopping, non-finite losses, validation that
leaves the random streams alone, metrics and summary, devices, tables, SIGTERM, resume,
the determinism check, and the errors for bad input. (Killing a real process and
resuming it bit for bit is in test_resume.py.)"""

from __future__ import annotations

import copy
import json
import os
import random
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

import reprise
from reprise.core.errors import UserError
from reprise.data._loader import SeededSampler
from reprise.train import (
    Callback,
    CheckpointManager,
    EarlyStopping,
    Preempted,
    Trainer,
    check_determinism,
    select_device,
)

NO_ACCELERATOR = not torch.cuda.is_available() and not (
    hasattr(torch.backends, "mps") and torch.backends.mps.is_available())


def regression(n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]) + 0.1 * torch.randn(n, 1, generator=g)
    return x, y


def loader(n: int = 64, batch_size: int = 16, seed: int = 0) -> DataLoader[Any]:
    return DataLoader(TensorDataset(*regression(n, seed)), batch_size=batch_size, shuffle=False)


def linear(seed: int = 0) -> torch.nn.Linear:
    g = torch.Generator().manual_seed(seed)
    model = torch.nn.Linear(4, 1)
    with torch.no_grad():
        model.weight.copy_(torch.randn(1, 4, generator=g))
        model.bias.copy_(torch.randn(1, generator=g))
    return model


def sgd(lr: float = 0.1) -> Any:
    return lambda params: torch.optim.SGD(params, lr=lr)


def trainer(model: torch.nn.Module | None = None, *, lr: float = 0.1, **kw: Any) -> Trainer:
    kw.setdefault("loss", F.mse_loss)
    kw.setdefault("device", "cpu")
    return Trainer(model if model is not None else linear(), sgd(lr), **kw)


def flat_params(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


class Steps(Callback):
    """Records the learning rate and the parameters after each optimizer step."""

    def __init__(self) -> None:
        self.lrs: list[float] = []
        self.steps = 0

    def on_step_end(self, trainer: Trainer) -> None:
        self.steps += 1
        self.lrs.append(trainer.optimizer.param_groups[0]["lr"])


# -- gradient accumulation ----------------------------------------------------------------


def test_accumulating_two_batches_of_8_equals_one_batch_of_16() -> None:
    small = trainer(accumulate=2, max_epochs=2)
    small.fit(loader(64, 8))
    big = trainer(max_epochs=2)
    big.fit(loader(64, 16))
    assert small.global_step == big.global_step == 8
    assert small.samples_seen == big.samples_seen == 128
    torch.testing.assert_close(flat_params(small.module), flat_params(big.module))
    assert not torch.equal(flat_params(big.module), flat_params(linear()))


def hand_sgd(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, windows: list[int],
             lr: float) -> torch.nn.Module:
    """One full-batch gradient step (mean loss) per window of consecutive samples."""
    ref = copy.deepcopy(model)
    start = 0
    for size in windows:
        ref.zero_grad()
        F.mse_loss(ref(x[start:start + size]), y[start:start + size]).backward()
        with torch.no_grad():
            for p in ref.parameters():
                p -= lr * p.grad
        start += size
    assert start == len(x)
    return ref


@pytest.mark.parametrize(("n", "batch_size", "accumulate", "windows"), [
    (36, 8, 2, [16, 16, 4]),  # 5 batches: a short last window holding a short last batch
    (28, 8, 2, [16, 12]),  # a short last batch inside the last window: weighted 4 of 12
    (40, 8, 3, [24, 16]),  # a short last window of two full batches
    (20, 8, 1, [8, 8, 4]),  # no accumulation: the short last batch is its own mean
])
def test_each_window_is_one_step_on_its_mean_loss(n: int, batch_size: int, accumulate: int,
                                                  windows: list[int]) -> None:
    x, y = regression(n)
    t = trainer(accumulate=accumulate)
    t.fit(DataLoader(TensorDataset(x, y), batch_size=batch_size, shuffle=False))
    assert t.global_step == len(windows)
    expected = hand_sgd(linear(), x, y, windows, lr=0.1)
    torch.testing.assert_close(flat_params(t.module), flat_params(expected))


def head_and_body() -> torch.nn.Sequential:
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


def head_only_sgd(model: torch.nn.Sequential) -> torch.optim.Optimizer:
    return torch.optim.SGD(model[2].parameters(), lr=0.1, momentum=0.9)


def hand_head_only(x: torch.Tensor, y: torch.Tensor, window: int, epochs: int,
                   clip: float) -> torch.nn.Sequential:
    """The plain PyTorch loop: the optimizer over the head only, the body still requiring
    grad; zero_grad, the window's mean loss, clip the optimizer's parameters, step."""
    model = head_and_body()
    opt = head_only_sgd(model)
    for _ in range(epochs):
        for start in range(0, len(x), window):
            opt.zero_grad()
            F.mse_loss(model(x[start:start + window]), y[start:start + window]).backward()
            torch.nn.utils.clip_grad_norm_(model[2].parameters(), clip)
            opt.step()
    return model


@pytest.mark.parametrize(("batch_size", "accumulate"), [(32, 1), (8, 4)])
def test_an_optimizer_over_part_of_the_model_matches_the_hand_loop(
        batch_size: int, accumulate: int, caplog: pytest.LogCaptureFixture) -> None:
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(96, 6, generator=g), 5 * torch.randn(96, 1, generator=g)
    model = head_and_body()
    body = flat_params(model[0]).clone()
    for p in model.parameters():  # gradients left from before fit() do not count either
        p.grad = torch.full_like(p, 100.0)
    t = Trainer(model, head_only_sgd(model), loss=F.mse_loss, device="cpu", accumulate=accumulate,
                clip_grad_norm=0.5, max_epochs=2)
    with caplog.at_level("INFO", logger="reprise.train"):
        t.fit(DataLoader(TensorDataset(x, y), batch_size=batch_size))
    assert t.global_step == 6
    expected = hand_head_only(x, y, window=32, epochs=2, clip=0.5)
    # 8 x 4 and 32 x 1 both equal the hand loop (so each other) to float32 rounding
    torch.testing.assert_close(flat_params(model), flat_params(expected), rtol=0, atol=1e-6)
    assert torch.equal(flat_params(model[0]), body)  # the body is not stepped
    assert all(p.grad is None for p in model.parameters())  # nothing carried past the end
    assert "2 parameter tensor(s) of the model require grad but are not in the optimizer" \
        in caplog.text


# -- schedule, clipping ---------------------------------------------------------------------


def test_the_scheduler_steps_once_per_optimizer_step() -> None:
    steps = Steps()
    t = trainer(accumulate=2, max_epochs=2, callbacks=[steps],
                scheduler=lambda opt: torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5))
    t.fit(loader(36, 8))  # 5 micro-batches → 3 optimizer steps per epoch
    assert t.global_step == 6 and t.scheduler.last_epoch == 6
    assert steps.lrs == pytest.approx([0.1 * 0.5**k for k in range(1, 7)])
    assert t.optimizer.param_groups[0]["lr"] == pytest.approx(0.1 * 0.5**6)


def test_a_scheduler_instance_is_used_as_given() -> None:
    model = linear()
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0 / (1 + step))
    t = Trainer(model, opt, loss=F.mse_loss, device="cpu", scheduler=sched, accumulate=4)
    t.fit(loader(64, 4))  # 16 micro-batches → 4 steps
    assert t.scheduler is sched and sched.last_epoch == 4
    assert opt.param_groups[0]["lr"] == pytest.approx(1 / 5)


def big_gradient_loader() -> DataLoader[Any]:
    x, y = regression(16)
    return DataLoader(TensorDataset(x, 100 * y), batch_size=16, shuffle=False)


def one_step_update(**kw: Any) -> torch.Tensor:
    t = trainer(lr=1.0, max_steps=1, **kw)
    before = flat_params(t.module).clone()
    t.fit(big_gradient_loader())
    return flat_params(t.module) - before


def test_clip_grad_norm_bounds_the_update() -> None:
    assert one_step_update().norm() > 10  # unclipped, the step is large
    update = one_step_update(clip_grad_norm=0.5)
    assert update.norm() == pytest.approx(0.5, rel=1e-4)


def test_clip_grad_value_bounds_every_coordinate() -> None:
    assert one_step_update().abs().max() > 1
    update = one_step_update(clip_grad_value=0.01)
    assert update.abs().max() <= 0.01 + 1e-7
    assert update.abs().max() == pytest.approx(0.01)


# -- mixed precision ----------------------------------------------------------------------


@pytest.mark.parametrize(("precision", "dtype"), [("bf16-mixed", torch.bfloat16),
                                                   ("16-mixed", torch.float16)])
def test_mixed_precision_runs_on_cpu_and_lowers_the_loss(precision: str,
                                                         dtype: torch.dtype) -> None:
    seen: set[torch.dtype] = set()

    def step(model: Any, batch: Any) -> torch.Tensor:
        out = model(batch[0])
        seen.add(out.dtype)
        return F.mse_loss(out.float(), batch[1])

    x, y = regression(64)
    before = F.mse_loss(linear()(x), y).item()
    t = Trainer(linear(), sgd(0.05), training_step=step, device="cpu", precision=precision,
                max_epochs=5)
    result = t.fit(DataLoader(TensorDataset(x, y), batch_size=16))
    assert seen == {dtype}  # the forward pass really ran under autocast
    assert (t.scaler is not None) == (precision == "16-mixed")
    assert result.summary["precision"] == precision
    with torch.no_grad():
        assert F.mse_loss(t.module(x), y).item() < 0.5 * before


def test_under_bf16_mixed_matmuls_are_bf16_and_losses_weights_and_gradients_float32() -> None:
    dtypes: dict[str, torch.dtype] = {}

    class Grads(Callback):
        def on_batch_end(self, trainer: Trainer) -> None:
            dtypes["grad"] = trainer.module.weight.grad.dtype

    def step(model: Any, batch: Any) -> torch.Tensor:
        out = model(batch[0])
        loss = F.mse_loss(out, batch[1])
        dtypes.update(out=out.dtype, loss=loss.dtype, weight=model.weight.dtype)
        return loss

    Trainer(linear(), sgd(), training_step=step, device="cpu", precision="bf16-mixed",
            max_steps=1, callbacks=[Grads()]).fit(loader(16, 16))
    assert dtypes == {"out": torch.bfloat16, "loss": torch.float32, "weight": torch.float32,
                      "grad": torch.float32}


@pytest.mark.parametrize("precision", ["16", "fp16", "bf16", 32])
def test_an_unknown_precision_is_refused(precision: Any) -> None:
    with pytest.raises(UserError, match="precision must be one of"):
        trainer(precision=precision)


# -- early stopping -----------------------------------------------------------------------


def scripted(values: list[float]) -> Any:
    """A validation_step returning the next scripted value at each validation pass."""
    it: Iterator[float] = iter(values)
    return lambda model, batch: {"val_loss": next(it)}


def test_early_stopping_stops_after_patience_validations_without_improvement() -> None:
    steps = Steps()
    t = trainer(lr=0.0, max_steps=100, val_every=1, callbacks=[steps],
                early_stopping=EarlyStopping(patience=2))
    result = t.fit(loader(64, 4), loader(8, 8))
    assert result.stopped == "early_stopping"
    assert len(result.validations) == 3  # the first sets the best, then 2 without progress
    assert result.global_step == steps.steps == 3
    assert [v["step"] for v in result.validations] == [1, 2, 3]


@pytest.mark.parametrize(("min_delta", "stopped", "validations"),
                         [(0.0, "max_steps", 6), (0.1, "early_stopping", 3)])
def test_improvements_smaller_than_min_delta_do_not_count(min_delta: float, stopped: str,
                                                          validations: int) -> None:
    values = [1.0, 0.95, 0.92, 0.91, 0.905, 0.9]
    t = trainer(max_steps=6, val_every=1, validation_step=scripted(values),
                early_stopping=EarlyStopping(patience=2, min_delta=min_delta))
    result = t.fit(loader(64, 8), loader(8, 8))
    assert result.stopped == stopped
    assert [v["val_loss"] for v in result.validations] == values[:validations]


def test_early_stopping_in_max_mode_on_an_epoch_schedule() -> None:
    t = trainer(max_epochs=10, validation_step=scripted([0.5, 0.7, 0.6, 0.7, 0.65]),
                early_stopping=EarlyStopping(monitor="val_loss", mode="max", patience=2))
    result = t.fit(loader(32, 16), loader(8, 8))  # val_every defaults to "epoch"
    assert result.stopped == "early_stopping"
    assert result.epoch == 4 and result.global_step == 8
    assert t.early_stopping is not None and t.early_stopping.best == 0.7


def test_early_stopping_on_a_missing_metric_names_the_ones_there() -> None:
    t = trainer(max_steps=3, val_every=1, early_stopping=EarlyStopping(monitor="val_acc"))
    with pytest.raises(UserError, match=r"monitors 'val_acc'.*\['val_loss'\]"):
        t.fit(loader(), loader(8, 8))


@pytest.mark.parametrize(("kw", "match"), [({"mode": "up"}, "mode"), ({"patience": 0}, "patience"),
                                            ({"min_delta": -0.1}, "min_delta")])
def test_early_stopping_arguments_are_checked(kw: dict[str, Any], match: str) -> None:
    with pytest.raises(UserError, match=match):
        EarlyStopping(**kw)


# -- non-finite losses --------------------------------------------------------------------


def nan_step(model: Any, batch: Any) -> torch.Tensor:
    return F.mse_loss(model(batch[0]), batch[1]) * float("nan")


@pytest.mark.parametrize("kw", [{"training_step": nan_step}, {"lr": 1e30}],
                         ids=["nan-step", "huge-lr"])
def test_a_non_finite_loss_stops_without_a_checkpoint(tmp_path: Path, kw: dict[str, Any]) -> None:
    t = trainer(max_epochs=3, log_every=1, checkpoint_dir=tmp_path, **kw)
    result = t.fit(loader(64, 8))
    assert result.stopped == "nonfinite"
    assert result.global_step < 24
    assert result.checkpoint is None and CheckpointManager(tmp_path).checkpoints() == []


def test_a_non_finite_loss_is_caught_before_the_final_checkpoint(tmp_path: Path) -> None:
    t = trainer(training_step=nan_step, checkpoint_dir=tmp_path)  # default log_every=50
    result = t.fit(loader(64, 8))
    assert result.stopped == "nonfinite"
    assert CheckpointManager(tmp_path).checkpoints() == []


def test_stop_on_nonfinite_false_keeps_going() -> None:
    result = trainer(training_step=nan_step, log_every=1, stop_on_nonfinite=False).fit(loader())
    assert result.stopped == "max_epochs" and result.global_step == 4


# -- validation ---------------------------------------------------------------------------


def test_validation_leaves_every_random_stream_as_it_was() -> None:
    modes: list[bool] = []

    def noisy_validation(model: Any, batch: Any) -> dict[str, float]:
        modes.append(model.training)
        random.random()
        np.random.random()
        return {"val_loss": float(torch.rand(()))}

    def after_fit(val: DataLoader[Any] | None) -> tuple[Any, ...]:
        t = trainer(max_steps=4, val_every=1, seed=3, validation_step=noisy_validation)
        t.fit(loader(64, 8), val)
        assert t.module.training  # back in train mode
        return random.random(), np.random.random(), torch.rand(3).tolist(), t.validations

    *without, none = after_fit(None)
    *with_validation, validations = after_fit(loader(16, 8))
    assert none == [] and len(validations) == 4 and modes and not any(modes)
    assert with_validation == without


def test_validation_averages_over_samples_and_reports_metrics() -> None:
    t = trainer(max_steps=1, metrics={"mae": lambda out, y: (out - y).abs().mean()})
    t.fit(loader())
    x, y = regression(20, seed=5)
    metrics = t.validate(DataLoader(TensorDataset(x, y), batch_size=8))  # 8, 8, 4
    with torch.no_grad():
        out = t.module(x)
    assert metrics["val_loss"] == pytest.approx(F.mse_loss(out, y).item(), rel=1e-5)
    assert metrics["mae"] == pytest.approx((out - y).abs().mean().item(), rel=1e-5)
    assert t.validations == []  # explicit data is not one of the run's validations


def test_validate_works_before_fit() -> None:
    metrics = trainer().validate(loader())
    assert metrics["val_loss"] > 0


def test_validate_without_data_says_what_to_pass() -> None:
    t = trainer(max_steps=1)
    t.fit(loader())
    with pytest.raises(UserError, match="no validation data"):
        t.validate()


# -- metrics and summary ------------------------------------------------------------------

PROFILE_KEYS = {"train/samples_per_s", "train/data_wait_frac", "train/step_ms",
                "train/peak_mem_mb", "train/energy_j_per_step", "train/summary/samples_per_s",
                "train/summary/data_wait_fraction", "train/summary/peak_mem_mb"}


@pytest.mark.parametrize("profile", [True, False])
def test_metrics_go_to_the_active_run(workspace: reprise.Workspace, profile: bool) -> None:
    with reprise.start_run("train") as run:
        trainer(max_steps=4, log_every=1, val_every=2, profile=profile).fit(
            loader(64, 8), loader(16, 8))
    points = workspace.metadata.get_metrics(run.id)
    keys = {p.key for p in points}
    assert {"train/loss", "train/lr", "val/loss", "train/summary/optimizer_steps",
            "train/summary/samples", "train/summary/final_loss"} <= keys
    assert [p.step for p in workspace.metadata.get_metrics(run.id, "train/loss")] == [1, 2, 3, 4]
    assert [p.step for p in workspace.metadata.get_metrics(run.id, "val/loss")] == [2, 4]
    assert {p.value for p in workspace.metadata.get_metrics(run.id, "train/lr")} == {0.1}
    (steps,) = workspace.metadata.get_metrics(run.id, "train/summary/optimizer_steps")
    assert steps.value == 4
    if profile:
        assert PROFILE_KEYS <= keys
        fracs = workspace.metadata.get_metrics(run.id, "train/data_wait_frac")
        assert all(0 <= p.value <= 1 for p in fracs)
    else:
        assert not keys & PROFILE_KEYS


def test_without_an_active_run_nothing_is_logged(workspace: reprise.Workspace) -> None:
    trainer(max_steps=2, log_every=1).fit(loader())  # no run started: no error, no run
    assert workspace.metadata.list_runs() == []


def test_the_summary_has_the_profile_and_checkpoint_figures(tmp_path: Path) -> None:
    result = trainer(max_epochs=2, checkpoint_dir=tmp_path).fit(loader(64, 8))
    s = result.summary
    assert s["optimizer_steps"] == 16 and s["samples"] == 128 and s["epochs"] == 2
    assert s["stopped"] == "max_epochs" and s["device"] == "cpu" and s["batch_size"] == 8
    assert s["samples_per_s"] > 0 and 0 <= s["data_wait_fraction"] <= 1
    assert s["energy_j_per_step"] >= 0 and s["energy_source"] in (
        "estimate", "rapl", "nvml", "nvml+rapl")
    assert s["peak_mem_mb"] > 1
    assert s["checkpoints"] == 1 and s["checkpoint_seconds"] > 0
    assert result.checkpoint == str(tmp_path / "ckpt-000000016")


def test_the_summary_without_profile_or_checkpoints() -> None:
    s = trainer(profile=False).fit(loader()).summary
    assert not {"samples_per_s", "data_wait_fraction", "energy_j_per_step", "energy_source",
                "peak_mem_mb", "checkpoint_seconds"} & set(s)
    assert s["input_bound"] is False and s["final_loss"] > 0


def test_the_checkpoint_fraction_is_a_fraction(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import reprise.train._checkpoint as ckpt

    write = ckpt._write_tensors

    def slow_write(tensors: Any, path: Path) -> None:  # a slow disk
        time.sleep(0.2)
        write(tensors, path)

    monkeypatch.setattr(ckpt, "_write_tensors", slow_write)
    s = trainer(max_steps=1, checkpoint_dir=tmp_path).fit(loader()).summary
    assert 0 <= s["checkpoint_fraction"] <= 1


# -- devices ------------------------------------------------------------------------------


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_asking_for_cuda_without_it_warns_and_trains_on_cpu() -> None:
    t = trainer(device="cuda", max_steps=1)
    with pytest.warns(RuntimeWarning, match="CUDA is not available"):
        result = t.fit(loader())
    assert t.device.type == "cpu" and result.summary["device"] == "cpu"


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_the_cuda_fallback_warning_points_at_the_callers_line() -> None:
    t = trainer(device="cuda:0", max_steps=1)
    with pytest.warns(RuntimeWarning) as record:
        t.fit(loader())
    assert record[0].filename == __file__


@pytest.mark.parametrize("device", ["gpu", "cuda:x", "bogus:0", ""])
def test_a_bad_device_string_is_a_user_error(device: str) -> None:
    with pytest.raises(UserError, match="is not a device"):
        trainer(device=device).fit(loader())


@pytest.mark.skipif(not NO_ACCELERATOR, reason="needs a machine without CUDA or MPS")
def test_auto_on_cpu_says_why() -> None:
    dev, why = select_device("auto")
    assert dev.type == "cpu" and "no CUDA or MPS" in why
    assert select_device(None)[0].type == "cpu"
    assert select_device("cpu") == (torch.device("cpu"), "cpu: asked for")


# -- tables -------------------------------------------------------------------------------


def classification_table(n: int) -> pa.Table:
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=n).astype(np.float32), rng.normal(size=n).astype(np.float32)
    return pa.table({"a": a, "b": b, "y": (a + b > 0).astype(np.int64)})


@pytest.mark.parametrize("kind", ["arrow", "pandas"])
def test_fit_on_a_table_builds_a_reprise_loader(kind: str) -> None:
    table = classification_table(50)
    data: Any = table if kind == "arrow" else table.to_pandas()
    assert kind == "arrow" or isinstance(data, pd.DataFrame)
    model = torch.nn.Linear(2, 2)
    t = Trainer(model, sgd(0.5), loss=F.cross_entropy, device="cpu", label="y", batch_size=16,
                max_epochs=3, seed=1)
    result = t.fit(data, data)
    assert isinstance(t.train_loader.batch_sampler.sampler, SeededSampler)
    assert result.global_step == 12 and result.summary["samples"] == 150  # 16+16+16+2 a epoch
    assert result.summary["batch_size"] == 16 and len(result.validations) == 3
    assert result.validations[-1]["val_loss"] < result.validations[0]["val_loss"]


def test_fit_on_a_list_is_refused() -> None:
    with pytest.raises(UserError, match="cannot train on a list"):
        trainer().fit([[1.0, 2.0]])


# -- SIGTERM ------------------------------------------------------------------------------


class SendSigterm(Callback):
    def __init__(self, at: int) -> None:
        self.at, self.seen = at, 0

    def on_batch_end(self, trainer: Trainer) -> None:
        self.seen += 1
        if self.seen == self.at:
            os.kill(os.getpid(), signal.SIGTERM)


@pytest.mark.parametrize("at", [2, 3], ids=["end-of-window", "mid-window"])
def test_sigterm_without_checkpoint_dir_raises_preempted(at: int) -> None:
    caught: list[int] = []
    # a fallback handler so that a Trainer that failed to install its own cannot kill pytest
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: caught.append(signum))
    try:
        mine = signal.getsignal(signal.SIGTERM)
        steps = Steps()
        t = trainer(accumulate=2, max_epochs=2, callbacks=[SendSigterm(at), steps])
        with pytest.raises(Preempted) as info:
            t.fit(loader(64, 8))
        assert signal.getsignal(signal.SIGTERM) is mine  # the handler is put back
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert caught == []
    assert isinstance(info.value, SystemExit) and info.value.code == 143
    assert info.value.checkpoint is None and "nothing saved" in str(info.value)
    assert t.global_step == steps.steps == 1
    assert t.batch_in_epoch == at


# -- resume -------------------------------------------------------------------------------


def test_resume_auto_in_an_empty_folder_starts_fresh(tmp_path: Path) -> None:
    result = trainer(max_steps=3, checkpoint_dir=tmp_path, resume="auto").fit(loader(64, 8))
    assert result.resumed_from is None and result.global_step == 3
    assert result.checkpoint == str(tmp_path / "ckpt-000000003")


def test_a_resumed_fit_continues_the_same_run(tmp_path: Path) -> None:
    first = trainer(max_steps=3, checkpoint_dir=tmp_path, seed=5)
    first.fit(loader(64, 8))
    steps = Steps()
    second = trainer(linear(seed=99), max_steps=5, checkpoint_dir=tmp_path, seed=5,
                     resume="auto", callbacks=[steps])
    result = second.fit(loader(64, 8))
    assert result.resumed_from == str(tmp_path / "ckpt-000000003")
    assert result.global_step == 5 and steps.steps == 2 and result.summary["samples"] == 40
    straight = trainer(max_steps=5, seed=5)
    straight.fit(loader(64, 8))
    assert torch.equal(flat_params(second.module), flat_params(straight.module))


def test_resuming_with_another_batch_size_is_refused(tmp_path: Path) -> None:
    trainer(max_steps=2, checkpoint_dir=tmp_path).fit(loader(64, 8))
    again = trainer(max_steps=4, checkpoint_dir=tmp_path, resume="auto")
    with pytest.raises(UserError, match="batch_size 8 → 16"):
        again.fit(loader(64, 16))


def table_of(n: int, shift: float = 0.0) -> pa.Table:
    x, y = regression(n)
    x = x + shift
    return pa.table({**{f"x{i}": x[:, i].numpy() for i in range(4)}, "y": y[:, 0].numpy()})


def table_trainer(folder: Path, **kw: Any) -> Trainer:
    return trainer(loss=lambda out, y: F.mse_loss(out[:, 0], y), label="y", batch_size=16,
                   checkpoint_dir=folder, resume="auto", **kw)


def tensor_loader(x: torch.Tensor, y: torch.Tensor) -> DataLoader[Any]:
    return DataLoader(TensorDataset(x, y[:, 0]), batch_size=16)


@pytest.mark.parametrize(("before", "after", "change"), [
    (lambda: table_of(64), lambda: table_of(80), r"\(64 → 80 samples, content fingerprint"),
    (lambda: table_of(64), lambda: table_of(64, shift=1.0),
     r"\(content fingerprint [0-9a-f]{12} → [0-9a-f]{12}\)"),
    (lambda: tensor_loader(*regression(64)), lambda: tensor_loader(*regression(80)),
     r"\(64 → 80 samples, content"),
    (lambda: tensor_loader(*regression(64)), lambda: tensor_loader(*regression(64, seed=1)),
     r"\(content fingerprint"),
], ids=["longer table", "table, same length", "longer TensorDataset",
        "TensorDataset, same length"])
def test_resuming_on_changed_data_is_refused_unless_allowed(
        tmp_path: Path, before: Any, after: Any, change: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    table_trainer(tmp_path, max_steps=2).fit(before())
    # the checkpoint records the data: 64 samples and the BLAKE3 of their content
    record = json.loads((tmp_path / "ckpt-000000002" / "state.json").read_text())["state"]["data"]
    assert record["samples"] == 64 and len(record["fingerprint"]) == 64
    with pytest.raises(UserError, match="training data changed since the checkpoint was "
                                        f"written {change}.*resume_allow_data_change=True"):
        table_trainer(tmp_path, max_steps=4).fit(after())
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt-000000002"]  # nothing written
    result = table_trainer(tmp_path, max_steps=4, resume_allow_data_change=True).fit(after())
    assert result.resumed_from is not None and result.global_step == 4
    monkeypatch.setenv("REPRISE_RESUME_ALLOW_DATA_CHANGE", "1")  # reprise train's flag
    result = table_trainer(tmp_path, max_steps=6).fit(after())
    assert result.resumed_from is not None and result.global_step == 6


def test_resuming_on_a_changed_parquet_stream_is_refused(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    from reprise.data import make_loader

    path = tmp_path / "train.parquet"
    pq.write_table(table_of(64), path, row_group_size=16)
    stream = lambda: make_loader(path, batch_size=16, label="y", streaming=True)  # noqa: E731
    table_trainer(tmp_path / "ckpt", max_steps=2).fit(stream())
    pq.write_table(table_of(80), path, row_group_size=16)
    with pytest.raises(UserError, match=r"\(64 → 80 samples, content fingerprint"):
        table_trainer(tmp_path / "ckpt", max_steps=4).fit(stream())


def test_resuming_on_the_same_data_in_a_new_table_is_accepted(tmp_path: Path) -> None:
    table_trainer(tmp_path, max_steps=2).fit(table_of(64))
    assert table_trainer(tmp_path, max_steps=4).fit(table_of(64)).global_step == 4
    with pytest.raises(UserError, match="drop_last False → True"):  # another epoch length
        table_trainer(tmp_path, max_steps=6, drop_last=True).fit(table_of(64))


def test_resuming_from_a_damaged_checkpoint_is_refused(tmp_path: Path) -> None:
    path = Path(str(trainer(max_steps=2, checkpoint_dir=tmp_path).fit(loader()).checkpoint))
    tensors = path / "tensors.safetensors"
    tensors.write_bytes(tensors.read_bytes()[:-10])
    with pytest.raises(UserError, match="cannot resume from .*wrong size"):
        trainer(max_steps=4, resume=path).fit(loader())


def test_resume_auto_needs_a_checkpoint_dir() -> None:
    with pytest.raises(UserError, match="resume='auto'.*checkpoint_dir"):
        trainer(resume="auto")


# -- determinism check --------------------------------------------------------------------


def test_check_determinism_on_a_deterministic_trainer() -> None:
    def make() -> tuple[Trainer, DataLoader[Any]]:
        return trainer(torch.nn.Linear(4, 1)), loader(64, 8)

    report = check_determinism(make, steps=3)
    assert report.deterministic and report.steps == 3
    assert report.first_divergent_step is None and report.parameter is None
    assert str(report) == "deterministic over 3 optimizer step(s)"


def test_check_determinism_names_the_step_and_parameter_that_diverge() -> None:
    def noisy_step(model: Any, batch: Any) -> torch.Tensor:
        # unseeded noise: nothing check_determinism seeds can make two runs agree
        noise = int.from_bytes(os.urandom(8), "little") / 2**64 + time.perf_counter_ns() % 7
        return F.mse_loss(model(batch[0]), batch[1]) * (1.0 + noise)

    def make() -> tuple[Trainer, DataLoader[Any]]:
        return trainer(torch.nn.Linear(4, 1), training_step=noisy_step), loader(64, 8)

    report = check_determinism(make, steps=3)
    assert not report.deterministic
    assert report.first_divergent_step == 1
    assert report.parameter == "weight" and set(report.parameters) == {"weight", "bias"}
    assert report.max_abs_diff is not None and report.max_abs_diff > 0
    text = str(report)
    assert text.startswith("diverged at optimizer step 1: parameter weight (+1 more)")
    assert "max |Δ|" in text


def test_check_determinism_needs_positive_steps() -> None:
    with pytest.raises(UserError, match="steps must be a positive integer"):
        check_determinism(lambda: trainer(), steps=0)


# -- bad input ----------------------------------------------------------------------------


@pytest.mark.parametrize(("kw", "match"), [
    ({"loss": None}, "needs loss=fn"),
    ({"accumulate": 0}, "accumulate must be a positive integer"),
    ({"accumulate": True}, "accumulate must be a positive integer"),
    ({"max_steps": -1}, "max_steps must be a positive integer or None"),
    ({"max_epochs": 0}, "max_epochs must be a positive integer or None"),
    ({"val_every": "bogus"}, "val_every must be a positive integer"),
    ({"val_every": 0}, "val_every must be a positive integer"),
    ({"keep_last": 0}, "keep_last must be a positive integer"),
    ({"log_every": 1.5}, "log_every must be a positive integer"),
    ({"batch_size": 0}, "batch_size must be a positive integer or 'auto'"),
    ({"target_batch_size": 64}, "target_batch_size goes with batch_size='auto'"),
    ({"clip_grad_norm": 0}, "clip_grad_norm must be a positive number"),
    ({"clip_grad_value": -1.0}, "clip_grad_value must be a positive number"),
    ({"seed": -1}, r"seed must be an integer in \[0, 2\*\*32\)"),
    ({"seed": 2**32}, r"seed must be an integer in \[0, 2\*\*32\)"),
    ({"resume_allow_data_change": "yes"}, "resume_allow_data_change must be True or False"),
], ids=lambda v: str(v) if isinstance(v, dict) else "")
def test_bad_arguments_are_refused_at_construction(kw: dict[str, Any], match: str) -> None:
    with pytest.raises(UserError, match=match):
        trainer(**kw)


def test_fit_without_data_is_refused() -> None:
    with pytest.raises(UserError, match="fit\\(\\) needs training data"):
        trainer().fit(None)


def test_dict_batches_with_loss_are_refused_with_the_fix() -> None:
    x, y = regression(16)
    dicts = DataLoader([{"x": x[i], "y": y[i]} for i in range(16)], batch_size=8)
    with pytest.raises(UserError, match=r"\(inputs, target\) tuples.*yields dict.*training_step"):
        trainer().fit(dicts)


def test_dict_batches_work_with_a_training_step() -> None:
    x, y = regression(16)
    dicts = DataLoader([{"x": x[i], "y": y[i]} for i in range(16)], batch_size=8)
    result = trainer(training_step=lambda m, b: {"loss": F.mse_loss(m(b["x"]), b["y"])}).fit(dicts)
    assert result.global_step == 2 and result.summary["samples"] == 16


def test_a_non_scalar_loss_is_refused() -> None:
    t = trainer(loss=lambda out, y: F.mse_loss(out, y, reduction="none"))
    with pytest.raises(UserError, match=r"scalar tensor; got Tensor \(16, 1\)"):
        t.fit(loader())


def test_a_loss_that_is_not_a_tensor_is_refused() -> None:
    t = trainer(training_step=lambda m, b: 1.0)
    with pytest.raises(UserError, match="scalar tensor; got float"):
        t.fit(loader())


def test_an_optimizer_over_other_parameters_is_refused() -> None:
    other = torch.nn.Linear(4, 1)
    t = Trainer(linear(), torch.optim.SGD(other.parameters(), lr=0.1), loss=F.mse_loss,
                device="cpu")
    with pytest.raises(UserError, match="not the model's"):
        t.fit(loader())


def test_an_optimizer_factory_returning_something_else_is_refused() -> None:
    with pytest.raises(UserError, match="optimizer must be a torch.optim.Optimizer"):
        Trainer(linear(), lambda params: "adam", loss=F.mse_loss, device="cpu").fit(loader())


def test_a_scheduler_of_another_optimizer_is_refused() -> None:
    other = torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(other, 1)
    with pytest.raises(UserError, match="scheduler belongs to another optimizer"):
        trainer(scheduler=sched).fit(loader())


# -- tuning trials ------------------------------------------------------------------------


class _Recorder:
    def __init__(self, prune_at: int | None) -> None:
        self.seen: list[tuple[dict[str, float], int]] = []
        self.prune_at = prune_at

    def report(self, values: Any, step: int) -> None:
        self.seen.append((dict(values), step))

    def should_prune(self) -> bool:
        return self.prune_at is not None and len(self.seen) >= self.prune_at


def test_validation_metrics_go_to_the_enclosing_trial_which_can_prune() -> None:
    from reprise.core._report import reporting_to
    from reprise.core.errors import TrialPruned

    rec = _Recorder(prune_at=None)
    with reporting_to(rec):
        trainer(max_epochs=3).fit(loader(), loader())
    assert [step for _, step in rec.seen] == [1, 2, 3] and "val_loss" in rec.seen[0][0]
    pruned = _Recorder(prune_at=2)
    with reporting_to(pruned), pytest.raises(TrialPruned, match="after validation 2 "
                                                               r"\(optimizer step 8\)"):
        trainer(max_epochs=3).fit(loader(), loader())
