"""Non-finite weights never reach a checkpoint, and a checkpoint holding them is never
resumed.

A NaN that gets into the weights stays there: every later step, and every run
resumed from a checkpoint of them, computes NaN. So the Trainer looks at the
weights before each checkpoint (all ranks agree on the answer, and training
stops with ``"nonfinite"`` rather than write it); :meth:`Trainer.save_checkpoint`
refuses such weights outright; and ``resume="auto"`` passes over a checkpoint
that holds them (one written by an older version, or by other code) for the
newest one that does not.

What counts: a parameter, a gradient or an optimizer state holding NaN or
±inf; a floating-point buffer holding NaN (an infinite buffer is a legitimate
attention mask, ``-inf`` above the diagonal).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from reprise.core.errors import UserError
from reprise.train._trainer_base import _TrainerBase

__all__ = ["nonfinite_in_checkpoint", "nonfinite_in_module"]


def _bad(pairs: Iterable[tuple[str, Any, bool]]) -> list[str]:
    """Names whose tensor holds NaN, or (when the flag says so) ±inf. One host sync."""
    import torch

    names, oks = [], []
    for name, t, inf_too in pairs:
        if not t.is_floating_point() or t.numel() == 0:
            continue
        names.append(name)
        oks.append(torch.isfinite(t).all() if inf_too else ~torch.isnan(t).any())
    if not oks:
        return []
    flags = torch.stack([o.to("cpu") for o in oks]).tolist()
    return [n for n, ok in zip(names, flags, strict=True) if not ok]


def nonfinite_in_module(module: Any) -> list[str]:
    """Parameters of ``module`` holding NaN or ±inf, and floating buffers holding NaN."""
    with _no_grad():
        pairs = [(n, p.detach(), True) for n, p in module.named_parameters()]
        pairs += [(n, b.detach(), False) for n, b in module.named_buffers()]
        return _bad(pairs)


def nonfinite_in_checkpoint(tensors: Mapping[str, Any], parameters: Iterable[str]) -> list[str]:
    """Keys of a checkpoint's tensors (as :meth:`Trainer.state` names them) that hold
    non-finite values where no finite run puts them."""
    params = {f"/model/{n}" for n in parameters}
    pairs = []
    for key, t in tensors.items():
        if key.startswith("/model/"):
            pairs.append((key, t, key in params))
        elif key.startswith(("/optimizer/", "/grads/")):
            pairs.append((key, t, True))
    return _bad(pairs)


def _no_grad() -> Any:
    import torch

    return torch.no_grad()


def _listing(names: list[str], limit: int = 3) -> str:
    more = f" (+{len(names) - limit} more)" if len(names) > limit else ""
    return ", ".join(repr(n) for n in names[:limit]) + more


class _NonFiniteMixin(_TrainerBase):
    """The non-finite guards of :class:`Trainer` (see the module docstring)."""

    def _check_weights(self) -> str | None:
        """'nonfinite' when any rank's weights are non-finite (agreed by every rank)."""
        bad = nonfinite_in_module(self.module)
        ranks = self._ranks_flagged(bool(bad))
        if not ranks:
            return None
        where = f" on rank {', '.join(map(str, ranks))}" if self.world_size > 1 else ""
        what = f": {_listing(bad)}" if bad else ""
        self._say(f"the weights hold NaN or infinite values{where}{what} at optimizer step "
                  f"{self.global_step}: stopping without writing a checkpoint (lower the "
                  "learning rate, clip gradients, or look for bad input rows)", logging.ERROR)
        return "nonfinite"

    def _refuse_nonfinite_weights(self) -> None:
        """Raise rather than write a checkpoint of non-finite weights."""
        bad = nonfinite_in_module(self.module)
        if bad:
            last = self.checkpoints.latest() if self.checkpoints is not None else None
            raise UserError(
                f"refusing to write a checkpoint at optimizer step {self.global_step}: "
                f"{_listing(bad)} hold NaN or infinite values, and a run resumed from them "
                "would compute NaN from then on. "
                + (f"The last good checkpoint is {last}; resume from it with a lower learning "
                   "rate or gradient clipping." if last else
                   "Lower the learning rate or clip gradients, and start again."))

    def _newest_finite_checkpoint(self, mgr: Any) -> tuple[Path, Any, Any] | None:
        """For ``resume="auto"``: the newest whole checkpoint without non-finite weights,
        its tensors and state; others are passed over with a warning."""
        params = [n for n, _ in self.module.named_parameters()]
        for path in reversed(mgr.checkpoints()):
            why = mgr.problem(path)
            if why is None:
                tensors, doc = mgr.load(path)
                bad = nonfinite_in_checkpoint(tensors, params)
                if not bad:
                    return path, tensors, doc
                why = f"{_listing(bad)} hold NaN or infinite values"
            self._say(f"resume='auto': skipping checkpoint {path}: {why}", logging.WARNING)
        return None

    def _refuse_nonfinite_checkpoint(self, path: Path, tensors: Mapping[str, Any]) -> None:
        bad = nonfinite_in_checkpoint(tensors, [n for n, _ in self.module.named_parameters()])
        if bad:
            raise UserError(f"cannot resume from {path}: {_listing(bad)} hold NaN or infinite "
                            "values, so training would compute NaN from the first step. Resume "
                            "from an earlier checkpoint, or pass resume='auto' to take the "
                            "newest one without them.")
