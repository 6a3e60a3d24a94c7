"""Layer 4: training. A lean PyTorch :class:`Trainer` (mixed precision, accumulation,
atomic checkpoints with bit-exact resume, profiling, DDP) and scikit-learn fitting.

Nothing heavy is imported here: torch, safetensors and skops load when a
function needs them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from reprise.core._lazy import lazy_attributes

_EXPORTS: dict[str, str] = {
    "Trainer": "reprise.train._trainer",
    "TrainResult": "reprise.train._trainer",
    "EarlyStopping": "reprise.train._trainer",
    "Preempted": "reprise.train._trainer",
    "Callback": "reprise.train._trainer",
    "CheckpointManager": "reprise.train._checkpoint",
    "check_determinism": "reprise.train._determinism",
    "DeterminismReport": "reprise.train._determinism",
    "find_batch_size": "reprise.train._batch",
    "select_device": "reprise.train._device",
    "fit_estimator": "reprise.train._sklearn",
    "launch": "reprise.train._launch",
    "rank_zero_run": "reprise.train._rank_zero",
}

__all__ = [
    "Callback",
    "CheckpointManager",
    "DeterminismReport",
    "EarlyStopping",
    "Preempted",
    "TrainResult",
    "Trainer",
    "check_determinism",
    "find_batch_size",
    "fit_estimator",
    "launch",
    "rank_zero_run",
    "select_device",
]

if TYPE_CHECKING:
    from reprise.train._batch import find_batch_size
    from reprise.train._checkpoint import CheckpointManager
    from reprise.train._determinism import DeterminismReport, check_determinism
    from reprise.train._device import select_device
    from reprise.train._launch import launch
    from reprise.train._rank_zero import rank_zero_run
    from reprise.train._sklearn import fit_estimator
    from reprise.train._trainer import (
        Callback,
        EarlyStopping,
        Preempted,
        Trainer,
        TrainResult,
    )


__getattr__ = lazy_attributes(__name__, _EXPORTS)
