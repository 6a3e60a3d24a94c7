"""Layer 3: pipelines of steps with content-addressed caching, lineage, code
snapshots and verified re-execution."""

from __future__ import annotations

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
            "load_pipeline": "_load", "verify_run": "_verify"}
    if name in lazy:
        return getattr(importlib.import_module(f"reprise.pipeline.{lazy[name]}"), name)
    raise AttributeError(f"module 'reprise.pipeline' has no attribute {name!r}")
