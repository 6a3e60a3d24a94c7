"""Feature helpers used by the tabular pipeline's steps (their code is part of
the steps' cache keys: edit one and exactly the steps that call it re-run)."""

from __future__ import annotations

import numpy as np


def fit_scaler(x: np.ndarray) -> dict:
    std = x.std(axis=0)
    return {"mean": x.mean(axis=0).tolist(), "std": np.where(std == 0, 1.0, std).tolist()}


def standardize(x: np.ndarray, scaler: dict) -> np.ndarray:
    return (x - np.asarray(scaler["mean"])) / np.asarray(scaler["std"])
