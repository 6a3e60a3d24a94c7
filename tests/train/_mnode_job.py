"""Training job for the multi-node tests: the same global batch on 1 node × 2 processes
or 2 nodes × 1, tracked in one run of the workspace named by ``REPRISE_WORKSPACE``.

    python _mnode_job.py SHARED [STEP_DELAY]

``SHARED`` is the folder every node reaches (checkpoints, the final weights);
the process's own working folder (its node's) gets ``rank-<RANK>.json`` with
what this process saw. Global rank 0 checkpoints to ``SHARED/ckpt``; the other
ranks are given a folder of their own node's that never holds a checkpoint, so a
resume that works proves they never read one (rank 0 sends them its state).
``STEP_DELAY`` seconds of sleep after each step slow the run down for a test that
kills it from outside (the numbers do not change).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch

from reprise.data import make_loader
from reprise.train import Callback, Trainer, rank_zero_run


class Slow(Callback):
    def __init__(self, delay: float) -> None:
        self.delay = delay

    def on_batch_end(self, trainer: Trainer) -> None:
        time.sleep(self.delay)


def main() -> None:
    shared = Path(sys.argv[1])
    delay = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
    Path(f"rank-{os.environ.get('RANK', '0')}.json").write_text(json.dumps({
        "pid": os.getpid(), "rank": os.environ.get("RANK"),
        "local_rank": os.environ.get("LOCAL_RANK"), "group_rank": os.environ.get("GROUP_RANK"),
        "world_size": os.environ.get("WORLD_SIZE"), "cwd": os.getcwd()}))
    rng = np.random.default_rng(0)
    x = rng.normal(size=(192, 5)).astype(np.float32)
    data = pa.table({**{f"x{i}": x[:, i] for i in range(5)},
                     "y": (x[:, 0] - x[:, 2] > 0).astype(np.int64)})
    rank = int(os.environ.get("RANK", "0"))
    checkpoints = shared / "ckpt" if rank == 0 else Path.cwd() / f"unused-ckpt-{rank}"
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.Tanh(), torch.nn.Dropout(0.1),
                                torch.nn.Linear(16, 2))
    trainer = Trainer(model, lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
                      loss=torch.nn.functional.cross_entropy, max_epochs=3, device="cpu",
                      deterministic=True, seed=5, checkpoint_dir=checkpoints,
                      checkpoint_every=3, keep_last=10, resume="auto", log_every=2,
                      callbacks=[Slow(delay)] if delay else [])
    with rank_zero_run("mnode", params={"nodes": os.environ.get("GROUP_WORLD_SIZE")}):
        result = trainer.fit(make_loader(data, batch_size=16, label="y", seed=9))
    if trainer.rank == 0:
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in trainer.module.state_dict().items()},
                  str(shared / "final.safetensors"))
        (shared / "result.json").write_text(json.dumps(
            {"step": result.global_step, "resumed_from": result.resumed_from}))


if __name__ == "__main__":
    main()
