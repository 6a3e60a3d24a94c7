"""The neural model of the tabular pipeline. It lives in a module of the project (not in
the pipeline file) so that a stored model names an importable class: Reprise stores the
weights in safetensors and rebuilds the module from this class and its arguments."""

from __future__ import annotations

import torch


class MLP(torch.nn.Module):
    def __init__(self, n_features: int, hidden: int = 32, dropout: float = 0.1) -> None:
        super().__init__()
        self.n_features, self.hidden, self.dropout = n_features, hidden, dropout
        self.net = torch.nn.Sequential(
            torch.nn.Linear(n_features, hidden), torch.nn.ReLU(), torch.nn.Dropout(dropout),
            torch.nn.Linear(hidden, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)
