"""Seeding every random number generator a run may use, without importing new libraries."""

from __future__ import annotations

import importlib.util
import os
import random
import sys
from typing import Any

__all__ = ["seed_everything"]


def seed_everything(seed: int) -> dict[str, Any]:
    """Seed ``random``, numpy (when installed) and torch (when already imported).

    torch is never imported here: a process that did not load it has no torch
    generator to seed, and loading it would cost a second. ``PYTHONHASHSEED``
    is reported, not set: it only takes effect in a new interpreter.

    Args:
        seed: a non-negative integer below 2**32 (numpy's limit).

    Returns:
        What was seeded: ``{"seed", "random", "numpy", "torch", "pythonhashseed"}``.

    Example:
        >>> seeded = seed_everything(7)
        >>> seeded["random"], seeded["seed"]
        (True, 7)
    """
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:
        raise ValueError(f"seed must be an integer in [0, 2**32); got {seed!r}.")
    random.seed(seed)
    return {"seed": seed, "random": True, "numpy": _seed_numpy(seed),
            "torch": _seed_torch(seed), "pythonhashseed": os.environ.get("PYTHONHASHSEED")}


def _seed_numpy(seed: int) -> bool:
    if "numpy" not in sys.modules and importlib.util.find_spec("numpy") is None:
        return False
    import numpy as np

    np.random.seed(seed)
    return True


def _seed_torch(seed: int) -> bool:
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    torch.manual_seed(seed)  # seeds the CPU and every CUDA device
    return True
