"""A model class defined in a test module: not part of an installed package, so a model
package must refuse it."""

from __future__ import annotations

import torch


class Tiny(torch.nn.Module):
    def __init__(self, n: int = 2) -> None:
        super().__init__()
        self.n = n
        self.lin = torch.nn.Linear(n, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x)
