"""What the ranks of a DDP run agree on, so that they never part ways.

Every decision that ends a loop or changes the shape of the work is taken once
for all ranks, by a collective that every rank reaches at the same point: a
rank that stopped alone would leave the others blocked in their next
collective. Agreed here:

- before each optimizer step: whether any rank saw a non-finite loss in the
  window (the gradients are all-reduced, so one rank's NaN would reach every
  rank's weights) and whether any rank was sent SIGTERM; one all-reduce of two
  flags, the one the SIGTERM check already made per step;
- whether any rank's losses or weights are non-finite, before a checkpoint.

With one process every method is a no-op returning the local value.
"""

from __future__ import annotations

from typing import Any

from reprise.train._trainer_base import _TrainerBase


class _RanksMixin(_TrainerBase):
    """Cross-rank agreement for :class:`Trainer` (see the module docstring)."""

    _pending_losses: list[Any]
    window: int
    stop_on_nonfinite: bool

    def _distributed(self) -> bool:
        if self.world_size == 1:
            return False
        import torch.distributed as dist

        return bool(dist.is_available() and dist.is_initialized())

    def _collective_device(self) -> Any:
        return self.device if self.device.type == "cuda" else "cpu"

    def _ranks_flagged(self, flag: bool) -> list[int]:
        """The ranks whose ``flag`` is true (every rank gets the same list)."""
        if not self._distributed():
            return [self.rank] if flag else []
        import torch
        import torch.distributed as dist

        flags = torch.zeros(self.world_size, dtype=torch.int32, device=self._collective_device())
        flags[self.rank] = int(flag)
        dist.all_reduce(flags)
        return [r for r, f in enumerate(flags.tolist()) if f]

    def _agree_before_step(self) -> str | None:
        """Under DDP, before an optimizer step: 'nonfinite' when any rank's loss in this
        window was NaN or infinite (nothing is stepped); records whether any rank was
        signalled, for :meth:`_signalled` after the step."""
        if not self._distributed():
            return None
        import torch
        import torch.distributed as dist

        dev = self._collective_device()
        signalled = torch.tensor(int(self._stop_signal is not None), device=dev)
        bad = torch.zeros((), dtype=torch.int64, device=dev)
        window = self._pending_losses[-self.window:] if self.window else []
        if self.stop_on_nonfinite and window:
            losses = torch.stack([t.detach().float().reshape(()) for t in window]).to(dev)
            bad = (~torch.isfinite(losses)).any().to(torch.int64)
        flags = torch.stack([bad, signalled.to(torch.int64)])
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)  # one host sync, as the SIGTERM check had
        any_bad, self._agreed_signal = (bool(v) for v in flags.tolist())
        if any_bad:
            return self._check_losses() or "nonfinite"
        return None
