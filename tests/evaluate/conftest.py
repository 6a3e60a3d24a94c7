"""Small deterministic datasets for the evaluation tests."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest


@pytest.fixture
def binary() -> dict[str, Any]:
    """300 rows: labels, a noisy positive-class probability (with ties), a region column."""
    rng = np.random.default_rng(7)
    n = 300
    y = rng.integers(0, 2, n)
    p = np.clip(0.35 * y + 0.65 * rng.random(n), 0.0, 1.0).round(2)  # rounding makes ties
    region = rng.choice(["north", "south", "east"], n)
    age = rng.integers(18, 80, n).astype(float)
    return {"y": y, "p": p, "region": region, "age": age}


@pytest.fixture
def multiclass() -> dict[str, Any]:
    rng = np.random.default_rng(3)
    n, k = 400, 3
    y = rng.integers(0, k, n)
    raw = rng.random((n, k))
    raw[np.arange(n), y] += 0.8
    return {"y": y, "proba": raw / raw.sum(axis=1, keepdims=True)}


@pytest.fixture
def regression() -> dict[str, Any]:
    rng = np.random.default_rng(5)
    y = rng.normal(10.0, 3.0, 250)
    return {"y": y, "pred": y + rng.normal(0.0, 1.0, 250)}
