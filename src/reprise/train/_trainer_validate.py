"""Validation for a Trainer: the model in eval mode over the validation data, values
averaged by batch size, train mode restored; results recorded, reported to a tuning
trial and fed to early stopping.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from reprise.core.errors import UserError
from reprise.train._trainer_base import (
    _len_of,
    _to_device,
    _TrainerBase,
)

if TYPE_CHECKING:
    from reprise.train._trainer import Trainer


class _ValidationMixin(_TrainerBase):
    """Validation of :class:`Trainer` (``validate`` and the periodic checks in ``fit``)."""

    def _validate_and_check(self) -> str | None:
        metrics = self.validate()
        self._report_to_trial(metrics)
        if self.early_stopping is not None:
            why = self.early_stopping.update(metrics)
            if why is not None:
                self._say(f"early stopping at step {self.global_step}: {why}")
                return "early_stopping"
        return None

    def validate(self, data: Any = None) -> dict[str, float]:
        """One pass over the validation data; metrics averaged by batch size.

        Runs without gradients, in eval mode, and leaves every random generator
        as it found it, so validating does not change the training that follows.
        Under DDP the sample-weighted sums are added over the ranks, so every
        rank gets the same metrics (and early stopping the same decision): call
        it on every rank, each with its own shard or all with the same data.
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
                    self._beats += 1
                    for cb in self.callbacks:
                        cb.on_validation_batch_end(cast("Trainer", self), index)
        finally:
            self.module.train(was_training)
            restore_rng(rng)
        sums, total = self._reduce_validation(sums, total)  # over the ranks, under DDP
        metrics = {k: v / max(total, 1) for k, v in sums.items()}
        if data is None:
            self.validations.append({"step": self.global_step, **metrics})
            self._log_metrics({f"val/{k.removeprefix('val_')}": v for k, v in metrics.items()})
        for cb in self.callbacks:
            cb.on_validation_end(cast("Trainer", self), metrics)
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
