"""Setting a Trainer up: device, process group, optimizer and scheduler, precision,
checkpoint manager, the wrapped model; and the determinism switches.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import Any

from reprise.core.errors import UserError
from reprise.train._trainer_base import (
    _TrainerBase,
)


class _SetupMixin(_TrainerBase):
    """Device, process group, optimizer, precision and determinism for :class:`Trainer`."""

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
        stepped = {id(p) for g in self.optimizer.param_groups for p in g["params"]}
        if not stepped <= owned:
            raise UserError("the optimizer holds parameters that are not the model's; build it "
                            "from model.parameters() (or pass a callable params -> optimizer)")
        # the model's parameters the optimizer does not step: their gradients are cleared
        # with the optimizer's after every step, never normalised, clipped or applied
        self._outside_params = [p for p in self.module.parameters() if id(p) not in stepped]
        trained_outside = sum(1 for p in self._outside_params if p.requires_grad)
        if trained_outside:
            self._say(f"{trained_outside} parameter tensor(s) of the model require grad but are "
                      "not in the optimizer: their gradients are computed and discarded at "
                      "every step (freeze them with requires_grad_(False) to save the work)")
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
            from datetime import timedelta

            if self.device.type == "cuda":  # NCCL's object collectives use the current device
                import torch

                torch.cuda.set_device(self.device)

            # a collective waits this long for a peer, then fails (gloo's default is 30 min)
            dist.init_process_group("nccl" if self.device.type == "cuda" else "gloo",
                                    timeout=timedelta(seconds=self.ddp_timeout))
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
