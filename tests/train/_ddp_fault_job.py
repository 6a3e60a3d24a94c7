"""Training job for the DDP fault tests: poison, kill or stall one rank (gloo, CPU).

    python _ddp_fault_job.py '{"dir": DIR, "fault": "poison", "rank": 1, "at": 1}'

Every rank writes its PID to ``DIR/pid-<rank>`` when it starts and, when ``fit``
returns, ``DIR/result-<rank>.json`` (how it stopped, its validations and summary).
``fault``: ``poison`` puts a NaN into one sample of the ``at``-th training batch of
``rank``; ``kill`` makes ``rank`` SIGKILL itself after its ``at``-th micro-batch;
``stall`` makes ``rank`` sleep for an hour there (after writing ``DIR/stalled-<rank>``),
so that its peers block in the next collective; ``stall-deaf`` does the same
ignoring SIGTERM. ``val`` gives each rank a validation shard of its
own (8 and 24 rows); ``budgets`` (one per rank) trains with ``batch_size="auto"``
under that memory budget, with ``target`` as the target effective batch.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from reprise.data import make_loader
from reprise.train import Callback, Trainer


class Fault(Callback):
    def __init__(self, kind: str, rank: int, at: int, out: Path) -> None:
        self.kind, self.rank, self.at, self.seen, self.out = kind, rank, at, 0, out

    def on_batch_end(self, trainer: Trainer) -> None:
        self.seen += 1
        if trainer.rank != self.rank or self.seen != self.at:
            return
        if self.kind == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if self.kind in ("stall", "stall-deaf"):
            if self.kind == "stall-deaf":
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
            (self.out / f"stalled-{trainer.rank}").write_text(str(time.time()))
            time.sleep(3600)


def main() -> None:
    spec = json.loads(sys.argv[1])
    out = Path(spec["dir"])
    rank = int(os.environ.get("RANK", "0"))
    (out / f"pid-{rank}").write_text(str(os.getpid()))
    kind, fault_rank, at = spec.get("fault"), int(spec.get("rank", 1)), int(spec.get("at", 1))
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 5)).astype(np.float32)
    data = pa.table({**{f"x{i}": x[:, i] for i in range(5)},
                     "y": (x[:, 0] - x[:, 2] > 0).astype(np.int64)})
    calls = {"n": 0}

    def training_step(model: torch.nn.Module, batch: list[torch.Tensor]) -> torch.Tensor:
        inputs, target = batch
        calls["n"] += 1
        if kind == "poison" and rank == fault_rank and calls["n"] == at:
            inputs = inputs.clone()
            inputs[0, 0] = float("nan")  # one sample of this rank's batch
        return torch.nn.functional.cross_entropy(model(inputs), target)

    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))
    callbacks = [Fault(kind, fault_rank, at, out)] if kind in ("kill", "stall", "stall-deaf") \
        else []
    extra: dict[str, Any] = {}
    train: Any = make_loader(data, batch_size=16, label="y", seed=9)
    if spec.get("budgets"):  # batch_size="auto" with another memory budget on each rank
        extra = {"batch_size": "auto", "memory_budget": spec["budgets"][rank], "label": "y",
                 "target_batch_size": spec.get("target")}
        train = data
    val = None
    if spec.get("val"):  # a validation shard of its own on each rank: 8 rows, then 24
        lo, hi = (0, 8) if rank == 0 else (8, 32)
        val = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(
            torch.from_numpy(x[lo:hi]), torch.arange(lo, hi, dtype=torch.float64)), batch_size=5)
        extra["validation_step"] = lambda model, batch: {"row_mean": batch[1].mean()}
    trainer = Trainer(model, lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
                      training_step=training_step, max_epochs=int(spec.get("epochs", 3)),
                      device="cpu", seed=5, checkpoint_dir=out / "ckpt",
                      checkpoint_every=int(spec.get("checkpoint_every", 1)),
                      log_every=int(spec.get("log_every", 50)), resume=spec.get("resume"),
                      callbacks=callbacks, **extra)
    result = trainer.fit(train, val)
    (out / f"result-{rank}.json").write_text(json.dumps(
        {"stopped": result.stopped, "global_step": result.global_step,
         "checkpoint": result.checkpoint, "summary": result.summary,
         "validations": result.validations,
         "finite": all(bool(torch.isfinite(p).all()) for p in trainer.module.parameters())},
        default=str))


if __name__ == "__main__":
    main()
