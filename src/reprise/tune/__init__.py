"""Layer 4: hyperparameter search on Optuna — tracked trials, pruning fed by training
and cross-validation, parallel workers, reproducible parallel search, resumable studies.

Nothing here imports Optuna until a search runs.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from reprise.core._report import report
from reprise.core.errors import TrialPruned
from reprise.tune._best import BestParams
from reprise.tune._space import SearchSpace, load_space
from reprise.tune._summary import describe_study, list_studies, load_study, show_study, study_html
from reprise.tune._tuner import TuneResult, tune

__all__ = [
    "BestParams",
    "SearchSpace",
    "TrialPruned",
    "TuneResult",
    "describe_study",
    "list_studies",
    "load_space",
    "load_study",
    "report",
    "show_study",
    "study_html",
    "tune",
]


class _CallableModule(types.ModuleType):
    """``reprise.tune`` is both this package and the :func:`tune` function (as
    ``reprise.pipeline`` is both a package and the decorator): calling the module
    calls :func:`tune`."""

    def __call__(self, *args: Any, **kwargs: Any) -> TuneResult:
        return tune(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
