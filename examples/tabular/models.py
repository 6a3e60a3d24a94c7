"""The neural model of the tabular pipeline, built from torch's own layers: a stored
model then names only classes of an installed package (torch.nn.Sequential, Linear,
ReLU, Dropout), so its package loads wherever torch is installed, without this
project's code."""

from __future__ import annotations

import torch


def make_mlp(n_features: int, hidden: int = 32, dropout: float = 0.1) -> torch.nn.Sequential:
    return torch.nn.Sequential(
        torch.nn.Linear(n_features, hidden), torch.nn.ReLU(), torch.nn.Dropout(dropout),
        torch.nn.Linear(hidden, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 2))
