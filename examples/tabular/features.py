"""Feature helpers used by the tabular pipeline's steps (their code is part of
the steps' cache keys: edit one and exactly the steps that call it re-run)."""

from __future__ import annotations

from typing import Any


def fit_scaler(frame: Any) -> Any:
    """The fitted preprocessing: standardise every measurement. Fitted on the named
    columns, it travels inside the model package, so serving applies exactly this."""
    from sklearn.preprocessing import StandardScaler

    return StandardScaler().fit(frame)
