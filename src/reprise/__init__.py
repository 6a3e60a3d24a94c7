"""Reprise: reproducible, cached, traceable machine-learning pipelines.

The public API is re-exported here and loaded lazily, so ``import reprise``
stays cheap (no SQLAlchemy, torch, scikit-learn or web server until used).

Example:
    >>> import reprise
    >>> reprise.__version__
    '0.1.0'
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# name -> module that defines it; resolved on first attribute access (PEP 562).
_EXPORTS: dict[str, str] = {
    "start_run": "reprise.tracking",
    "active_run": "reprise.tracking",
    "log_param": "reprise.tracking",
    "log_params": "reprise.tracking",
    "log_metric": "reprise.tracking",
    "log_metrics": "reprise.tracking",
    "set_tag": "reprise.tracking",
    "log_artifact": "reprise.tracking",
    "Run": "reprise.tracking",
    "Workspace": "reprise.store",
    "open_workspace": "reprise.tracking",
    "init": "reprise.tracking",
    "register_materializer": "reprise.store",
    "Materializer": "reprise.store",
    "RunStatus": "reprise.core",
    "errors": "reprise.core",
    "step": "reprise.pipeline",
    "pipeline": "reprise.pipeline",
    "File": "reprise.pipeline",
    "Dir": "reprise.pipeline",
    "Pipeline": "reprise.pipeline",
    "Step": "reprise.pipeline",
    "Dataset": "reprise.data",
    "add_dataset": "reprise.data",
    "split": "reprise.data",
    "make_loader": "reprise.data",
    "Trainer": "reprise.train",
    "EarlyStopping": "reprise.train",
    "BestParams": "reprise.tune",
}

# subpackages reachable as attributes (``reprise.train.fit_estimator``) without importing
# them at start-up
_SUBPACKAGES = frozenset({"core", "env", "store", "tracking", "pipeline", "data", "train",
                          "evaluate", "tune", "registry", "serve"})

__all__ = ["__version__", *sorted(_EXPORTS)]

if TYPE_CHECKING:
    from reprise.core import RunStatus, errors
    from reprise.data import Dataset, add_dataset, make_loader, split
    from reprise.pipeline import Dir, File, Pipeline, Step, pipeline, step
    from reprise.store import Materializer, Workspace, register_materializer
    from reprise.tracking import (
        Run,
        active_run,
        init,
        log_artifact,
        log_metric,
        log_metrics,
        log_param,
        log_params,
        open_workspace,
        set_tag,
        start_run,
    )
    from reprise.train import EarlyStopping, Trainer
    from reprise.tune import BestParams


def __getattr__(name: str) -> Any:
    if name in _SUBPACKAGES:
        return importlib.import_module(f"reprise.{name}")
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'reprise' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
