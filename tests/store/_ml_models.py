"""Model classes importable by path (``tests.store._ml_models:Name``) for the ML materializer tests."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from sklearn.base import BaseEstimator, TransformerMixin
from torch import nn


class TinyNet(nn.Module):
    """Constructor args recovered from same-named attributes; a buffer and a Sequential."""

    def __init__(self, n_in: int, hidden: int = 8, n_out: int = 2, act: str = "relu",
                 dropout: float = 0.0) -> None:
        super().__init__()
        self.n_in, self.hidden, self.n_out, self.act, self.dropout = (
            n_in, hidden, n_out, act, dropout)
        self.body = nn.Sequential(nn.Linear(n_in, hidden), nn.ReLU() if act == "relu" else
                                  nn.Tanh(), nn.Dropout(dropout))
        self.head = nn.Linear(hidden, n_out)
        self.register_buffer("scale", torch.ones(n_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x)) * self.scale


class TiedLM(nn.Module):
    """Embedding and output layer share one weight, tied by the constructor."""

    def __init__(self, vocab: int, dim: int) -> None:
        super().__init__()
        self.vocab, self.dim = vocab, dim
        self.embed = nn.Embedding(vocab, dim)
        self.out = nn.Linear(dim, vocab, bias=False)
        self.out.weight = self.embed.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.out(self.embed(ids))


class Opaque(nn.Module):
    """Keeps its size only inside a layer: the argument cannot be recovered by name."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.layer = nn.Linear(size, size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)


class Doubler(nn.Module):
    """Stores a transformed value under the argument's name: recovery must notice."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.width = width * 2
        self.layer = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)


class Wrapper(nn.Module):
    """Takes a sub-module as a constructor argument."""

    def __init__(self, backbone: nn.Module, scale: tuple[float, float] = (1.0, 1.0)) -> None:
        super().__init__()
        self.backbone, self.scale = backbone, scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.backbone(x) * self.scale[0]


class Shifter(TransformerMixin, BaseEstimator):  # type: ignore[misc]
    """A custom estimator: a type outside the skops allow-list."""

    def __init__(self, shift: float = 1.0) -> None:
        self.shift = shift

    def fit(self, X: Any, y: Any = None) -> Shifter:
        self.n_features_in_ = np.asarray(X).shape[1]
        return self

    def transform(self, X: Any) -> Any:
        return np.asarray(X) + self.shift
