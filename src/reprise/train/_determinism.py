"""Is training deterministic? Run the first steps twice and find where they part.

:func:`check_determinism` trains ``steps`` optimizer steps twice from the same
starting state and hashes every parameter after every step; the first step at
which a parameter's bytes differ, and which parameters, is the report.
``reprise verify`` runs it on every Trainer inside the re-executed steps (the
replay sets ``REPRISE_CHECK_DETERMINISM``), so a training step whose outputs
differ says whether the training itself is non-deterministic, and from which
step.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from reprise.core._hashing import hash_bytes
from reprise.core.errors import UserError

__all__ = ["DeterminismReport", "check_determinism"]


@dataclass
class DeterminismReport:
    """Outcome of :func:`check_determinism`."""

    deterministic: bool
    steps: int
    first_divergent_step: int | None = None
    parameters: list[str] = field(default_factory=list)
    max_abs_diff: float | None = None
    step_name: str | None = None

    @property
    def parameter(self) -> str | None:
        """The first parameter (in module order) that diverged."""
        return self.parameters[0] if self.parameters else None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        if self.deterministic:
            return f"deterministic over {self.steps} optimizer step(s)"
        more = f" (+{len(self.parameters) - 1} more)" if len(self.parameters) > 1 else ""
        diff = f", max |Δ| {self.max_abs_diff:.3g}" if self.max_abs_diff is not None else ""
        return (f"diverged at optimizer step {self.first_divergent_step}: parameter "
                f"{self.parameter}{more}{diff}")


def _digests(module: Any) -> dict[str, str]:
    import torch

    out = {}
    for name, p in module.named_parameters():
        raw = p.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy()
        out[name] = hash_bytes(memoryview(raw))
    return out


def _trace(keep_values: bool) -> Any:
    from reprise.train._trainer import Callback

    class Trace(Callback):
        """Records parameter digests (and, for small models, values) after every step."""

        def __init__(self) -> None:
            self.digests: list[dict[str, str]] = []
            self.values: list[dict[str, Any]] = []

        def on_step_end(self, trainer: Any) -> None:
            self.digests.append(_digests(trainer.module))
            if keep_values:
                self.values.append({n: p.detach().cpu().clone()
                                    for n, p in trainer.module.named_parameters()})

    return Trace()


def _compare(a: Any, b: Any, steps: int) -> DeterminismReport:
    for i, (da, db) in enumerate(zip(a.digests, b.digests, strict=False)):
        bad = [n for n in da if da[n] != db.get(n)]
        if bad:
            diff = None
            if a.values and b.values:
                diff = max(float((a.values[i][n].double() - b.values[i][n].double()).abs().max())
                           for n in bad)
            return DeterminismReport(False, steps, first_divergent_step=i + 1, parameters=bad,
                                     max_abs_diff=diff)
    if len(a.digests) != len(b.digests):
        return DeterminismReport(False, steps, first_divergent_step=min(len(a.digests),
                                                                        len(b.digests)) + 1,
                                 parameters=["<number of steps>"])
    return DeterminismReport(True, len(a.digests))


def _small(module: Any) -> bool:
    return bool(sum(p.numel() for p in module.parameters()) <= 5_000_000)


def check_trainer(trainer: Any, steps: int) -> DeterminismReport:
    """Train ``steps`` steps twice from the trainer's current state, then put it back.

    Needs a trainer whose ``fit`` has set up its loaders (used from inside fit).
    """
    tensors, doc = trainer.state(grads=True)
    snapshot = ({k: v.clone() for k, v in tensors.items()}, json.loads(json.dumps(doc)))
    traces = []
    quiet = trainer._quiet
    trainer._quiet = True
    try:
        for _ in range(2):
            trace = _trace(_small(trainer.module))
            trainer.callbacks.append(trace)
            try:
                trainer.load_state(*snapshot)
                trainer._loop(stop_at=trainer.global_step + steps)
            finally:
                trainer.callbacks.remove(trace)
            traces.append(trace)
    finally:
        trainer.load_state(*snapshot)
        trainer._pending_losses.clear()
        trainer._quiet = quiet
    return _compare(traces[0], traces[1], steps)


def check_determinism(fn: Callable[[], Any], steps: int = 4, *, seed: int = 0) -> DeterminismReport:
    """Build a Trainer twice with ``fn`` and train ``steps`` steps each; compare.

    ``fn()`` returns ``(trainer, train_data)`` or a Trainer whose data was given
    as ``trainer.fit``'s default (``train_data`` attribute). Global generators
    are seeded with ``seed`` before each call, so model initialisation matches.

    Example:
        >>> import torch
        >>> from torch.utils.data import DataLoader, TensorDataset
        >>> from reprise.train import Trainer
        >>> def make():
        ...     model = torch.nn.Linear(4, 2)
        ...     data = DataLoader(TensorDataset(torch.randn(32, 4), torch.randint(0, 2, (32,))),
        ...                       batch_size=8)
        ...     opt = torch.optim.SGD(model.parameters(), lr=0.1)
        ...     return Trainer(model, opt, loss=torch.nn.functional.cross_entropy,
        ...                    device="cpu"), data
        >>> check_determinism(make, steps=3).deterministic
        True
    """
    from reprise.env import seed_everything

    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise UserError(f"steps must be a positive integer; got {steps!r}")
    traces = []
    for _ in range(2):
        seed_everything(seed)
        made = fn()
        trainer, data = made if isinstance(made, tuple) else (made, getattr(made, "train_data",
                                                                             None))
        trace = _trace(_small(trainer.module))
        trainer.callbacks.append(trace)
        trainer._quiet = True
        trainer.fit(data, max_steps=steps)
        traces.append(trace)
    return _compare(traces[0], traces[1], steps)


def record_report(target: str, report: DeterminismReport) -> None:
    """Append ``report`` as a JSON line to ``target`` (read back by ``reprise verify``)."""
    from reprise.tracking._api import active_run

    run = active_run()
    report.step_name = getattr(run, "node", None)
    line = (json.dumps(report.to_dict(), sort_keys=True) + "\n").encode()
    fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)  # one small O_APPEND write: lines from parallel steps never mix
    finally:
        os.close(fd)
