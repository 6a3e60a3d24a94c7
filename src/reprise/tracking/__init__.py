"""Layer 2: runs, params, metrics journal, tags, artifacts, system metrics, energy."""

from __future__ import annotations

from reprise.store._workspace import Workspace
from reprise.tracking._api import (
    active_run,
    environment,
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
from reprise.tracking._query import compare_runs, describe_run, env_diff, list_runs, run_dict
from reprise.tracking._run import Run

__all__ = [
    "Run",
    "Workspace",
    "active_run",
    "compare_runs",
    "describe_run",
    "env_diff",
    "environment",
    "init",
    "list_runs",
    "log_artifact",
    "log_metric",
    "log_metrics",
    "log_param",
    "log_params",
    "open_workspace",
    "run_dict",
    "set_tag",
    "start_run",
]
