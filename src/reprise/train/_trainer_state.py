"""A Trainer's complete state: what a checkpoint holds (weights, optimizer, scaler,
scheduler, counters, every random generator), writing it, resuming from it, and the
SIGTERM handler that checkpoints before a pre-empted process exits.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from reprise.core.errors import UserError
from reprise.train._callbacks import Preempted
from reprise.train._trainer_base import (
    _TrainerBase,
)

if TYPE_CHECKING:
    from reprise.train._trainer import Trainer

# set to "1" by ``reprise train --resume-allow-data-change`` for the script it launches
ALLOW_DATA_CHANGE_ENV = "REPRISE_RESUME_ALLOW_DATA_CHANGE"


class _CheckpointMixin(_TrainerBase):
    """Checkpoint state, save, resume and pre-emption for :class:`Trainer`."""

    def _signalled(self) -> bool:
        """Was SIGTERM received (by any rank)? Called at every step boundary."""
        self._boundary_at = time.monotonic()  # the SIGTERM watchdog's measure of a step
        if self.world_size == 1:
            return self._stop_signal is not None
        return self._agreed_signal  # by every rank, before this step (_agree_before_step)

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
                         "world_size": self.world_size, "precision": self.precision,
                         "drop_last": self.drop_last}
        doc["data"] = self._data_record()
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
        self._refuse_nonfinite_weights()
        self._writing_checkpoint = True  # the SIGTERM watchdog waits for it
        try:
            tensors, doc = self.state()
            path: Path = self.checkpoints.save(self.global_step, tensors, doc)
        finally:
            self._writing_checkpoint = False
        for cb in self.callbacks:
            cb.on_checkpoint(cast("Trainer", self), path)
        return path

    def _maybe_resume(self) -> Path | None:
        if self.resume is None:
            return None
        found = self._agreed_checkpoint() if self._distributed() else self._find_checkpoint()
        if found is None:
            return None
        path, tensors, doc = found
        self._resumed = True
        self._pending_config = doc["config"]
        self._pending_data = doc.get("data")  # absent from checkpoints of older versions
        self.load_state(tensors, doc)
        self._say(f"resumed from {path} (optimizer step {self.global_step}, epoch "
                  f"{self.epoch}, batch {self.batch_in_epoch})")
        return path

    def _find_checkpoint(self) -> tuple[Path, Any, Any] | None:
        """The checkpoint ``resume`` names, read: ``(path, tensors, state)``; None for
        ``resume="auto"`` with no usable checkpoint."""
        from reprise.train._checkpoint import CheckpointManager

        mgr = self.checkpoints or CheckpointManager(Path(str(self.resume)).parent)
        if str(self.resume) == "auto":
            found = self._newest_finite_checkpoint(mgr)
            if found is None:
                self._say(f"resume='auto': no usable checkpoint in {self.checkpoint_dir}; "
                          "starting fresh")
            return found
        path = Path(self.resume)  # type: ignore[arg-type]
        tensors, doc = mgr.load(path)
        self._refuse_nonfinite_checkpoint(path, tensors)
        return path, tensors, doc

    def _agreed_checkpoint(self) -> tuple[Path, Any, Any] | None:
        """Under DDP: global rank 0 alone picks and reads the checkpoint, and sends it to
        every rank (``broadcast_object_list``), so all ranks resume from the same one.

        The other ranks never read ``checkpoint_dir``: on several nodes it need not be
        visible from theirs (it must be from any node that may get rank 0), and no rank
        can see an older listing of a shared folder than rank 0 did and part ways. A
        failure to read it on rank 0 reaches every rank as an error, not a hang.
        """
        import torch.distributed as dist

        box: list[Any] = [None]
        error: BaseException | None = None
        if self.rank == 0:
            try:
                found = self._find_checkpoint()
                box[0] = ("ok", None if found is None else (str(found[0]), *found[1:]))
            except Exception as exc:  # every rank must leave the broadcast below
                error = exc
                box[0] = ("error", str(exc) if isinstance(exc, UserError)
                          else f"{type(exc).__name__}: {exc}")
        dev = self._collective_device()
        dist.broadcast_object_list(box, src=0, device=dev if dev != "cpu" else None)
        if error is not None:
            raise error
        kind, value = box[0]
        if kind == "error":
            raise UserError(f"rank 0 could not read the checkpoint to resume from: {value}")
        if value is None:
            return None
        path, tensors, doc = value
        return Path(path), tensors, doc

    def _check_resumed_config(self) -> None:
        cfg = getattr(self, "_pending_config", None)
        if not cfg:
            return
        now = {"batch_size": self._train_batch_size(), "accumulate": self.accumulate,
               "world_size": self.world_size, "drop_last": self.drop_last}
        diff = [f"{k} {cfg.get(k)} → {v}" for k, v in now.items()
                if cfg.get(k) is not None and v is not None and cfg.get(k) != v]
        if diff:
            raise UserError("the checkpoint was written with a different set-up (" +
                            ", ".join(diff) + "); resuming would not continue the same run. "
                            "Use the original settings, or start fresh with resume=None")
        self._check_resumed_data()

    def _check_resumed_data(self) -> None:
        """Refuse to resume on other training data than the checkpoint's, unless asked."""
        was = getattr(self, "_pending_data", None)
        if not was:
            return
        now = self._data_record()
        changes = []
        if None not in (was.get("samples"), now["samples"]) and was["samples"] != now["samples"]:
            changes.append(f"{was['samples']} → {now['samples']} samples")
        if None not in (was.get("fingerprint"), now["fingerprint"]) \
                and was["fingerprint"] != now["fingerprint"]:
            changes.append(f"content fingerprint {str(was['fingerprint'])[:12]} → "
                           f"{str(now['fingerprint'])[:12]}")
        if not changes:
            return
        what = ", ".join(changes)
        if self.resume_allow_data_change or os.environ.get(ALLOW_DATA_CHANGE_ENV) == "1":
            self._say(f"the training data changed since the checkpoint ({what}); resuming "
                      "anyway, as resume_allow_data_change allows: the epoch's order and "
                      "position are those of the new data", logging.WARNING)
            return
        raise UserError(f"the training data changed since the checkpoint was written ({what}); "
                        "resuming would continue the run on other data. Train on the "
                        "checkpoint's data, start fresh with resume=None, or pass "
                        "resume_allow_data_change=True (reprise train "
                        "--resume-allow-data-change) to continue on this data anyway")

    def _install_sigterm(self) -> Any:
        """Checkpoint at the next step on SIGTERM; a watchdog ends the process when the
        training thread cannot get there (see :mod:`reprise.train._watchdog`)."""
        if threading.current_thread() is not threading.main_thread():
            return None
        from reprise.train._watchdog import SigtermWatchdog

        def handler(signum: int, frame: Any) -> None:
            self._stop_signal = signum

        old = signal.signal(signal.SIGTERM, handler)
        self._watchdog = SigtermWatchdog(
            lambda: (self.samples_seen, self.global_step, self._beats),
            busy=lambda: self._writing_checkpoint,
            pace=lambda: (self.global_step, self._boundary_at),
            label=f" (rank {self.rank})" if self.world_size > 1 else "")
        self._watchdog.start()
        return old

    def _stop_watchdog(self) -> None:
        if self._watchdog is not None:
            self._watchdog.stop()
            self._watchdog = None

    def _preempt(self) -> None:
        path = None
        self._beats += 1  # the graceful stop is under way
        if self.checkpoints is not None and \
                (self._check_losses() or self._check_weights()) is None:
            path = self.save_checkpoint()
        where = f"checkpoint {path}" if path else "no checkpoint_dir, nothing saved"
        self._say(f"SIGTERM: stopped at optimizer step {self.global_step} (epoch {self.epoch}, "
                  f"batch {self.batch_in_epoch}); {where}", logging.WARNING)
        raise Preempted(f"training stopped by SIGTERM at step {self.global_step}; {where}",
                        path)
