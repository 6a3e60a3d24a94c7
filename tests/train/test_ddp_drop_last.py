"""Under DDP an epoch that does not divide evenly is padded with repeated samples unless
drop_last=True, which repeats none (two real gloo ranks through torchrun)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reprise.core.errors import UserError
from reprise.train import Trainer, launch

JOB = Path(__file__).with_name("_drop_last_job.py")


def test_drop_last_repeats_no_sample_across_ranks(tmp_path: Path) -> None:
    env = {"PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1"}
    assert launch(JOB, [str(tmp_path)], nproc=2, env=env, timeout=240) == 0
    runs = {name: [json.loads((tmp_path / f"rank{r}-{name}.json").read_text()) for r in (0, 1)]
            for name in ("False", "True")}
    # 67 rows: each rank reads 34, one of them a row the other rank reads too, in 5 steps
    padded = [row for rank in runs["False"] for row in rank["rows"]]
    assert len(padded) == 68 and len(set(padded)) == 67
    assert [rank["steps"] for rank in runs["False"]] == [5, 5]
    # drop_last: 33 rows a rank, 4 whole batches of 8, no row twice
    whole = [row for rank in runs["True"] for row in rank["rows"]]
    assert len(whole) == len(set(whole)) == 64
    assert [rank["steps"] for rank in runs["True"]] == [4, 4]


def test_drop_last_is_for_the_loaders_the_trainer_builds() -> None:
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    own = DataLoader(TensorDataset(torch.zeros(4, 1), torch.zeros(4, 1)), batch_size=2)
    t = Trainer(torch.nn.Linear(1, 1), lambda p: torch.optim.SGD(p, lr=0.1),
                loss=torch.nn.functional.mse_loss, device="cpu", drop_last=True)
    with pytest.raises(UserError, match="drop_last=True applies to the loader the Trainer "
                                        "builds.*pass drop_last to it"):
        t.fit(own)
    with pytest.raises(UserError, match="drop_last must be True or False"):
        Trainer(torch.nn.Linear(1, 1), torch.optim.SGD, loss=torch.nn.functional.mse_loss,
                drop_last=1)  # type: ignore[arg-type]
