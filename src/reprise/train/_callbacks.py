"""What a training run reports and how it can be steered: callbacks, early stopping,
the result of ``fit`` and the exception raised after a pre-emption (SIGTERM).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from reprise.core.errors import UserError

if TYPE_CHECKING:
    from reprise.train._trainer import Trainer


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
