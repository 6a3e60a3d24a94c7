"""Executing one step: the unit of work an executor runs, in this process or another.

A :class:`Task` is plain data (picklable by ``multiprocessing``): where the step's
function lives, where its inputs are in the artifact store, the seed. Running it
loads the inputs, seeds the random generators, calls the function, stores the
outputs through their materializers and returns a :class:`TaskResult`. Nothing
but the returned hashes crosses back, so an executor on another machine (Ray)
only needs the artifact store's URL.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.util
import os
import random
import sys
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["StepContext", "Task", "TaskResult", "execute_task", "seed_generators"]


@dataclass
class Task:
    node: str
    module: str
    qualname: str
    module_file: str | None
    # name -> ("value", v) | ("artifact", {hash, ...}) | ("path", {kind, path})
    inputs: dict[str, tuple[str, Any]]
    seed: int
    artifacts_url: str
    sys_path: list[str] = field(default_factory=list)
    attempt: int = 1
    run_id: str | None = None  # the pipeline run (not part of the cache key)
    scope: dict[str, Any] | None = None  # the environment part of the cache key (._scope)
    watch: Any = None  # a ._reads.WatchSpec: record the files and variables the step reads
    artifacts_options: dict[str, Any] = field(default_factory=dict)  # cache_dir/size
    # the run's code snapshot ({hash, materializer, root}): what a worker on another
    # machine imports instead of sys_path (see ._ship)
    code: dict[str, Any] | None = None
    resources: Any = None  # the step's ._step.Resources, for executors that place work
    retries: int = 0  # the step's own retries (the runner re-submits a failed attempt)


@dataclass
class TaskResult:
    node: str
    outputs: list[dict[str, Any]] = field(default_factory=list)
    metrics: list[tuple[str, float, int | None]] = field(default_factory=list)
    started_at: float = 0.0
    ended_at: float = 0.0
    duration: float = 0.0
    energy_joules: float | None = None
    error: str | None = None
    error_type: str | None = None
    pid: int = 0
    # distribution -> version the outputs turned out to depend on (._scope)
    requires: dict[str, str] = field(default_factory=dict)
    # files and environment variables the step read beyond its inputs (._reads), when
    # watched: {"files": {path: hash}, "env": {name: digest}}
    reads: dict[str, Any] | None = None


#: Artifacts logged inside a step are extra outputs named with this prefix.
ARTIFACT_PREFIX = "artifacts/"


class StepContext:
    """Stands in for the active run while a step executes, so ``reprise.log_metric``
    inside a step works the same in any process; the metrics travel back in the
    result and are logged to the pipeline run as ``<step>/<key>``.

    ``log_artifact`` stores the object at once and adds it to the step's outputs
    as ``artifacts/<name>``: it is cached and reused with the step, compared by
    ``reprise verify`` and part of the lineage, like a returned output.
    """

    def __init__(self, node: str, store: Any = None, run_id: str | None = None,
                 scope: dict[str, Any] | None = None) -> None:
        self.node = node
        self.store = store
        self.run_id = run_id  # the pipeline run this step execution belongs to
        self.scope = scope  # the environment part of the step's cache key
        self.requires: dict[str, str] = {}  # declared with _scope.require_distributions
        self.metrics: list[tuple[str, float, int | None]] = []
        self.artifacts: list[dict[str, Any]] = []
        self.id = f"step:{node}"

    def log_metric(self, key: str, value: float, step: int | None = None) -> None:
        self.metrics.append((key, float(value), step))

    def log_metrics(self, values: dict[str, float], step: int | None = None) -> None:
        for k, v in values.items():
            self.log_metric(k, v, step)

    def log_param(self, key: str, value: Any) -> None:
        raise RuntimeError("steps take parameters as arguments; log_param is for runs")

    log_params = log_param

    def set_tag(self, key: str, value: Any) -> None:
        raise RuntimeError("set_tag inside a step is not supported; tag the pipeline run")

    def log_artifact(self, obj: Any, name: str | None = None) -> Any:
        from reprise.core.errors import InvalidNameError
        from reprise.store._artifacts import validate_artifact_name
        from reprise.store._materializers import save_object

        if isinstance(obj, (str, os.PathLike)):
            path = Path(obj)
            if not path.exists():
                raise InvalidNameError(f"log_artifact: no file or folder at {str(path)!r}.")
            obj, name = path, name or path.name
        if name is None:
            raise InvalidNameError(f"log_artifact needs a name for a {type(obj).__name__}, "
                                   "e.g. reprise.log_artifact(obj, 'report.html').")
        validate_artifact_name(name)
        full = ARTIFACT_PREFIX + name
        if any(a["name"] == full for a in self.artifacts):
            raise InvalidNameError(f"step {self.node!r} logged artifact {name!r} twice; give "
                                   "each artifact its own name.")
        record = save_object(self.store, obj)
        self.artifacts.append({"name": full, **record.to_dict()})
        return record


def seed_generators(seed: int) -> None:
    """Seed Python's ``random``, numpy's global generator and torch.

    torch is not imported for this (it costs a second): when it is not loaded
    yet, it is seeded the moment a step imports it (see :class:`_SeedTorchOnImport`),
    so a step's random draws are the same whether or not an earlier step in the
    same worker process happened to import torch first.
    """
    random.seed(seed)
    if "numpy" in sys.modules or importlib.util.find_spec("numpy") is not None:
        import numpy as np

        np.random.seed(seed % 2**32)
    _SeedTorchOnImport.disarm()
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(seed)
    else:
        _SeedTorchOnImport.arm(seed)


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Seed every generator for the code run inside (see :func:`seed_generators`); on the
    way out, a torch import hook that did not fire is removed, so it cannot seed torch
    later with this seed."""
    seed_generators(seed)
    try:
        yield
    finally:
        _SeedTorchOnImport.disarm()


class _SeedTorchOnImport(importlib.abc.MetaPathFinder):
    """A one-shot import hook: seeds torch right after a step first imports it."""

    _armed: _SeedTorchOnImport | None = None

    def __init__(self, seed: int) -> None:
        self.seed = seed

    @classmethod
    def arm(cls, seed: int) -> None:
        cls._armed = cls(seed)
        sys.meta_path.insert(0, cls._armed)

    @classmethod
    def disarm(cls) -> None:
        if cls._armed is not None and cls._armed in sys.meta_path:
            sys.meta_path.remove(cls._armed)
        cls._armed = None

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != "torch":
            return None
        self.disarm()
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None:
            return spec
        loader, seed = spec.loader, self.seed
        run_module = loader.exec_module

        def exec_module(module: Any) -> None:
            run_module(module)
            module.manual_seed(seed)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _resolve_function(task: Task) -> Any:
    from reprise.pipeline._step import _REGISTRY, lookup_step

    for p in reversed(task.sys_path):
        if p not in sys.path:
            sys.path.insert(0, p)
    try:
        return lookup_step(task.module, task.qualname).func
    except (LookupError, ImportError):
        pass
    if task.module_file is None:
        raise LookupError(f"cannot find step {task.module}.{task.qualname} in this process")
    # a module loaded from a file path (``reprise run FILE.py:pipeline``, or __main__):
    # load it under its recorded name so the step registers itself
    name = task.module if task.module != "__main__" else "__reprise_main__"
    spec = importlib.util.spec_from_file_location(name, task.module_file)
    if spec is None or spec.loader is None:
        raise LookupError(f"cannot load {task.module_file}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    for (m, q), st in list(_REGISTRY.items()):
        if m == name and q == task.qualname:
            return st.func
    raise LookupError(f"step {task.qualname} not found in {task.module_file}")


def execute_task(task: Task, store: Any = None) -> TaskResult:
    """Run ``task`` to completion; exceptions from the step come back as text."""
    from reprise.store._artifacts import open_artifact_store
    from reprise.store._materializers import load_object, save_object
    from reprise.tracking._api import _active
    from reprise.tracking._energy import EnergyMeter

    result = TaskResult(node=task.node, pid=os.getpid())
    ctx = StepContext(task.node, run_id=task.run_id, scope=task.scope)
    meter = EnergyMeter(use_nvml=False).start()
    result.started_at = time.time()
    t0 = time.perf_counter()
    try:
        if store is None:
            store = open_artifact_store(task.artifacts_url, **task.artifacts_options)
        ctx.store = store
        func = _resolve_function(task)
        kwargs: dict[str, Any] = {}
        for name, (kind, payload) in task.inputs.items():
            if kind == "value":
                kwargs[name] = payload
            elif kind == "artifact":
                kwargs[name] = load_object(store, payload["hash"], payload["materializer"],
                                           payload.get("meta") or {})
            elif kind == "artifacts":  # fan-in: a list of upstream outputs
                kwargs[name] = [load_object(store, p["hash"], p["materializer"],
                                            p.get("meta") or {}) for p in payload]
            elif kind == "path":
                from reprise.pipeline._files import Dir, File

                kwargs[name] = (Dir if payload["kind"] == "dir" else File)(payload["path"])
            elif kind == "external":
                kwargs[name] = _rebuild_external(payload)
            else:  # pragma: no cover - tasks are built by the runner
                raise ValueError(f"unknown input kind {kind!r}")
        _active.push(ctx)  # type: ignore[arg-type]
        try:
            with seeded(task.seed), _watched(task) as seen:
                value = func(**kwargs)
        finally:
            _active.remove(ctx)  # type: ignore[arg-type]
        from reprise.pipeline._step import lookup_step, split_outputs

        try:
            st = lookup_step(task.module, task.qualname)
        except (LookupError, ImportError):
            st = _step_for(func)
        for oname, obj in split_outputs(st, value):
            result.outputs.append({"name": oname, **save_object(store, obj).to_dict()})
        result.outputs.extend(ctx.artifacts)
        if seen is not None:
            from reprise.pipeline._files import FileHasher

            result.reads = seen.record(FileHasher(task.watch.hash_cache))
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # SystemExit from a step is a step failure too
        result.error = "".join(traceback.format_exception(exc))
        result.error_type = type(exc).__name__
        result.outputs = []
    finally:
        result.duration = time.perf_counter() - t0
        result.ended_at = time.time()
        try:
            result.energy_joules = meter.read()
        finally:
            meter.close()
    result.metrics = ctx.metrics
    result.requires = dict(sorted(ctx.requires.items())) if result.error is None else {}
    return result


def _watched(task: Task) -> contextlib.AbstractContextManager[Any]:
    """Watch the step's reads (see ``._reads``) when the task asks for it; the step's
    ``File``/``Dir`` inputs are declared, so they are not reported."""
    if task.watch is None:
        return contextlib.nullcontext()
    from reprise.pipeline._reads import watch_reads

    declared = [payload["path"] for kind, payload in task.inputs.values() if kind == "path"]
    return watch_reads(task.watch, declared)


def _step_for(func: Any) -> Any:
    from reprise.pipeline._step import _REGISTRY

    for st in _REGISTRY.values():
        if st.func is func:
            return st
    raise LookupError(f"no step for {func!r}")


def module_file(module: str) -> str | None:
    mod = sys.modules.get(module)
    f = getattr(mod, "__file__", None)
    return str(Path(f).resolve()) if f else None


def _rebuild_external(spec: dict[str, Any]) -> Any:
    """Rebuild a workspace input (see ``_files.is_external``) in the worker process."""
    import importlib

    module, _, path = spec["factory"].partition(":")
    obj: Any = importlib.import_module(module)
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj(spec["payload"])
