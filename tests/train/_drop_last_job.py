"""Training job for the drop_last test: 67 rows on 2 ranks, batches of 8, one epoch,
first as given (shards padded to 34 rows each) then with drop_last=True; each rank
writes the row ids it trained on. The script holds the process group, so both
Trainers join it.

    python _drop_last_job.py DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import torch
import torch.distributed as dist
from torch.nn import functional as F

from reprise.train import Trainer


def main() -> None:
    out = Path(sys.argv[1])
    dist.init_process_group("gloo")
    x = np.random.default_rng(0).normal(size=67).astype(np.float32)
    data = pa.table({"row": np.arange(67, dtype=np.float32), "x": x, "y": 2 * x})
    for drop_last in (False, True):
        seen: list[int] = []

        def step(model: Any, batch: Any, seen: list[int] = seen) -> torch.Tensor:
            seen.extend(int(i) for i in batch[0][:, 0])
            return F.mse_loss(model(batch[0][:, 1:])[:, 0], batch[1])

        torch.manual_seed(0)
        trainer = Trainer(torch.nn.Linear(1, 1), lambda p: torch.optim.SGD(p, lr=0.1),
                          training_step=step, label="y", batch_size=8, max_epochs=1,
                          device="cpu", seed=3, drop_last=drop_last, profile=False)
        result = trainer.fit(data)
        (out / f"rank{trainer.rank}-{drop_last}.json").write_text(
            json.dumps({"rows": seen, "steps": result.global_step}))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
