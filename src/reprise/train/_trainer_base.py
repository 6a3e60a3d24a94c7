"""What the parts of the :class:`~reprise.train.Trainer` share: its constants, the
logger, small batch helpers and the base class whose attributes the mixins use.

The Trainer is one class assembled from mixins (set-up, data, checkpoints, reporting),
each in its own module; ``_TrainerBase`` declares the state they share, all of which
``Trainer.__init__`` sets.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from reprise.train._callbacks import Callback, EarlyStopping

log = logging.getLogger("reprise.train")
PRECISIONS = ("32", "bf16-mixed", "16-mixed")
DEFAULT_CHECKPOINT_EVERY = 1000


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


class _TrainerBase:
    """The state every part of the Trainer reads or writes; ``Trainer.__init__`` sets it all."""

    # configuration: the constructor's arguments, checked
    module: Any
    loss_fn: Callable[..., Any] | None
    training_step: Callable[[Any, Any], Any] | None
    validation_step: Callable[[Any, Any], Mapping[str, Any]] | None
    metrics: dict[str, Callable[[Any, Any], Any]]
    _optimizer_arg: Any
    _scheduler_arg: Any
    max_epochs: int | None
    max_steps: int | None
    precision: str
    accumulate: int
    early_stopping: EarlyStopping | None
    device_arg: Any
    compile: bool
    deterministic: bool
    seed: int | None
    checkpoint_dir: Path | None
    keep_last: int
    resume: str | os.PathLike[str] | None
    batch_size: int | Literal["auto"]
    target_batch_size: int | None
    memory_budget: int | None
    label: str | None
    columns: Sequence[str] | None
    num_workers: int
    drop_last: bool
    profile: bool
    callbacks: list[Callback]
    # progress: what a checkpoint restores
    global_step: int
    epoch: int
    samples_seen: int
    validations: list[dict[str, float]]
    _resumed: bool
    _loss_values: list[float]
    # built by set-up and fit
    optimizer: Any
    _outside_params: list[Any]  # the model's parameters the optimizer does not step
    scheduler: Any
    scaler: Any
    device: Any
    checkpoints: Any
    rank: int
    world_size: int
    _quiet: bool
    _ready: bool
    _autocast: Callable[[], Any]
    _energy: Any
    _last_loss: float
    _t_data: float
    _t_compute: float
    _interval_start: float
    _interval_samples: int
    _interval_data: float
    _interval_compute: float
    _interval_steps: int
    _energy_mark: float
    _stop_signal: int | None
    _epoch_rng: tuple[int, list[Any]] | None  # (epoch, generator states)
    # faults: cross-rank agreement, the SIGTERM watchdog, non-finite guards
    ddp_timeout: float
    _agreed_signal: bool
    _watchdog: Any
    _beats: int
    _writing_checkpoint: bool
    _boundary_at: float
    _data_record_cache: tuple[Any, dict[str, Any]] | None  # (dataset, its record)
    resume_allow_data_change: bool

    if TYPE_CHECKING:  # implemented by the Trainer and its other mixins
        def _check_losses(self) -> str | None: ...
        def _data_generators(self, loader: Any) -> list[Any]: ...
        def _seeded_sampler(self, loader: Any) -> Any: ...
        def _train_batch_size(self) -> int | None: ...
        def _data_record(self) -> dict[str, Any]: ...
        def _setup(self) -> None: ...
        def _loader(self, data: Any, *, train: bool) -> Any: ...
        def _log_metrics(self, values: dict[str, float]) -> None: ...
        def _report_to_trial(self, metrics: Mapping[str, float]) -> None: ...
        def _check_weights(self) -> str | None: ...
        def _refuse_nonfinite_weights(self) -> None: ...
        def _newest_finite_checkpoint(self, mgr: Any) -> tuple[Path, Any, Any] | None: ...
        def _refuse_nonfinite_checkpoint(self, path: Path, tensors: Mapping[str, Any]
                                         ) -> None: ...
        def _reduce_validation(self, sums: Mapping[str, float], total: int
                               ) -> tuple[dict[str, float], int]: ...
        def _global_throughput(self, samples: int, wall: float) -> tuple[int, float]: ...
        def _agree_min(self, value: int) -> int: ...
        def _ranks_flagged(self, flag: bool) -> list[int]: ...
        def _distributed(self) -> bool: ...
        def _collective_device(self) -> Any: ...

    def _say(self, message: str, level: int = logging.INFO) -> None:
        if self.rank != 0 or self._quiet:
            return
        if not log.handlers and not logging.getLogger().handlers:
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(logging.Formatter("reprise.train: %(message)s"))
            log.addHandler(handler)
            log.setLevel(logging.INFO)
        log.log(level, message)
