"""The training loop: a lean PyTorch Trainer that resumes bit-for-bit.

Written on PyTorch primitives (``torch.autocast``, ``torch.amp.GradScaler``,
``torch.nn.parallel.DistributedDataParallel``) rather than on Lightning or
Accelerate, because exact resume needs control of three things those loops
do not give: when the data order is drawn (per epoch from ``(seed, epoch)``,
never from the global generator), where inside an epoch and inside an
accumulation window a checkpoint was taken, and the state of every random
generator at that instant. A checkpoint holds all of it (see
:mod:`reprise.train._checkpoint`), so a run killed at any point and resumed
from its newest checkpoint replays the same micro-batches with the same
random draws and ends with byte-identical weights and optimizer state.

Per-step work beyond the hand-written loop is kept to two ``perf_counter``
calls, a list append and a counter check; losses are reduced, metrics logged
and energy read only every ``log_every`` optimizer steps.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from reprise.core.errors import UserError
from reprise.train._advice import input_bound_advice

__all__ = ["Callback", "EarlyStopping", "Preempted", "TrainResult", "Trainer"]

log = logging.getLogger("reprise.train")

PRECISIONS = ("32", "bf16-mixed", "16-mixed")
DEFAULT_CHECKPOINT_EVERY = 1000


class Preempted(SystemExit):
    """Raised by :meth:`Trainer.fit` after SIGTERM, once a checkpoint is written.

    A ``SystemExit`` with code 143 (128 + SIGTERM): left uncaught, the process
    exits like one killed by the signal, and code after ``fit()`` (saving a
    "final" model) does not run as if training had finished.
    """

    def __init__(self, message: str, checkpoint: Path | None) -> None:
        super().__init__(143)
        self.message, self.checkpoint = message, checkpoint

    def __str__(self) -> str:
        return self.message


@dataclass
class EarlyStopping:
    """Stop when ``monitor`` has not improved by ``min_delta`` for ``patience`` validations."""

    monitor: str = "val_loss"
    mode: Literal["min", "max"] = "min"
    patience: int = 3
    min_delta: float = 0.0
    best: float | None = None
    bad: int = 0

    def __post_init__(self) -> None:
        if self.mode not in ("min", "max"):
            raise UserError(f"EarlyStopping mode must be 'min' or 'max'; got {self.mode!r}")
        if not isinstance(self.patience, int) or self.patience < 1:
            raise UserError(f"EarlyStopping patience must be a positive integer; got "
                            f"{self.patience!r}")
        if not self.min_delta >= 0:
            raise UserError(f"EarlyStopping min_delta must be >= 0; got {self.min_delta!r}")

    def update(self, metrics: Mapping[str, float]) -> str | None:
        """Record one validation; the reason to stop, or None."""
        if self.monitor not in metrics:
            raise UserError(f"EarlyStopping monitors {self.monitor!r} but validation produced "
                            f"{sorted(metrics)}; set monitor= to one of them")
        value = float(metrics[self.monitor])
        if not math.isfinite(value):
            return f"{self.monitor} is {value}"
        better = (self.best is None or (value < self.best - self.min_delta if self.mode == "min"
                                        else value > self.best + self.min_delta))
        if better:
            self.best, self.bad = value, 0
            return None
        self.bad += 1
        if self.bad >= self.patience:
            return (f"{self.monitor} did not improve on {self.best:.6g} for {self.bad} "
                    "validations")
        return None

    def state_dict(self) -> dict[str, Any]:
        return {"best": self.best, "bad": self.bad}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.best, self.bad = state["best"], int(state["bad"])


class Callback:
    """Hooks into the loop; override the ones you need. ``trainer`` exposes the counters."""

    def on_fit_start(self, trainer: Trainer) -> None:
        """Set up, after a resume (if any), before the first batch."""

    def on_batch_end(self, trainer: Trainer) -> None:
        """After each micro-batch's backward (``trainer.batch_in_epoch`` counts them)."""

    def on_step_end(self, trainer: Trainer) -> None:
        """After each optimizer step (``trainer.global_step`` counts them)."""

    def on_validation_batch_end(self, trainer: Trainer, index: int) -> None:
        """After each validation batch."""

    def on_validation_end(self, trainer: Trainer, metrics: dict[str, float]) -> None:
        """After a validation pass, with its metrics."""

    def on_checkpoint(self, trainer: Trainer, path: Path) -> None:
        """After a checkpoint was written."""

    def on_fit_end(self, trainer: Trainer, result: TrainResult) -> None:
        """After training stopped for any reason but an exception."""


@dataclass
class TrainResult:
    """What :meth:`Trainer.fit` did."""

    global_step: int
    epoch: int
    stopped: str
    summary: dict[str, Any] = field(default_factory=dict)
    validations: list[dict[str, float]] = field(default_factory=list)
    checkpoint: str | None = None
    resumed_from: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _len_of(batch: Any) -> int:
    """Samples in a batch: the first dimension of its first tensor."""
    if hasattr(batch, "shape"):
        return int(batch.shape[0]) if batch.dim() else 1
    if isinstance(batch, Mapping):
        for v in batch.values():
            return _len_of(v)
    if isinstance(batch, list | tuple) and batch:
        return _len_of(batch[0])
    return 1


def _to_device(batch: Any, device: Any, non_blocking: bool) -> Any:
    if hasattr(batch, "to") and hasattr(batch, "shape"):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, Mapping):
        return {k: _to_device(v, device, non_blocking) for k, v in batch.items()}
    if isinstance(batch, list | tuple):
        return type(batch)(_to_device(v, device, non_blocking) for v in batch)
    return batch


def _mix(*parts: int) -> int:
    from reprise.data._loader import _mix as mix

    return mix(*parts) >> 1


class Trainer:
    """Train a ``torch.nn.Module``; resumable bit-for-bit, profiled, tracked.

    Args:
        model: the module to train (moved to the chosen device).
        optimizer: a ``torch.optim.Optimizer`` over the model's parameters, or a
            callable ``params -> Optimizer`` (called after the move to the device).
        loss: ``loss(output, target)`` for batches ``(inputs, target)``; or give
            ``training_step(model, batch) -> loss tensor`` for any batch format.
        validation_step: ``(model, batch) -> {name: value}`` (averaged over the
            validation set, weighted by batch size); default ``{"val_loss": loss}``.
        metrics: extra validation metrics ``{name: fn(output, target)}``.
        max_epochs, max_steps: stop at whichever comes first (steps count
            optimizer steps); ``max_epochs`` defaults to 1 when neither is given.
        precision: ``"32"``, ``"bf16-mixed"`` (``torch.autocast`` in bfloat16)
            or ``"16-mixed"`` (float16 with a ``GradScaler``).
        accumulate: micro-batches per optimizer step. Each micro-batch's mean
            loss is weighted by its size and the window's gradient divided by
            the window's sample count, so a short last window (or a short last
            batch) is normalised exactly.
        clip_grad_norm, clip_grad_value: gradient clipping (after unscaling).
        scheduler: an LR scheduler, or ``optimizer -> scheduler``; stepped
            after every optimizer step.
        val_every: validate every N optimizer steps, or ``"epoch"`` (default
            when validation data is given).
        early_stopping: an :class:`EarlyStopping`.
        stop_on_nonfinite: stop (and write no checkpoint) when the training
            loss becomes NaN or infinite.
        device: ``"auto"`` (CUDA, then MPS, then CPU), or a device string.
        compile: wrap the model in ``torch.compile``.
        deterministic: seed everything (``seed``, default 0), turn on
            ``torch.use_deterministic_algorithms`` and the cuDNN flags and set
            ``CUBLAS_WORKSPACE_CONFIG``.
        seed: seeds Python, numpy and torch at a fresh start, and with the
            epoch the data order of loaders that do not fix their own.
        checkpoint_dir: where checkpoints go; None writes none.
        checkpoint_every: optimizer steps between checkpoints (default 1000);
            one is also written at the end and on SIGTERM.
        keep_last: checkpoints kept.
        resume: None (start fresh), ``"auto"`` (the newest whole checkpoint in
            ``checkpoint_dir``, or a fresh start when there is none) or a
            checkpoint folder.
        batch_size: batch size when ``fit`` is given a table or dataset rather
            than a DataLoader; ``"auto"`` finds the largest that fits (see
            :func:`reprise.train.find_batch_size`).
        target_batch_size: with ``batch_size="auto"``, set ``accumulate`` so
            that batch × accumulate stays at this effective batch.
        label, columns, num_workers: how a table or dataset becomes a loader
            (:func:`reprise.make_loader`).
        log_every: optimizer steps between metric points.
        profile: time data wait vs compute, samples/s, memory and energy.
        callbacks: :class:`Callback` instances.
    """

    def __init__(self, model: Any, optimizer: Any, *, loss: Callable[..., Any] | None = None,
                 training_step: Callable[[Any, Any], Any] | None = None,
                 validation_step: Callable[[Any, Any], Mapping[str, Any]] | None = None,
                 metrics: Mapping[str, Callable[[Any, Any], Any]] | None = None,
                 max_epochs: int | None = None, max_steps: int | None = None,
                 precision: str = "32", accumulate: int = 1,
                 clip_grad_norm: float | None = None, clip_grad_value: float | None = None,
                 scheduler: Any = None, val_every: int | Literal["epoch"] | None = None,
                 early_stopping: EarlyStopping | None = None, stop_on_nonfinite: bool = True,
                 device: Any = "auto", compile: bool = False, deterministic: bool = False,
                 seed: int | None = None, checkpoint_dir: str | os.PathLike[str] | None = None,
                 checkpoint_every: int | None = None, keep_last: int = 3,
                 resume: str | os.PathLike[str] | None = None,
                 batch_size: int | Literal["auto"] = 32, target_batch_size: int | None = None,
                 memory_budget: int | None = None, label: str | None = None,
                 columns: Sequence[str] | None = None, num_workers: int = 0,
                 log_every: int = 50, profile: bool = True,
                 callbacks: Sequence[Callback] = ()) -> None:
        if loss is None and training_step is None:
            raise UserError("Trainer needs loss=fn(output, target) or "
                            "training_step=fn(model, batch) -> loss")
        if precision not in PRECISIONS:
            raise UserError(f"precision must be one of {list(PRECISIONS)}; got {precision!r}")
        positive: tuple[tuple[str, Any], ...] = (
            ("accumulate", accumulate), ("keep_last", keep_last), ("log_every", log_every))
        for name, value in positive:
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UserError(f"{name} must be a positive integer; got {value!r}")
        optional: tuple[tuple[str, Any], ...] = (("max_epochs", max_epochs), ("max_steps", max_steps),
                            ("checkpoint_every", checkpoint_every),
                            ("target_batch_size", target_batch_size))
        for name, value in optional:
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < 1):
                raise UserError(f"{name} must be a positive integer or None; got {value!r}")
        if val_every is not None and val_every != "epoch" and (
                isinstance(val_every, bool) or not isinstance(val_every, int) or val_every < 1):
            raise UserError(f"val_every must be a positive integer (optimizer steps) or "
                            f"'epoch'; got {val_every!r}")
        if batch_size != "auto" and (isinstance(batch_size, bool)
                                     or not isinstance(batch_size, int) or batch_size < 1):
            raise UserError(f"batch_size must be a positive integer or 'auto'; got "
                            f"{batch_size!r}")
        if target_batch_size is not None and batch_size != "auto":
            raise UserError("target_batch_size goes with batch_size='auto'; with a fixed batch "
                            "size set accumulate yourself")
        if resume is not None and checkpoint_dir is None and resume == "auto":
            raise UserError("resume='auto' looks for checkpoints in checkpoint_dir; set it")
        clips: tuple[tuple[str, Any], ...] = (("clip_grad_norm", clip_grad_norm),
                                              ("clip_grad_value", clip_grad_value))
        for name, value in clips:
            if value is not None and not (isinstance(value, int | float) and value > 0):
                raise UserError(f"{name} must be a positive number; got {value!r}")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)
                                 or not 0 <= seed < 2**32):
            raise UserError(f"seed must be an integer in [0, 2**32); got {seed!r}")
        self.module = model
        self._optimizer_arg = optimizer
        self.loss_fn, self.training_step, self.validation_step = loss, training_step, \
            validation_step
        self.metrics = dict(metrics or {})
        self.max_epochs = max_epochs if (max_epochs or max_steps) else 1
        self.max_steps = max_steps
        self.precision, self.accumulate = precision, accumulate
        self.clip_grad_norm, self.clip_grad_value = clip_grad_norm, clip_grad_value
        self._scheduler_arg = scheduler
        self.val_every = val_every
        self.early_stopping = early_stopping
        self.stop_on_nonfinite = stop_on_nonfinite
        self.device_arg, self.compile, self.deterministic = device, compile, deterministic
        self.seed = 0 if (seed is None and deterministic) else seed
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir is not None else None
        self.checkpoint_every = checkpoint_every or DEFAULT_CHECKPOINT_EVERY
        self.keep_last, self.resume = keep_last, resume
        self.batch_size, self.target_batch_size = batch_size, target_batch_size
        self.memory_budget = memory_budget
        self.label, self.columns, self.num_workers = label, columns, num_workers
        self.log_every, self.profile = log_every, profile
        self.callbacks = list(callbacks)
        # counters: what a checkpoint must restore
        self.global_step = 0
        self.epoch = 0
        self.batch_in_epoch = 0  # micro-batches consumed in the current epoch
        self.window = 0  # micro-batches in the current (not yet stepped) accumulation window
        self.window_samples = 0
        self.samples_seen = 0
        self.validations: list[dict[str, float]] = []
        self.optimizer: Any = None
        self.scheduler: Any = None
        self.scaler: Any = None
        self.device: Any = None
        self.rank, self.world_size, self.local_rank = 0, 1, 0
        self.checkpoints: Any = None
        self._ready = False
        self._owns_group = False
        self._quiet = False
        self._stop_signal: int | None = None
        self._pending_losses: list[Any] = []
        self._epoch_rng: tuple[int, list[Any]] | None = None  # (epoch, generator states)
        self._resumed = False
        self._loss_values: list[float] = []

    # -- set-up ----------------------------------------------------------------------------

    def _setup(self) -> None:
        import torch

        from reprise.train._device import select_device

        self.world_size = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.device, why = select_device(
            self.device_arg, local_rank=self.local_rank if self.world_size > 1 else None)
        self._say(f"device {why}")
        self._join_group()
        if self.precision != "32" and self.device.type == "mps" and self.precision == "16-mixed":
            raise UserError("precision='16-mixed' needs CUDA or CPU; use 'bf16-mixed' or '32'")
        self.module.to(self.device)
        opt = self._optimizer_arg
        self.optimizer = opt if isinstance(opt, torch.optim.Optimizer) else opt(
            self.module.parameters())
        if not isinstance(self.optimizer, torch.optim.Optimizer):
            raise UserError("optimizer must be a torch.optim.Optimizer or a callable returning "
                            "one")
        owned = {id(p) for p in self.module.parameters()}
        if any(id(p) not in owned for g in self.optimizer.param_groups for p in g["params"]):
            raise UserError("the optimizer holds parameters that are not the model's; build it "
                            "from model.parameters() (or pass a callable params -> optimizer)")
        sch = self._scheduler_arg
        if sch is not None and not hasattr(sch, "step"):
            sch = sch(self.optimizer)
        if sch is not None and getattr(sch, "optimizer", self.optimizer) is not self.optimizer:
            raise UserError("the scheduler belongs to another optimizer than the Trainer's")
        self.scheduler = sch
        if self.precision == "16-mixed":
            self.scaler = torch.amp.GradScaler(self.device.type)
        dtype = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}.get(self.precision)
        self._autocast: Callable[[], Any] = (
            (lambda: torch.autocast(device_type=self.device.type, dtype=dtype))
            if dtype is not None else contextlib.nullcontext)
        self.checkpoints = None
        if self.checkpoint_dir is not None:
            from reprise.train._checkpoint import CheckpointManager

            self.checkpoints = CheckpointManager(self.checkpoint_dir, keep_last=self.keep_last)
        self._ready = True

    def _join_group(self) -> None:
        """Under torchrun, join (or create) the default process group."""
        if self.world_size == 1:
            return
        import torch.distributed as dist

        if not dist.is_initialized():
            dist.init_process_group("nccl" if self.device.type == "cuda" else "gloo")
            self._owns_group = True
        if dist.get_world_size() != self.world_size:
            raise UserError(f"WORLD_SIZE={self.world_size} but the process group has "
                            f"{dist.get_world_size()} ranks")
        self.rank = dist.get_rank()

    def _leave_group(self, finished: bool) -> None:
        """Destroy the process group this Trainer created.

        After a finished fit every rank waits for the others first (rank 0 is
        still writing the last checkpoint): a rank that exits while its gloo
        group is alive can abort in the group's destructor. After a failure no
        barrier is attempted, since a peer may be dead.
        """
        if not self._owns_group:
            return
        import torch.distributed as dist

        if dist.is_initialized():
            if finished:
                dist.barrier()
            dist.destroy_process_group()
        self._owns_group = False

    def _wrap(self) -> Any:
        """The callable used for forward passes: DDP and/or compiled around the module."""
        model = self.module
        if self.world_size > 1:
            from torch.nn.parallel import DistributedDataParallel

            model = DistributedDataParallel(
                model, device_ids=[self.device.index] if self.device.type == "cuda" else None)
        if self.compile:
            import torch

            model = torch.compile(model)
        return model

    def _say(self, message: str, level: int = logging.INFO) -> None:
        if self.rank != 0 or self._quiet:
            return
        if not log.handlers and not logging.getLogger().handlers:
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(logging.Formatter("reprise.train: %(message)s"))
            log.addHandler(handler)
            log.setLevel(logging.INFO)
        log.log(level, message)

    # -- data ------------------------------------------------------------------------------

    def _loader(self, data: Any, *, train: bool) -> Any:
        """A DataLoader for ``data`` (a DataLoader passes through)."""
        from torch.utils.data import DataLoader

        if data is None or isinstance(data, DataLoader):
            if train and data is not None and self.batch_size == "auto":
                raise UserError("batch_size='auto' needs a table or dataset, not a DataLoader "
                                "(the Trainer builds the loader with the size it finds)")
            return data
        if isinstance(data, Sequence) and not hasattr(data, "to_arrow"):
            raise UserError(f"cannot train on a {type(data).__name__}: give a DataLoader, a "
                            "pyarrow.Table, a pandas.DataFrame, a Parquet path or a dataset")
        from reprise.data._loader import make_loader

        size = self.batch_size
        if size == "auto":
            size = self._auto_batch(data) if train else getattr(self, "_chosen_batch", 256)
        return make_loader(data, batch_size=int(size), label=self.label, columns=self.columns,
                           shuffle=train, seed=self.seed or 0, num_workers=self.num_workers,
                           num_replicas=self.world_size if train else 1,
                           rank=self.rank if train else 0)

    def _auto_batch(self, data: Any) -> int:
        from reprise.data._loader import make_loader
        from reprise.train._batch import choose_batch

        probe = make_loader(data, batch_size=8, label=self.label, columns=self.columns,
                            shuffle=False)
        inner = getattr(probe.batch_sampler, "sampler", None)
        n = len(inner) if inner is not None else None
        choice = choose_batch(self, probe, n_samples=n, target=self.target_batch_size,
                              memory_budget=self.memory_budget)
        self._chosen_batch = choice["batch_size"]
        self.accumulate = choice["accumulate"]
        self.batch_choice = choice
        self._say(f"batch size {choice['batch_size']} × accumulate {choice['accumulate']}: "
                  f"{choice['reason']}")
        return int(choice["batch_size"])

    def _seeded_sampler(self, loader: Any) -> Any:
        from reprise.data._loader import SeededSampler

        for cand in (getattr(loader.batch_sampler, "sampler", None), loader.sampler):
            if isinstance(cand, SeededSampler):
                return cand
        return None

    def _shard(self, loader: Any) -> None:
        """Under DDP, make each rank read its own shard of every epoch."""
        if self.world_size == 1:
            return
        from torch.utils.data import DistributedSampler

        sampler = self._seeded_sampler(loader)
        if sampler is not None:
            if sampler.num_replicas == 1:
                sampler.num_replicas, sampler.rank = self.world_size, self.rank
            return
        if isinstance(loader.sampler, DistributedSampler):
            return
        raise UserError("under DDP the training loader must shard the data: give a table or "
                        "dataset, a loader from reprise.make_loader, or a DataLoader with a "
                        "DistributedSampler")

    def _data_generators(self, loader: Any) -> list[Any]:
        """The generators the loader draws its order and worker seeds from.

        A loader without one would draw from the global generator when each
        epoch starts, which a resume cannot replay; it gets its own, seeded from
        ``seed`` (or, when no seed is set, one draw from torch's global generator,
        as the DataLoader itself would make).
        """
        import torch
        from torch.utils.data import RandomSampler

        if loader.generator is None:
            if self.seed is not None:
                first = _mix(self.seed, 11)
            elif self._resumed:
                first = 0  # replaced by the checkpoint's generator state
            else:
                first = int(torch.empty((), dtype=torch.int64).random_().item())
            loader.generator = torch.Generator().manual_seed(first)
            if isinstance(loader.sampler, RandomSampler) and loader.sampler.generator is None:
                loader.sampler.generator = loader.generator
        gens = [loader.generator]
        other = getattr(loader.sampler, "generator", None)
        if other is not None and other is not loader.generator:
            gens.append(other)
        return gens

    def _epoch_batches(self, loader: Any, epoch: int, skip: int) -> Iterator[Any]:
        """This epoch's batches from micro-batch ``skip`` on.

        The order is what the loader would give uninterrupted: the state of its
        generators at the start of each epoch is kept (and checkpointed), and a
        resume puts it back before the iterator is made, so the same order and
        worker seeds are drawn; reprise loaders then start at the right sample,
        others are read past the batches already trained on.
        """
        gens = self._data_generators(loader)
        if self._epoch_rng is not None and self._epoch_rng[0] == epoch:
            for g, state in zip(gens, self._epoch_rng[1], strict=False):
                g.set_state(state)
        self._epoch_rng = (epoch, [g.get_state() for g in gens])
        sampler = self._seeded_sampler(loader)
        if sampler is not None:
            sampler.set_epoch(epoch)
            bs = getattr(loader.batch_sampler, "batch_size", None) or loader.batch_size
            sampler.start = min(skip * int(bs), sampler.num_samples)
            yield from loader
            return
        stream = loader.dataset
        if hasattr(stream, "start") and hasattr(stream, "epoch") and hasattr(stream, "group_rows"):
            stream.epoch, stream.start = epoch, skip * stream.batch_size
            yield from loader
            return
        if hasattr(loader.sampler, "set_epoch"):
            loader.sampler.set_epoch(epoch)
        it = iter(loader)
        if skip:
            self._say(f"resuming inside epoch {epoch}: reading past {skip} batch(es) (use a "
                      "reprise loader to skip without loading them)")
            for _ in range(skip):
                next(it)
        yield from it

    def _epoch_length(self, loader: Any) -> int | None:
        try:
            return len(loader)
        except TypeError:
            return None

    # -- the loop --------------------------------------------------------------------------

    def fit(self, train_data: Any = None, val_data: Any = None, *,
            max_steps: int | None = None) -> TrainResult:
        """Train until ``max_epochs``/``max_steps``, early stopping, or SIGTERM.

        ``train_data`` is a DataLoader, or a table / DataFrame / Parquet path /
        dataset version turned into one with :func:`reprise.make_loader`.
        """
        if train_data is None:
            raise UserError("fit() needs training data: a DataLoader, a table or a dataset")
        if max_steps is not None:
            self.max_steps = max_steps
        if not self._ready:
            self._setup()
        else:
            self._join_group()  # a second fit() after the first left its group
        restore_det = self._determinism_on()
        resumed = self._maybe_resume()
        if self.seed is not None and resumed is None:
            from reprise.env import seed_everything

            seed_everything(self.seed)
        self.train_loader = self._loader(train_data, train=True)
        self.val_loader = self._loader(val_data, train=False)
        self._check_resumed_config()
        if self.val_every is None and self.val_loader is not None:
            self.val_every = "epoch"
        self._shard(self.train_loader)
        self.model = self._wrap()
        self.module.train()
        old_handler = self._install_sigterm()
        from reprise.tracking._energy import EnergyMeter

        self._energy = EnergyMeter(use_nvml=self.device.type == "cuda").start() \
            if self.profile else None
        finished = False
        try:
            self._check_determinism_for_verify()
            for cb in self.callbacks:
                cb.on_fit_start(self)
            t0 = time.perf_counter()
            stopped = self._loop()
            if stopped != "nonfinite" and self._check_losses() is not None:
                stopped = "nonfinite"  # in the steps since the last check
            last = None
            if stopped != "nonfinite" and self.checkpoints is not None:
                last = self.save_checkpoint()
            summary = self._summary(time.perf_counter() - t0, stopped)
            result = TrainResult(global_step=self.global_step, epoch=self.epoch, stopped=stopped,
                                 summary=summary, validations=list(self.validations),
                                 checkpoint=str(last) if last else None,
                                 resumed_from=str(resumed) if resumed else None)
            self._report(summary)
            for cb in self.callbacks:
                cb.on_fit_end(self, result)
            finished = True
            return result
        finally:
            self._leave_group(finished)
            if old_handler is not None:
                signal.signal(signal.SIGTERM, old_handler)
            if self._energy is not None:
                self._energy.close()
            restore_det()

    def _loop(self, stop_at: int | None = None) -> str:
        """Run from the current counters; the reason it stopped."""
        loader = self.train_loader
        n_batches = self._epoch_length(loader)
        acc = self.accumulate
        self._t_data = self._t_compute = 0.0
        self._interval_start = time.perf_counter()
        self._interval_samples = 0
        self._interval_data = self._interval_compute = 0.0
        self._interval_steps = 0
        self._energy_mark = self._energy.read() if self._energy is not None else 0.0
        callbacks = self.callbacks
        while self.max_epochs is None or self.epoch < self.max_epochs:
            batches = self._epoch_batches(loader, self.epoch, self.batch_in_epoch)
            t_prev = time.perf_counter()
            for batch in batches:
                if self.device.type != "cpu":
                    batch = _to_device(batch, self.device, True)
                t_got = time.perf_counter()
                self.batch_in_epoch += 1
                closes = self.window + 1 == acc or self.batch_in_epoch == n_batches
                self._micro_step(batch, sync=closes)
                t_done = time.perf_counter()
                self._interval_data += t_got - t_prev
                self._interval_compute += t_done - t_got
                t_prev = t_done
                for cb in callbacks:
                    cb.on_batch_end(self)
                if closes:
                    self._apply_step()
                    t_step = time.perf_counter()
                    self._interval_compute += t_step - t_done
                    reason = self._after_step()
                    if reason is None and stop_at is not None and self.global_step >= stop_at:
                        reason = "check"
                    if reason is not None:
                        return reason
                    t_prev = time.perf_counter()
                elif self._stop_signal is not None and self.world_size == 1:
                    self._preempt()
            if self.window:  # an epoch of unknown length ended inside a window
                self._apply_step()
                reason = self._after_step()
                if reason is not None:
                    return reason
            if self.val_every == "epoch" and self.val_loader is not None:
                reason = self._validate_and_check()
                if reason is not None:
                    self.epoch += 1
                    self.batch_in_epoch = 0
                    return reason
            self.epoch += 1
            self.batch_in_epoch = 0
        return "max_epochs"

    def _micro_step(self, batch: Any, *, sync: bool) -> None:
        n = _len_of(batch)
        no_sync = self.world_size > 1 and not sync and hasattr(self.model, "no_sync")
        ctx = self.model.no_sync() if no_sync else contextlib.nullcontext()
        with ctx:
            with self._autocast():
                loss = self._compute_loss(batch, self.model)
            self._pending_losses.append(loss.detach())
            if self.accumulate > 1:
                loss = loss * n
            if self.scaler is not None:
                loss = self.scaler.scale(loss)
            loss.backward()
        self.window += 1
        self.window_samples += n
        self.samples_seen += n
        self._interval_samples += n

    def _compute_loss(self, batch: Any, model: Any) -> Any:
        if self.training_step is not None:
            out = self.training_step(model, batch)
            loss = out["loss"] if isinstance(out, Mapping) else out
        else:
            if not isinstance(batch, list | tuple) or len(batch) < 2:
                raise UserError("with loss= the batches must be (inputs, target) tuples; this "
                                f"loader yields {type(batch).__name__}. Give the loader a label "
                                "column, or use training_step=fn(model, batch)")
            out = model(*batch[:-1])
            assert self.loss_fn is not None
            loss = self.loss_fn(out, batch[-1])
        if not hasattr(loss, "backward") or loss.dim() != 0:
            raise UserError("the loss must be a scalar tensor; got "
                            f"{type(loss).__name__} {tuple(getattr(loss, 'shape', ()))}")
        return loss

    def _apply_step(self) -> None:
        """Finish the window: unscale, normalise, clip, step the optimizer and scheduler."""
        import torch

        opt = self.optimizer
        if self.scaler is not None:
            self.scaler.unscale_(opt)
        if self.accumulate > 1 and self.window_samples:
            grads = [p.grad for g in opt.param_groups for p in g["params"] if p.grad is not None]
            if grads:
                torch._foreach_mul_(grads, 1.0 / self.window_samples)
        if self.clip_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(self.module.parameters(), self.clip_grad_norm)
        if self.clip_grad_value is not None:
            torch.nn.utils.clip_grad_value_(self.module.parameters(), self.clip_grad_value)
        if self.scaler is not None:
            self.scaler.step(opt)
            self.scaler.update()
        else:
            opt.step()
        opt.zero_grad(set_to_none=True)
        if self.scheduler is not None:
            self.scheduler.step()
        self.window = self.window_samples = 0
        self.global_step += 1
        self._interval_steps += 1

    def _after_step(self) -> str | None:
        """The periodic work after an optimizer step; the reason to stop, or None."""
        for cb in self.callbacks:
            cb.on_step_end(self)
        step = self.global_step
        reason: str | None = None
        if step % self.log_every == 0:
            reason = self._log_interval()
        if reason is None and isinstance(self.val_every, int) and step % self.val_every == 0 \
                and self.val_loader is not None:
            reason = self._validate_and_check()
        if reason is None and self.checkpoints is not None and step % self.checkpoint_every == 0:
            reason = self._check_losses()
            if reason is None:
                self.save_checkpoint()
        if reason is None and self.max_steps is not None and step >= self.max_steps:
            reason = "max_steps"
        if self._signalled():
            self._preempt()
        return reason

    def _signalled(self) -> bool:
        if self.world_size == 1:
            return self._stop_signal is not None
        import torch
        import torch.distributed as dist

        flag = torch.tensor([1 if self._stop_signal is not None else 0], device=self.device
                            if self.device.type == "cuda" else "cpu")
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())

    def _check_losses(self) -> str | None:
        """Reduce the pending losses; 'nonfinite' when one is NaN or infinite."""
        if not self._pending_losses:
            return None
        import torch

        values = torch.stack([t.float() for t in self._pending_losses]).cpu()
        self._pending_losses.clear()
        finite = torch.isfinite(values)
        mean = float(values.mean())
        self._loss_values.append(mean)
        self._last_loss = mean
        if self.stop_on_nonfinite and not bool(finite.all()):
            self._say(f"training loss became {mean} near optimizer step {self.global_step}: "
                      "stopping without writing a checkpoint (lower the learning rate, clip "
                      "gradients, or use bf16-mixed instead of 16-mixed)", logging.ERROR)
            return "nonfinite"
        return None

    def _log_interval(self) -> str | None:
        reason = self._check_losses()
        if reason is not None or self._quiet:
            return reason
        now = time.perf_counter()
        elapsed = now - self._interval_start
        values: dict[str, float] = {"train/loss": self._last_loss,
                                    "train/lr": float(self.optimizer.param_groups[0]["lr"])}
        if self.profile and elapsed > 0:
            busy = self._interval_data + self._interval_compute
            steps = max(self._interval_steps, 1)
            values.update({
                "train/samples_per_s": self._interval_samples / elapsed,
                "train/step_ms": 1000 * elapsed / steps,
                "train/data_wait_frac": self._interval_data / busy if busy else 0.0,
            })
            if self._energy is not None:
                joules = self._energy.read()
                values["train/energy_j_per_step"] = (joules - self._energy_mark) / steps
                self._energy_mark = joules
            values["train/peak_mem_mb"] = self._peak_memory_mb()
        self._t_data += self._interval_data
        self._t_compute += self._interval_compute
        self._interval_start = now
        self._interval_samples = self._interval_steps = 0
        self._interval_data = self._interval_compute = 0.0
        self._log_metrics(values)
        return None

    def _log_metrics(self, values: dict[str, float]) -> None:
        if self.rank != 0 or self._quiet:
            return
        from reprise.tracking._api import active_run

        run = active_run()
        if run is not None:
            run.log_metrics(values, step=self.global_step)

    def _peak_memory_mb(self) -> float:
        import torch

        if self.device.type == "cuda":
            return float(torch.cuda.max_memory_allocated(self.device)) / 2**20
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return float(peak) / (2**20 if sys.platform == "darwin" else 2**10)

    # -- validation ------------------------------------------------------------------------

    def _validate_and_check(self) -> str | None:
        metrics = self.validate()
        self._report_to_trial(metrics)
        if self.early_stopping is not None:
            why = self.early_stopping.update(metrics)
            if why is not None:
                self._say(f"early stopping at step {self.global_step}: {why}")
                return "early_stopping"
        return None

    def _report_to_trial(self, metrics: Mapping[str, float]) -> None:
        """Inside a tuning trial, report the validation metrics; stop when it is pruned.

        Rank 0 reports and the decision is shared, so every rank stops together.
        """
        from reprise.core._report import current_reporter

        reporter = current_reporter()
        if reporter is None:
            return
        prune = False
        if self.rank == 0:  # step = the validation's number: warm-ups count validations
            reporter.report(metrics, len(self.validations))
            prune = reporter.should_prune()
        if self.world_size > 1:
            import torch
            import torch.distributed as dist

            flag = torch.tensor([int(prune)], device=self.device if self.device.type == "cuda"
                                else "cpu")
            dist.broadcast(flag, src=0)
            prune = bool(flag.item())
        if prune:
            from reprise.core.errors import TrialPruned

            self._say(f"tuning trial pruned after validation {len(self.validations)} "
                      f"(optimizer step {self.global_step}; {dict(metrics)})")
            raise TrialPruned(f"trial pruned after validation {len(self.validations)} "
                              f"(optimizer step {self.global_step})")

    def validate(self, data: Any = None) -> dict[str, float]:
        """One pass over the validation data; metrics averaged by batch size.

        Runs without gradients, in eval mode, and leaves every random generator
        as it found it, so validating does not change the training that follows.
        """
        import torch

        from reprise.train._checkpoint import capture_rng, restore_rng

        if not self._ready:  # a baseline before any training
            self._setup()
        loader = self._loader(data, train=False) if data is not None else \
            getattr(self, "val_loader", None)
        if loader is None:
            raise UserError("no validation data: pass val_data to fit() or data to validate()")
        rng = capture_rng()
        was_training = self.module.training
        self.module.eval()
        sums: dict[str, float] = {}
        total = 0
        try:
            with torch.no_grad():
                for index, batch in enumerate(loader):
                    if self.device.type != "cpu":
                        batch = _to_device(batch, self.device, True)
                    n = _len_of(batch)
                    with self._autocast():
                        values = self._validation_values(batch)
                    for k, v in values.items():
                        sums[k] = sums.get(k, 0.0) + float(v) * n
                    total += n
                    for cb in self.callbacks:
                        cb.on_validation_batch_end(self, index)
        finally:
            self.module.train(was_training)
            restore_rng(rng)
        metrics = {k: v / max(total, 1) for k, v in sums.items()}
        if data is None:
            self.validations.append({"step": self.global_step, **metrics})
            self._log_metrics({f"val/{k.removeprefix('val_')}": v for k, v in metrics.items()})
        for cb in self.callbacks:
            cb.on_validation_end(self, metrics)
        return metrics

    def _validation_values(self, batch: Any) -> Mapping[str, Any]:
        if self.validation_step is not None:
            return self.validation_step(self.module, batch)
        if self.training_step is not None and not self.metrics:
            out = self.training_step(self.module, batch)
            return {"val_loss": out["loss"] if isinstance(out, Mapping) else out}
        if not isinstance(batch, list | tuple) or len(batch) < 2:
            raise UserError("validation batches must be (inputs, target) tuples with loss=; "
                            "or give validation_step=fn(model, batch) -> {name: value}")
        out = self.module(*batch[:-1])
        values: dict[str, Any] = {}
        if self.loss_fn is not None:
            values["val_loss"] = self.loss_fn(out, batch[-1])
        for name, fn in self.metrics.items():
            values[name] = fn(out, batch[-1])
        return values

    # -- checkpoints -----------------------------------------------------------------------

    def state(self, *, grads: bool | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        """``(tensors, json_state)``: everything a checkpoint holds, no copies made."""
        from reprise.train._checkpoint import capture_rng, flatten

        if grads is None:
            grads = self.window > 0
        sampler = self._seeded_sampler(self.train_loader) if hasattr(self, "train_loader") \
            else None
        nested = {
            "model": self.module.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None,
            "scaler": self.scaler.state_dict() if self.scaler is not None else None,
            "rng": capture_rng(),
            "data_rng": self._data_rng_state(),
            "grads": ({n: p.grad for n, p in self.module.named_parameters()
                       if p.grad is not None} if grads else None),
        }
        tensors: dict[str, Any] = {}
        doc = flatten(nested, tensors, "")
        doc["counters"] = {
            "global_step": self.global_step, "epoch": self.epoch,
            "batch_in_epoch": self.batch_in_epoch, "window": self.window,
            "window_samples": self.window_samples, "samples_seen": self.samples_seen}
        doc["early_stopping"] = (self.early_stopping.state_dict()
                                 if self.early_stopping is not None else None)
        doc["sampler"] = sampler.state_dict() if sampler is not None else None
        doc["validations"] = self.validations
        doc["config"] = {"batch_size": self._train_batch_size(), "accumulate": self.accumulate,
                         "world_size": self.world_size, "precision": self.precision}
        return tensors, doc

    def _data_rng_state(self) -> list[Any] | None:
        """The loader generators' states at the start of the current epoch (their
        current states when it has not started yet)."""
        loader = getattr(self, "train_loader", None)
        if self._epoch_rng is not None and self._epoch_rng[0] == self.epoch:
            return list(self._epoch_rng[1])
        if loader is None:
            return None
        return [g.get_state() for g in self._data_generators(loader)]

    def _train_batch_size(self) -> int | None:
        loader = getattr(self, "train_loader", None)
        if loader is None:
            return None
        bs = getattr(loader.batch_sampler, "batch_size", None) or loader.batch_size
        return int(bs) if bs is not None else None

    def load_state(self, tensors: Mapping[str, Any], doc: Mapping[str, Any]) -> None:
        """Put back a :meth:`state` (from a checkpoint or an in-memory snapshot)."""
        from reprise.train._checkpoint import restore_rng, unflatten

        nested = unflatten({k: doc.get(k) for k in ("model", "optimizer", "scheduler", "scaler",
                                                     "rng", "grads", "data_rng")}, tensors)
        self.module.load_state_dict(nested["model"])
        self.optimizer.load_state_dict(nested["optimizer"])
        if self.scheduler is not None and nested["scheduler"] is not None:
            self.scheduler.load_state_dict(nested["scheduler"])
        if self.scaler is not None and nested["scaler"] is not None:
            self.scaler.load_state_dict(nested["scaler"])
        grads = nested["grads"] or {}
        for name, p in self.module.named_parameters():
            g = grads.get(name)
            p.grad = g.to(device=p.device, dtype=p.dtype).clone() if g is not None else None
        restore_rng(nested["rng"])
        c = doc["counters"]
        self._epoch_rng = ((int(c["epoch"]), list(nested["data_rng"]))
                           if nested["data_rng"] is not None else None)
        self.global_step, self.epoch = int(c["global_step"]), int(c["epoch"])
        self.batch_in_epoch, self.window = int(c["batch_in_epoch"]), int(c["window"])
        self.window_samples, self.samples_seen = int(c["window_samples"]), int(c["samples_seen"])
        if self.early_stopping is not None and doc.get("early_stopping") is not None:
            self.early_stopping.load_state_dict(doc["early_stopping"])
        self.validations = [dict(v) for v in doc.get("validations") or []]

    def save_checkpoint(self) -> Path | None:
        """Write a checkpoint now (rank 0 only; other ranks return None)."""
        if self.checkpoints is None:
            raise UserError("no checkpoint_dir: set Trainer(checkpoint_dir=...) to checkpoint")
        if self.rank != 0 or self._quiet:
            return None
        tensors, doc = self.state()
        path: Path = self.checkpoints.save(self.global_step, tensors, doc)
        for cb in self.callbacks:
            cb.on_checkpoint(self, path)
        return path

    def _maybe_resume(self) -> Path | None:
        if self.resume is None:
            return None
        from reprise.train._checkpoint import CheckpointManager

        mgr = self.checkpoints or CheckpointManager(Path(str(self.resume)).parent)
        if str(self.resume) == "auto":
            path = mgr.latest()
            if path is None:
                self._say(f"resume='auto': no checkpoint in {self.checkpoint_dir}; starting "
                          "fresh")
                return None
        else:
            path = Path(self.resume)
        tensors, doc = mgr.load(path)
        self._resumed = True
        self._pending_config = doc["config"]
        self.load_state(tensors, doc)
        self._say(f"resumed from {path} (optimizer step {self.global_step}, epoch "
                  f"{self.epoch}, batch {self.batch_in_epoch})")
        return path

    def _check_resumed_config(self) -> None:
        cfg = getattr(self, "_pending_config", None)
        if not cfg:
            return
        now = {"batch_size": self._train_batch_size(), "accumulate": self.accumulate,
               "world_size": self.world_size}
        diff = [f"{k} {cfg.get(k)} → {v}" for k, v in now.items()
                if cfg.get(k) is not None and v is not None and cfg.get(k) != v]
        if diff:
            raise UserError("the checkpoint was written with a different set-up (" +
                            ", ".join(diff) + "); resuming would not continue the same run. "
                            "Use the original settings, or start fresh with resume=None")

    # -- SIGTERM ---------------------------------------------------------------------------

    def _install_sigterm(self) -> Any:
        if threading.current_thread() is not threading.main_thread():
            return None

        def handler(signum: int, frame: Any) -> None:
            self._stop_signal = signum

        return signal.signal(signal.SIGTERM, handler)

    def _preempt(self) -> None:
        path = None
        if self.checkpoints is not None and self._check_losses() is None:
            path = self.save_checkpoint()
        where = f"checkpoint {path}" if path else "no checkpoint_dir, nothing saved"
        self._say(f"SIGTERM: stopped at optimizer step {self.global_step} (epoch {self.epoch}, "
                  f"batch {self.batch_in_epoch}); {where}", logging.WARNING)
        raise Preempted(f"training stopped by SIGTERM at step {self.global_step}; {where}",
                        path)

    # -- determinism -----------------------------------------------------------------------

    def _determinism_on(self) -> Callable[[], None]:
        if not self.deterministic:
            return lambda: None
        import torch

        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        before = (torch.are_deterministic_algorithms_enabled(),
                  torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark)
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False

        def restore() -> None:
            torch.use_deterministic_algorithms(before[0])
            torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = before[1:]

        return restore

    def _check_determinism_for_verify(self) -> None:
        """Under ``reprise verify``, train the first steps twice and record where they
        diverge (see :func:`reprise.train.check_determinism`)."""
        target = os.environ.get("REPRISE_CHECK_DETERMINISM")
        if not target or self.rank != 0 or self.global_step:
            return
        from reprise.train._determinism import check_trainer, record_report

        steps = int(os.environ.get("REPRISE_CHECK_DETERMINISM_STEPS", "4"))
        record_report(target, check_trainer(self, steps))

    # -- summary ---------------------------------------------------------------------------

    def _summary(self, wall: float, stopped: str) -> dict[str, Any]:
        self._t_data += self._interval_data
        self._t_compute += self._interval_compute
        self._check_losses()
        busy = self._t_data + self._t_compute
        steps = max(self.global_step, 1)
        out: dict[str, Any] = {
            "stopped": stopped, "optimizer_steps": self.global_step, "epochs": self.epoch,
            "samples": self.samples_seen, "seconds": wall,
            "device": str(self.device), "precision": self.precision,
            "batch_size": self._train_batch_size(), "accumulate": self.accumulate,
            "world_size": self.world_size,
            "final_loss": self._loss_values[-1] if self._loss_values else None,
        }
        if self.profile:
            out.update({
                "samples_per_s": self.samples_seen / wall if wall > 0 else None,
                "data_wait_fraction": self._t_data / busy if busy else 0.0,
                "data_wait_seconds": self._t_data, "compute_seconds": self._t_compute,
                "peak_mem_mb": self._peak_memory_mb(),
            })
            if self._energy is not None:
                joules = self._energy.read()
                out.update({"energy_j": joules, "energy_j_per_step": joules / steps,
                            "energy_source": self._energy.source})
        if self.checkpoints is not None:
            out.update({"checkpoints": self.checkpoints.count,
                        "checkpoint_seconds": self.checkpoints.seconds,
                        "checkpoint_fraction": self.checkpoints.seconds / wall if wall else 0.0})
        out["input_bound"] = input_bound_advice(out) is not None
        return out

    def _report(self, summary: dict[str, Any]) -> None:
        numbers = {f"train/summary/{k}": float(v) for k, v in summary.items()
                   if isinstance(v, int | float) and not isinstance(v, bool) and v is not None}
        self._log_metrics(numbers)
        parts = [f"{summary['optimizer_steps']} steps", f"{summary['samples']} samples",
                 f"{summary['seconds']:.2f} s ({summary['stopped']})"]
        if self.profile and summary.get("samples_per_s"):
            parts.append(f"{summary['samples_per_s']:,.0f} samples/s")
            parts.append(f"data wait {100 * summary['data_wait_fraction']:.1f}%")
            if "energy_j_per_step" in summary:
                label = "" if summary["energy_source"] != "estimate" else " (estimate)"
                parts.append(f"{summary['energy_j_per_step']:.3g} J/step{label}")
            parts.append(f"peak memory {summary['peak_mem_mb']:.0f} MB")
        if "checkpoint_seconds" in summary:
            parts.append(f"checkpoints {summary['checkpoints']} "
                         f"({100 * summary['checkpoint_fraction']:.1f}% of the time)")
        self._say("trained: " + ", ".join(parts))
        advice = input_bound_advice(summary)
        if advice is not None:
            self._say(advice, logging.WARNING)
