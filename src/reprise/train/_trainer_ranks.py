"""What the ranks of a DDP run agree on, so that they never part ways.

Every decision that ends a loop or changes the shape of the work is taken once
for all ranks, by a collective that every rank reaches at the same point: a
rank that stopped alone would leave the others blocked in their next
collective. Agreed here:

- before each optimizer step: whether any rank saw a non-finite loss in the
  window (the gradients are all-reduced, so one rank's NaN would reach every
  rank's weights) and whether any rank was sent SIGTERM; one all-reduce of two
  flags, the one the SIGTERM check already made per step;
- the validation metrics: sums weighted by samples, reduced over the ranks, so
  early stopping and pruning see the same numbers everywhere;
- ``batch_size="auto"``: the smallest batch any rank fits;
- the summary's sample count and throughput: all ranks' samples over the
  slowest rank's wall time.

With one process every method is a no-op returning the local value.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reprise.core.errors import UserError
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

    def _agree_min(self, value: int) -> int:
        """The smallest ``value`` over the ranks."""
        if not self._distributed():
            return value
        import torch
        import torch.distributed as dist

        t = torch.tensor([int(value)], dtype=torch.int64, device=self._collective_device())
        dist.all_reduce(t, op=dist.ReduceOp.MIN)
        return int(t.item())

    def _reduce_validation(self, sums: Mapping[str, float], total: int
                           ) -> tuple[dict[str, float], int]:
        """Sample-weighted validation sums and the sample count, added over the ranks."""
        if not self._distributed():
            return dict(sums), total
        import torch
        import torch.distributed as dist

        keys = sorted(sums)
        gathered: list[Any] = [None] * self.world_size
        dist.all_gather_object(gathered, (keys, total))
        named = {tuple(k) for k, n in gathered if n}
        if len(named) > 1:
            raise UserError("validation produced different metrics on different ranks ("
                            + "; ".join(f"rank {r}: {k}" for r, (k, _) in enumerate(gathered))
                            + "); make validation_step return the same names on every rank")
        keys = list(named.pop()) if named else keys
        t = torch.tensor([float(total)] + [float(sums.get(k, 0.0)) for k in keys],
                         dtype=torch.float64, device=self._collective_device())
        dist.all_reduce(t)
        values = t.tolist()
        return dict(zip(keys, values[1:], strict=True)), int(values[0])

    def _global_throughput(self, samples: int, wall: float) -> tuple[int, float]:
        """All ranks' samples, and the slowest rank's wall time."""
        if not self._distributed():
            return samples, wall
        import torch
        import torch.distributed as dist

        dev = self._collective_device()
        n = torch.tensor([samples], dtype=torch.int64, device=dev)
        w = torch.tensor([wall], dtype=torch.float64, device=dev)
        dist.all_reduce(n)
        dist.all_reduce(w, op=dist.ReduceOp.MAX)
        return int(n.item()), float(w.item())
