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
import os
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from reprise.core.errors import UserError
from reprise.train._callbacks import Callback, EarlyStopping, Preempted, TrainResult
from reprise.train._nonfinite import _NonFiniteMixin
from reprise.train._trainer_base import (
    DEFAULT_CHECKPOINT_EVERY,
    PRECISIONS,
    _len_of,
    _to_device,
)
from reprise.train._trainer_data import _DataMixin
from reprise.train._trainer_ranks import _RanksMixin
from reprise.train._trainer_report import _ReportMixin
from reprise.train._trainer_setup import _SetupMixin
from reprise.train._trainer_state import _CheckpointMixin
from reprise.train._trainer_validate import _ValidationMixin

__all__ = ["Callback", "EarlyStopping", "Preempted", "TrainResult", "Trainer"]


class Trainer(_SetupMixin, _DataMixin, _CheckpointMixin, _ValidationMixin, _ReportMixin,
              _RanksMixin, _NonFiniteMixin):
    """Train a ``torch.nn.Module``; resumable bit-for-bit, profiled, tracked.

    Args:
        model: the module to train (moved to the chosen device).
        optimizer: a ``torch.optim.Optimizer`` over the model's parameters (all or
            some), or a callable ``params -> Optimizer`` (called after the move to the
            device). Gradients of parameters outside it are cleared at every step with
            the optimizer's own and never normalised, clipped or applied.
        loss: ``loss(output, target)`` for batches ``(inputs, target)``; or give
            ``training_step(model, batch) -> loss tensor`` for any batch format.
        validation_step: ``(model, batch) -> {name: value}`` (averaged over the
            validation set, weighted by batch size); default ``{"val_loss": loss}``.
        metrics: extra validation metrics ``{name: fn(output, target)}``.
        max_epochs, max_steps: stop at whichever comes first (steps count
            optimizer steps); ``max_epochs`` defaults to 1 when neither is given.
        precision: ``"32"``, ``"bf16-mixed"`` (``torch.autocast`` in bfloat16)
            or ``"16-mixed"`` (float16 with a ``GradScaler``). The forward pass, the
            loss and validation run under autocast: matrix products and convolutions
            in 16 bits, and the ops after them that autocast leaves alone; losses
            (and on CUDA softmax, norms and reductions) in float32; parameters,
            gradients and the optimizer in float32 (README, "Precision").
        accumulate: micro-batches per optimizer step. Each micro-batch's mean
            loss is weighted by its size and the window's gradient divided by
            the window's sample count, so a short last window (or a short last
            batch) is normalised exactly.
        clip_grad_norm, clip_grad_value: gradient clipping (after unscaling and
            normalising), over the optimizer's parameters: the norm is theirs alone.
        scheduler: an LR scheduler, or ``optimizer -> scheduler``; stepped
            after every optimizer step.
        val_every: validate every N optimizer steps, or ``"epoch"`` (default
            when validation data is given).
        early_stopping: an :class:`EarlyStopping`.
        stop_on_nonfinite: stop (and write no checkpoint) when the training
            loss becomes NaN or infinite. Under DDP the ranks agree on it before
            every optimizer step, so a NaN on one rank stops them all before it
            reaches the (all-reduced) weights. Whatever this says, a checkpoint is
            never written of weights holding NaN or ±inf: training stops with
            ``"nonfinite"`` instead.
        ddp_timeout: seconds a collective may wait for the other ranks before it
            fails (``init_process_group(timeout=...)``, when the Trainer creates
            the group); default 600.
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
            ``checkpoint_dir`` whose weights are finite, or a fresh start when
            there is none) or a checkpoint folder. A checkpoint records the training
            data's sample count and, for reprise tables and streams and
            ``TensorDataset``, a BLAKE3 fingerprint of its content; resuming on data
            that differs is refused.
        resume_allow_data_change: resume even though the data changed (also set by
            ``reprise train --resume-allow-data-change``).
        batch_size: batch size when ``fit`` is given a table or dataset rather
            than a DataLoader; ``"auto"`` finds the largest that fits (see
            :func:`reprise.train.find_batch_size`).
        target_batch_size: with ``batch_size="auto"``, set ``accumulate`` so
            that batch × accumulate stays at this effective batch.
        label, columns, num_workers: how a table or dataset becomes a loader
            (:func:`reprise.make_loader`).
        drop_last: train only on whole batches. Under DDP every rank takes the same
            number of samples, so by default an epoch that does not divide evenly is
            padded with a few of its first samples, trained on twice (as
            ``DistributedSampler`` does); with ``drop_last`` no sample is repeated and
            the few that do not fill a whole batch on every rank are left out (other
            ones each epoch when shuffling). For a table or dataset; a DataLoader of
            your own sets this itself.
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
                 ddp_timeout: float = 600.0,
                 device: Any = "auto", compile: bool = False, deterministic: bool = False,
                 seed: int | None = None, checkpoint_dir: str | os.PathLike[str] | None = None,
                 checkpoint_every: int | None = None, keep_last: int = 3,
                 resume: str | os.PathLike[str] | None = None,
                 resume_allow_data_change: bool = False,
                 batch_size: int | Literal["auto"] = 32, target_batch_size: int | None = None,
                 memory_budget: int | None = None, label: str | None = None,
                 columns: Sequence[str] | None = None, num_workers: int = 0,
                 drop_last: bool = False,
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
        if isinstance(ddp_timeout, bool) or not isinstance(ddp_timeout, int | float) \
                or not ddp_timeout > 0:
            raise UserError(f"ddp_timeout must be a positive number of seconds; got "
                            f"{ddp_timeout!r}")
        if not isinstance(drop_last, bool):
            raise UserError(f"drop_last must be True or False; got {drop_last!r}")
        if not isinstance(resume_allow_data_change, bool):
            raise UserError("resume_allow_data_change must be True or False; got "
                            f"{resume_allow_data_change!r}")
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
        self.ddp_timeout = float(ddp_timeout)
        self.device_arg, self.compile, self.deterministic = device, compile, deterministic
        self.seed = 0 if (seed is None and deterministic) else seed
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir is not None else None
        self.checkpoint_every = checkpoint_every or DEFAULT_CHECKPOINT_EVERY
        self.keep_last, self.resume = keep_last, resume
        self.resume_allow_data_change = resume_allow_data_change
        self.batch_size, self.target_batch_size = batch_size, target_batch_size
        self.memory_budget = memory_budget
        self.label, self.columns, self.num_workers = label, columns, num_workers
        self.drop_last = drop_last
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
        self._outside_params: list[Any] = []
        self.scheduler: Any = None
        self.scaler: Any = None
        self.device: Any = None
        self.rank, self.world_size, self.local_rank = 0, 1, 0
        self.checkpoints: Any = None
        self._ready = False
        self._owns_group = False
        self._quiet = False
        self._stop_signal = None
        self._agreed_signal = False  # any rank signalled, agreed before the last step
        self._watchdog: Any = None
        self._beats = 0  # progress the SIGTERM watchdog watches, beyond the counters
        self._writing_checkpoint = False
        self._boundary_at = 0.0  # time.monotonic() of the last step boundary
        self._pending_losses: list[Any] = []
        self._epoch_rng = None
        self._data_record_cache = None
        self._resumed = False
        self._loss_values: list[float] = []

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
        if self.window == 0:  # no window in progress: no gradient from before fit() counts
            self.module.zero_grad(set_to_none=True)
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
                if self._check_weights() is not None:
                    stopped = "nonfinite"
                else:
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
            self._stop_watchdog()
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
                    reason = self._agree_before_step()
                    if reason is not None:
                        return reason
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
                reason = self._agree_before_step()
                if reason is not None:
                    return reason
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
        # normalising and clipping act on the optimizer's parameters, the ones stepped: a
        # parameter outside it that still requires grad (a body left unfrozen under a
        # head-only optimizer) has its gradient computed, never counted, and cleared below
        params = [p for g in opt.param_groups for p in g["params"]]
        if self.accumulate > 1 and self.window_samples:
            grads = [p.grad for p in params if p.grad is not None]
            if grads:
                torch._foreach_mul_(grads, 1.0 / self.window_samples)
        if self.clip_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(params, self.clip_grad_norm)
        if self.clip_grad_value is not None:
            torch.nn.utils.clip_grad_value_(params, self.clip_grad_value)
        if self.scaler is not None:
            self.scaler.step(opt)
            self.scaler.update()
        else:
            opt.step()
        # every gradient the model accumulated, not only the optimizer's: the next window
        # starts from zero everywhere (the others are listed once, at set-up, since
        # module.zero_grad walks the whole module tree: 4x opt.zero_grad's time per step)
        opt.zero_grad(set_to_none=True)
        for p in self._outside_params:
            p.grad = None
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
            reason = self._check_losses() or self._check_weights()
            if reason is None:
                self.save_checkpoint()
        if reason is None and self.max_steps is not None and step >= self.max_steps:
            reason = "max_steps"
        if self._signalled():
            self._preempt()
        return reason


    def _check_losses(self) -> str | None:
        """Reduce the pending losses; 'nonfinite' when one is NaN or infinite."""
        if not self._pending_losses:
            return None
        import torch

        values = torch.stack([t.float() for t in self._pending_losses]).cpu()
        self._pending_losses.clear()
        finite = bool(torch.isfinite(values).all())
        mean = float(values.mean())
        self._loss_values.append(mean)
        self._last_loss = mean
        if not self.stop_on_nonfinite:
            return None
        ranks = self._ranks_flagged(not finite)  # under DDP every rank gets the same answer
        if ranks:
            became = f"became {mean}" if not finite else "became non-finite"
            where = f" on rank {', '.join(map(str, ranks))}" if self.world_size > 1 else ""
            self._say(f"training loss {became}{where} near optimizer step {self.global_step}: "
                      "stopping without writing a checkpoint (lower the learning rate, clip "
                      "gradients, or use bf16-mixed instead of 16-mixed)", logging.ERROR)
            return "nonfinite"
        return None
