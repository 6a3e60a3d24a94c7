"""Training job for the DDP tests: same global batch on 1 process or 2 (gloo).

    python _ddp_job.py DIR PER_RANK_BATCH [KILL_RANK KILL_AT]
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch

from reprise.data import make_loader
from reprise.train import Callback, Trainer


class KillRank(Callback):
    def __init__(self, rank: int, at: int) -> None:
        self.rank, self.at, self.seen = rank, at, 0

    def on_batch_end(self, trainer: Trainer) -> None:
        self.seen += 1
        if trainer.rank == self.rank and self.seen == self.at:
            os.kill(os.getpid(), signal.SIGKILL)


def main() -> None:
    out, batch = Path(sys.argv[1]), int(sys.argv[2])
    callbacks = [KillRank(int(sys.argv[3]), int(sys.argv[4]))] if len(sys.argv) > 4 else []
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 5)).astype(np.float32)
    data = pa.table({**{f"x{i}": x[:, i] for i in range(5)},
                     "y": (x[:, 0] - x[:, 2] > 0).astype(np.int64)})
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))
    trainer = Trainer(model, lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
                      loss=torch.nn.functional.cross_entropy, max_epochs=3, device="cpu",
                      deterministic=True, seed=5, checkpoint_dir=out / "ckpt",
                      checkpoint_every=4, resume="auto", callbacks=callbacks, log_every=8)
    train = make_loader(data, batch_size=batch, label="y", seed=9)
    trainer.fit(train)
    if trainer.rank == 0:
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in trainer.module.state_dict().items()},
                  str(out / "final.safetensors"))


if __name__ == "__main__":
    main()
