"""Layer 3: pipelines of steps with content-addressed caching, lineage, code
snapshots and verified re-execution."""

from __future__ import annotations

import sys
import types
from typing import Any

from reprise.pipeline._files import Dir, File
from reprise.pipeline._pipeline import Graph, Node, Pipeline, pipeline
from reprise.pipeline._step import Outputs, PipelineDefinitionError, Step, StepOutput, step

__all__ = [
    "Dir",
    "File",
    "Graph",
    "Node",
    "Outputs",
    "Pipeline",
    "PipelineDefinitionError",
    "PipelineResult",
    "RayExecutor",
    "Step",
    "StepFailedError",
    "StepOutput",
    "load_pipeline",
    "pipeline",
    "run_pipeline",
    "step",
    "verify_run",
]


def __getattr__(name: str) -> object:
    import importlib

    lazy = {"PipelineResult": "_runner", "StepFailedError": "_runner", "run_pipeline": "_runner",
            "load_pipeline": "_load", "verify_run": "_verify", "RayExecutor": "_ray"}
    if name in lazy:
        return getattr(importlib.import_module(f"reprise.pipeline.{lazy[name]}"), name)
    raise AttributeError(f"module 'reprise.pipeline' has no attribute {name!r}")


class _CallableModule(types.ModuleType):
    """``reprise.pipeline`` is both this package and the ``@pipeline`` decorator:
    importing the package binds the name ``pipeline`` on ``reprise`` to the
    module, so the module itself forwards calls to the decorator."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return pipeline(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
