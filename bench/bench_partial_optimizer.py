"""Correctness cross-check, not a timing: an optimizer over part of the model (the head),
the body still requiring gradients, with accumulation and clipping (issue 21, item 10).

Reprise's ``Trainer`` with 8 × 4 (batch × accumulate) and 32 × 1, Lightning 2.6's
``Trainer.fit`` with 8 × 4 (``accumulate_grad_batches=4``) and 32 × 1, and a
hand-written PyTorch loop (``zero_grad``; the window's mean loss; clip the optimizer's
parameters; step) train the same seeded MLP 6-16-1 on the same 96 rows, in order, for 3
epochs, with SGD (momentum 0.9) over the last layer and ``clip_grad_norm`` 0.5, which
is active on every step. Figures: the largest absolute difference between final weights
(float32), every run against the hand loop, and Reprise 8 × 4 against Reprise 32 × 1.
The tests hold the same comparison against the hand loop (tests/train/test_trainer.py);
this script adds Lightning, which the tests do not require.
"""

from __future__ import annotations

import argparse
import logging
import warnings
from typing import Any

from _common import finish

ROWS, EPOCHS, CLIP, LR = 96, 3, 0.5, 0.1


def data() -> tuple[Any, Any]:
    import torch

    g = torch.Generator().manual_seed(0)
    return torch.randn(ROWS, 6, generator=g), 5 * torch.randn(ROWS, 1, generator=g)


def model() -> Any:
    import torch

    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))


def head_sgd(net: Any) -> Any:
    import torch

    return torch.optim.SGD(net[2].parameters(), lr=LR, momentum=0.9)


def flat(net: Any) -> Any:
    import torch

    return torch.cat([p.detach().reshape(-1) for p in net.parameters()])


def loader(batch: int) -> Any:
    from torch.utils.data import DataLoader, TensorDataset

    return DataLoader(TensorDataset(*data()), batch_size=batch, shuffle=False)


def run_hand(window: int) -> Any:
    import torch
    from torch.nn import functional as F

    x, y = data()
    net = model()
    opt = head_sgd(net)
    for _ in range(EPOCHS):
        for start in range(0, ROWS, window):
            opt.zero_grad()
            F.mse_loss(net(x[start:start + window]), y[start:start + window]).backward()
            torch.nn.utils.clip_grad_norm_(net[2].parameters(), CLIP)
            opt.step()
    return net


def run_reprise(batch: int, accumulate: int) -> Any:
    from torch.nn import functional as F

    from reprise.train import Trainer

    net = model()
    Trainer(net, head_sgd(net), loss=F.mse_loss, device="cpu", accumulate=accumulate,
            clip_grad_norm=CLIP, max_epochs=EPOCHS, profile=False).fit(loader(batch))
    return net


def run_lightning(batch: int, accumulate: int) -> Any:
    import lightning as L
    from torch.nn import functional as F

    class Module(L.LightningModule):
        def __init__(self, net: Any) -> None:
            super().__init__()
            self.net = net

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            return F.mse_loss(self.net(batch[0]), batch[1])

        def configure_optimizers(self) -> Any:
            return head_sgd(self.net)

    net = model()
    trainer = L.Trainer(max_epochs=EPOCHS, accumulate_grad_batches=accumulate,
                        gradient_clip_val=CLIP, gradient_clip_algorithm="norm", logger=False,
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, accelerator="cpu", devices=1)
    trainer.fit(Module(net), train_dataloaders=loader(batch))
    return net


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    import lightning
    import torch

    warnings.filterwarnings("ignore")  # Lightning's num_workers hints
    for name in ("lightning", "lightning.pytorch", "lightning.fabric", "reprise.train"):
        logging.getLogger(name).setLevel(logging.ERROR)
    hand = flat(run_hand(32))
    body = flat(model()[0])
    runs = {"reprise_8x4": run_reprise(8, 4), "reprise_32x1": run_reprise(32, 1),
            "lightning_8x4": run_lightning(8, 4), "lightning_32x1": run_lightning(32, 1)}
    figures = {f"max_abs_diff_{k}_vs_hand": float((flat(v) - hand).abs().max())
               for k, v in runs.items()}
    figures["max_abs_diff_reprise_8x4_vs_32x1"] = float(
        (flat(runs["reprise_8x4"]) - flat(runs["reprise_32x1"])).abs().max())
    figures["hand_update_size"] = float((hand - flat(model())).abs().max())
    figures["body_moved_reprise_8x4"] = float(
        (flat(runs["reprise_8x4"][0]) - body).abs().max())
    result = {
        "peer": f"hand-written torch {torch.__version__} loop; lightning "
                f"{lightning.__version__} Trainer.fit",
        "setup": {"rows": ROWS, "epochs": EPOCHS, "clip_grad_norm": CLIP, "lr": LR,
                  "optimizer": "SGD(momentum=0.9) over the last Linear only",
                  "model": "Linear(6,16)-Tanh-Linear(16,1), body requires grad"},
        "figures": figures,
        "ratios": {},
    }
    return finish("partial_optimizer", result, quick=args.quick,
                  fmt=lambda k, v: f"{v:>14.3e}")


if __name__ == "__main__":
    main()
