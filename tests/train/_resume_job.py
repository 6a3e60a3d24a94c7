"""A small training job for the kill-and-resume tests (run as a script).

    python _resume_job.py '{"dir": ..., "workers": 0, "kill": {"kind": "batch", "at": 7}}'

Trains an MLP with dropout (so the RNG matters), AdamW, a step LR schedule,
gradient accumulation over 3 micro-batches with a short last window and a short
last batch, clipping, validation every 3 optimizer steps with early stopping
state, and checkpoints every 2 steps; always with ``resume="auto"``. ``kill``
makes the process SIGKILL itself at a chosen point (or SIGTERM itself, which
the Trainer turns into a checkpoint and exit 143). At the end the model and
optimizer state are written to ``final.safetensors`` + ``final.json``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch

import reprise.train._checkpoint as ckpt
from reprise.data import make_loader
from reprise.train import Callback, EarlyStopping, Trainer
from reprise.train._checkpoint import flatten


def table(n: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 6)).astype(np.float32)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).astype(np.int64)
    cols = {f"x{i}": x[:, i] for i in range(6)}
    cols["y"] = y
    return pa.table(cols)


class Killer(Callback):
    def __init__(self, kind: str, at: int) -> None:
        self.kind, self.at, self.seen, self.val_seen = kind, at, 0, 0

    def on_batch_end(self, trainer: Trainer) -> None:
        self.seen += 1
        if self.seen == self.at and self.kind == "batch":
            os.kill(os.getpid(), signal.SIGKILL)
        if self.seen == self.at and self.kind == "sigterm":
            os.kill(os.getpid(), signal.SIGTERM)

    def on_validation_batch_end(self, trainer: Trainer, index: int) -> None:
        self.val_seen += 1
        if self.kind == "validation" and self.val_seen == self.at:
            os.kill(os.getpid(), signal.SIGKILL)


def kill_inside_checkpoint(at: int, stage: str) -> None:
    """SIGKILL on the ``at``-th checkpoint, after its tensors (or its state) were written."""
    calls = {"n": 0}
    if stage == "tensors":
        original = ckpt._write_tensors

        def write(tensors, path):  # type: ignore[no-untyped-def]
            original(tensors, path)
            calls["n"] += 1
            if calls["n"] == at:
                os.kill(os.getpid(), signal.SIGKILL)

        ckpt._write_tensors = write
    else:
        original_sync = ckpt.fsync_dir

        def sync(path):  # type: ignore[no-untyped-def]
            original_sync(path)
            if Path(path).name.startswith(".tmp-ckpt-"):
                calls["n"] += 1
                if calls["n"] == at:
                    os.kill(os.getpid(), signal.SIGKILL)

        ckpt.fsync_dir = sync


def main() -> None:
    spec = json.loads(sys.argv[1])
    out = Path(spec["dir"])
    kill = spec.get("kill") or {}
    torch.manual_seed(1234)
    model = torch.nn.Sequential(torch.nn.Linear(6, 32), torch.nn.ReLU(), torch.nn.Dropout(0.2),
                                torch.nn.Linear(32, 2))
    callbacks = []
    if kill.get("kind") in ("batch", "sigterm", "validation"):
        callbacks.append(Killer(kill["kind"], int(kill["at"])))
    elif kill.get("kind") == "checkpoint":
        kill_inside_checkpoint(int(kill["at"]), kill.get("stage", "tensors"))
    train = make_loader(table(200, 0), batch_size=16, label="y", seed=7,
                        num_workers=int(spec["workers"]))
    val = make_loader(table(64, 1), batch_size=32, label="y", shuffle=False)
    trainer = Trainer(
        model, lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.01),
        loss=torch.nn.functional.cross_entropy, max_epochs=3, accumulate=3,
        clip_grad_norm=1.0, scheduler=lambda o: torch.optim.lr_scheduler.StepLR(o, 4, 0.5),
        val_every=3, early_stopping=EarlyStopping(patience=100), device="cpu",
        deterministic=True, seed=11, checkpoint_dir=out / "ckpt", checkpoint_every=2,
        keep_last=2, resume="auto", log_every=4, callbacks=callbacks)
    result = trainer.fit(train, val)
    tensors: dict[str, torch.Tensor] = {}
    doc = flatten({"model": trainer.module.state_dict(),
                   "optimizer": trainer.optimizer.state_dict()}, tensors, "")
    from safetensors.torch import save_file

    save_file(tensors, str(out / "final.safetensors"))
    (out / "final.json").write_text(json.dumps({"state": doc, "step": result.global_step,
                                                "validations": result.validations},
                                               sort_keys=True))


if __name__ == "__main__":
    main()
