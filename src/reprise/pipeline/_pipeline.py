"""``@pipeline``: a function whose body wires steps into a graph (a DAG).

The body runs once per build with the pipeline's parameters; every step call adds
a node. Nothing executes while building, so wiring mistakes (an unknown input, an
output that cannot be stored safely, a cycle) are reported before any work starts,
with the step's name and the line of the call.
"""

from __future__ import annotations

import inspect
import json
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from reprise.core._hashing import canonical_json
from reprise.core.errors import UserError
from reprise.pipeline._files import PathInput, is_external
from reprise.pipeline._step import (
    Outputs,
    PipelineDefinitionError,
    Step,
    StepOutput,
    set_builder,
)

__all__ = ["Graph", "Node", "Pipeline", "pipeline"]

#: Keyword arguments of :meth:`Pipeline.run`; pipeline parameters may not use them.
RUN_OPTIONS = frozenset({"seed", "workers", "cache", "force", "workspace", "progress", "steps"})


@dataclass
class Node:
    """One step call in a pipeline: its bound inputs and declared outputs."""

    name: str
    step: Step
    inputs: dict[str, Any]  # parameter name -> StepOutput | PathInput | JSON-able value
    callsite: str
    outputs: list[str]
    upstream: list[str] = field(default_factory=list)


@dataclass
class Graph:
    """The nodes of one pipeline build, in a topological order."""

    pipeline: str
    params: dict[str, Any]
    nodes: dict[str, Node]
    result: Any = None

    def downstream(self, names: Iterable[str]) -> set[str]:
        """``names`` and every node that depends on them, transitively."""
        out = set(names)
        for node in self.nodes.values():  # nodes are in topological order
            if any(u in out for u in node.upstream):
                out.add(node.name)
        return out

    def upstream_closure(self, names: Iterable[str]) -> set[str]:
        out: set[str] = set()
        todo = list(names)
        while todo:
            n = todo.pop()
            if n not in out:
                out.add(n)
                todo.extend(self.nodes[n].upstream)
        return out

    def check_acyclic(self) -> None:
        """Raise naming the steps on a cycle (only hand-made graphs can have one)."""
        indeg = {n: len(set(node.upstream)) for n, node in self.nodes.items()}
        users: dict[str, list[str]] = {n: [] for n in self.nodes}
        for node in self.nodes.values():
            for u in set(node.upstream):
                if u not in self.nodes:
                    raise PipelineDefinitionError(
                        f"step {node.name!r} ({node.callsite}) takes an input from unknown "
                        f"step {u!r}.")
                users[u].append(node.name)
        ready = [n for n, d in indeg.items() if d == 0]
        seen = 0
        while ready:
            n = ready.pop()
            seen += 1
            for m in users[n]:
                indeg[m] -= 1
                if indeg[m] == 0:
                    ready.append(m)
        if seen != len(self.nodes):
            cyc = sorted(n for n, d in indeg.items() if d > 0)
            where = ", ".join(f"{n} ({self.nodes[n].callsite})" for n in cyc)
            raise PipelineDefinitionError(f"the pipeline has a cycle through steps: {where}.")


class _Builder:
    def __init__(self, pipeline: str) -> None:
        self.pipeline = pipeline
        self.nodes: dict[str, Node] = {}

    def add(self, step_: Step, args: tuple[Any, ...], kwargs: dict[str, Any],
            frame: FrameType) -> Any:
        callsite = f"{frame.f_code.co_filename}:{frame.f_lineno}"
        name = step_.name
        if name in self.nodes:  # the same step called twice: number the later calls
            i = 2
            while f"{name}_{i}" in self.nodes:
                i += 1
            name = f"{name}_{i}"
        try:
            bound = step_.signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise PipelineDefinitionError(f"step {name!r} ({callsite}): {exc}.") from None
        bound.apply_defaults()
        inputs: dict[str, Any] = {}
        upstream: list[str] = []
        for pname, value in bound.arguments.items():
            kind = step_.signature.parameters[pname].kind
            if kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
                raise PipelineDefinitionError(
                    f"step {name!r} ({step_.where}): *args/**kwargs parameters are not "
                    "supported; name every input.")
            inputs[pname] = self._check_input(name, callsite, pname, value)
            if isinstance(value, StepOutput):
                upstream.append(value.node)
            elif is_gather(inputs[pname]):
                upstream.extend(o.node for o in inputs[pname])
        shape, spec = step_.output_spec
        for oname, ann in spec:
            problem = storable_problem(ann)
            if problem:
                label = "its output" if shape == "single" else f"output {oname!r}"
                raise PipelineDefinitionError(
                    f"step {name!r} ({step_.where}): {label} is annotated {problem}, which "
                    "Reprise cannot store safely (it never pickles). Return numpy arrays, "
                    "DataFrames, Arrow tables, JSON-able values, bytes or paths, or register "
                    "a materializer with @reprise.register_materializer.")
        node = Node(name=name, step=step_, inputs=inputs, callsite=callsite,
                    outputs=[o for o, _ in spec], upstream=sorted(set(upstream)))
        self.nodes[name] = node
        outs = [StepOutput(name, o, ann) for o, ann in spec]
        return outs[0] if shape == "single" else Outputs(outs)

    def _check_input(self, node: str, callsite: str, pname: str, value: Any) -> Any:
        if isinstance(value, StepOutput):
            if value.node not in self.nodes:
                raise PipelineDefinitionError(
                    f"step {node!r} ({callsite}): input {pname!r} is an output of step "
                    f"{value.node!r}, which is not part of this pipeline.")
            return value
        if isinstance(value, Outputs):
            raise PipelineDefinitionError(
                f"step {node!r} ({callsite}): input {pname!r} is all outputs of step "
                f"{value[0].node!r}; unpack them and pass one.")
        if isinstance(value, PathInput) or is_external(value):
            return value
        if is_gather(value):  # fan-in: a list of step outputs, loaded as a list
            for i, item in enumerate(value):
                if item.node not in self.nodes:
                    raise PipelineDefinitionError(
                        f"step {node!r} ({callsite}): input {pname!r}[{i}] is an output of step "
                        f"{item.node!r}, which is not part of this pipeline.")
            return list(value)
        if _contains_output(value):
            raise PipelineDefinitionError(
                f"step {node!r} ({callsite}): input {pname!r} nests a step output inside a "
                "container; pass step outputs directly as arguments, or a list made only of "
                "step outputs (it arrives as a list of their values).")
        try:
            canonical_json(value)
        except (TypeError, ValueError):
            raise PipelineDefinitionError(
                f"step {node!r} ({callsite}): input {pname!r} is a {type(value).__name__}, "
                "which is not a step output, a reprise.File/Dir or a JSON-able value; "
                "produce it in a step, or pass a path as reprise.File.") from None
        return json.loads(canonical_json(value)) if not _is_plain(value) else value


def is_gather(value: Any) -> bool:
    """A fan-in input: a non-empty list or tuple whose items are all step outputs."""
    return isinstance(value, (list, tuple)) and not isinstance(value, Outputs) and bool(value) \
        and all(isinstance(v, StepOutput) for v in value)


def _is_plain(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, str)) or (
        isinstance(value, float) and value == value and value not in (float("inf"), -float("inf")))


def _contains_output(value: Any) -> bool:
    if isinstance(value, StepOutput):
        return True
    if isinstance(value, (list, tuple, set, frozenset)):
        return any(_contains_output(v) for v in value)
    if isinstance(value, dict):
        return any(_contains_output(v) for v in value.values())
    return False


_STORABLE_NAMES = {
    "numpy.ndarray", "pandas.core.frame.DataFrame", "pandas.DataFrame", "pyarrow.lib.Table",
    "pathlib.Path", "pathlib.PosixPath",
}


def storable_problem(ann: Any) -> str | None:
    """None when values of annotation ``ann`` can be stored (or it cannot be told
    statically); else the annotation's printable name."""
    if ann is None or ann is Any or ann is inspect.Signature.empty or isinstance(ann, typing.TypeVar):
        return None
    origin = typing.get_origin(ann)
    if origin is typing.Union or origin is types.UnionType:
        probs = [storable_problem(a) for a in typing.get_args(ann) if a is not type(None)]
        return next((p for p in probs if p), None)
    if origin is not None:
        ann = origin
    if not isinstance(ann, type):
        return None
    if ann in (int, float, str, bool, bytes, bytearray, list, dict, tuple, type(None)):
        return None
    if issubclass(ann, (PathInput, Path)) or callable(getattr(ann, "reprise_resolve", None)):
        return None
    if f"{ann.__module__}.{ann.__qualname__}" in _STORABLE_NAMES:
        return None
    from reprise.store._materializers import materializer_for_type

    if materializer_for_type(ann) is not None:
        return None
    return f"{ann.__module__}.{ann.__qualname__}"



class Pipeline:
    """A decorated pipeline function; ``run(**params)`` builds and executes it."""

    def __init__(self, func: Callable[..., Any], *, name: str | None = None) -> None:
        self.func = func
        self.name = name or func.__name__
        self.signature = inspect.signature(func)
        clash = RUN_OPTIONS & set(self.signature.parameters)
        if clash:
            raise PipelineDefinitionError(
                f"pipeline {self.name!r}: parameter(s) {sorted(clash)} clash with run options "
                f"{sorted(RUN_OPTIONS)}; rename them.")
        self.module = func.__module__
        self.__doc__ = func.__doc__

    @property
    def where(self) -> str:
        code = self.func.__code__
        return f"{code.co_filename}:{code.co_firstlineno}"

    def coerce_params(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        """Bind ``raw`` (strings from the command line, or Python values) to the
        pipeline's parameters, converting by annotation; defaults filled in."""
        params = self.signature.parameters
        unknown = sorted(set(raw) - set(params))
        if unknown:
            raise UserError(f"pipeline {self.name!r} has no parameter(s) {unknown}; its "
                            f"parameters are {sorted(params) or 'none'}.")
        try:
            hints = typing.get_type_hints(self.func)
        except Exception:  # unresolvable annotations: no conversion
            hints = {}
        out: dict[str, Any] = {}
        for pname, p in params.items():
            if pname in raw:
                out[pname] = _convert(self.name, pname, raw[pname], hints.get(pname))
            elif p.default is not inspect.Parameter.empty:
                out[pname] = _convert(self.name, pname, p.default, hints.get(pname))
            else:
                raise UserError(f"pipeline {self.name!r} needs parameter {pname!r}; pass it "
                                f"with -p {pname}=VALUE (or {pname}=... in Python).")
        return out

    def build(self, params: Mapping[str, Any] | None = None) -> Graph:
        """Wire the graph for ``params`` (already coerced) without executing anything."""
        bound = self.coerce_params(params or {})
        builder = _Builder(self.name)
        previous = set_builder(builder)
        try:
            result = self.func(**bound)
        finally:
            set_builder(previous)
        if not builder.nodes:
            raise PipelineDefinitionError(
                f"pipeline {self.name!r} ({self.where}) calls no steps; decorate the functions "
                "it calls with @reprise.step.")
        graph = Graph(pipeline=self.name, params=bound, nodes=builder.nodes, result=result)
        graph.check_acyclic()
        return graph

    def run(self, *, seed: int = 0, workers: int | None = None, cache: bool = True,
            force: Iterable[str] = (), workspace: Any = None, progress: Any = None,
            steps: Iterable[str] | None = None, **params: Any) -> Any:
        """Build and execute; returns a :class:`reprise.pipeline.PipelineResult`."""
        from reprise.pipeline._runner import run_pipeline

        return run_pipeline(self, params, seed=seed, workers=workers, cache=cache,
                            force=force, workspace=workspace, progress=progress, steps=steps)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise PipelineDefinitionError(
            f"pipeline {self.name!r} is not called directly; use {self.name}.run(**params) "
            f"or `reprise run FILE.py:{self.name}`.")

    def __repr__(self) -> str:
        return f"<pipeline {self.name}>"


def pipeline(func: Any = None, /, *, name: str | None = None) -> Any:
    """Declare a pipeline: its body calls steps; ``.run(**params)`` executes it."""
    if func is not None:
        return Pipeline(func, name=name)
    return lambda f: Pipeline(f, name=name)


def _convert(pipeline_name: str, pname: str, value: Any, ann: Any) -> Any:
    def bad(expected: str) -> UserError:
        return UserError(f"pipeline {pipeline_name!r}: parameter {pname!r} must be {expected}, "
                         f"got {value!r}.")

    if isinstance(ann, type) and issubclass(ann, PathInput):
        return value if isinstance(value, ann) else ann(value)
    from_param = getattr(ann, "from_param", None) if isinstance(ann, type) else None
    if callable(from_param):  # e.g. reprise.Dataset: "-p data=churn@3"
        return value if isinstance(value, ann) else from_param(value)
    if not isinstance(value, str) or ann in (None, str, Any):
        if isinstance(value, PathInput) or ann is None or ann is Any:
            return value
        if ann is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        return value
    # strings from the command line
    if ann is bool:
        low = value.strip().lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
        raise bad("a boolean (true/false)")
    if ann is int:
        try:
            return int(value)
        except ValueError:
            raise bad("an integer") from None
    if ann is float:
        try:
            return float(value)
        except ValueError:
            raise bad("a number") from None
    origin = typing.get_origin(ann) or ann
    if origin in (list, dict, tuple):
        try:
            parsed = json.loads(value)
        except ValueError:
            raise bad(f"JSON for a {origin.__name__}") from None
        return parsed
    return value

