"""Running a pipeline: cache keys, the schedule, recording, the result.

For each node, once its upstream nodes are resolved::

    key = H(cache format version, step name, code fingerprint, canonical params,
            input artifact hashes, environment scope, step seed)

A key found in the cache index (with all its blobs present) reuses the recorded
outputs; otherwise the executor runs the step. Every step run, executed or
reused, is journaled with its inputs and outputs: the lineage graph.
"""

from __future__ import annotations

import sys
import time
from collections import deque
from collections.abc import Iterable, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reprise.core._hashing import hash_value
from reprise.core._ids import new_id
from reprise.core.errors import RepriseError, UserError
from reprise.pipeline._cache import CACHE_FORMAT_VERSION, StepCache
from reprise.pipeline._execute import ARTIFACT_PREFIX, Task, TaskResult, module_file
from reprise.pipeline._executors import Executor
from reprise.pipeline._files import FileHasher, PathInput, is_external
from reprise.pipeline._pipeline import Graph, Node, Pipeline, is_gather
from reprise.pipeline._reads import (
    WatchSpec,
    read_key,
    stale_reads,
    warn_undeclared_reads,
    watch_spec,
)
from reprise.pipeline._scope import step_scope
from reprise.pipeline._step import StepOutput, join_outputs

__all__ = ["NodeState", "PipelineResult", "StepFailedError", "run_pipeline", "step_seed"]


class StepFailedError(RepriseError):
    """A step raised (after its retries); the run is marked failed."""

    def __init__(self, message: str, *, run_id: str, step: str, error: str) -> None:
        super().__init__(message)
        self.run_id, self.step, self.error = run_id, step, error


@dataclass
class NodeState:
    name: str
    status: str = "pending"  # pending/running/cached/done/failed/skipped
    key: str | None = None
    outputs: list[dict[str, Any]] = field(default_factory=list)
    metrics: list[tuple[str, float, int | None]] = field(default_factory=list)
    duration: float = 0.0
    saved: float = 0.0  # seconds the original execution took, for a reused step
    reused_from: str | None = None
    step_run_id: str | None = None
    error: str | None = None
    attempts: int = 0
    started: float | None = None
    # files and environment variables the step read beyond its inputs (see ._reads)
    reads: dict[str, Any] = field(default_factory=dict)
    rerun_because: list[str] = field(default_factory=list)  # a cache entry's reads changed


@dataclass
class PipelineResult:
    """What a pipeline run did; ``result[step]`` loads that step's output(s)."""

    run_id: str
    pipeline: str
    status: str
    nodes: dict[str, NodeState]
    duration: float
    workspace: Any
    graph: Graph

    @property
    def executed(self) -> list[str]:
        return [n for n, s in self.nodes.items() if s.status == "done"]

    @property
    def reused(self) -> list[str]:
        return [n for n, s in self.nodes.items() if s.status == "cached"]

    @property
    def time_saved(self) -> float:
        return sum(s.saved for s in self.nodes.values())

    def output_hashes(self) -> dict[str, dict[str, str]]:
        return {n: {o["name"]: o["hash"] for o in s.outputs} for n, s in self.nodes.items()}

    def __getitem__(self, node: str) -> Any:
        from reprise.store._materializers import load_object

        if node not in self.nodes:
            raise KeyError(f"no step {node!r}; steps are {list(self.nodes)}")
        state = self.nodes[node]
        if state.status not in ("done", "cached"):
            raise KeyError(f"step {node!r} has no outputs (status {state.status})")
        store = self.workspace.artifacts
        values = {o["name"]: load_object(store, o["hash"], o["materializer"], o.get("meta") or {})
                  for o in state.outputs if not o["name"].startswith(ARTIFACT_PREFIX)}
        return join_outputs(self.graph.nodes[node].step, values)


def step_seed(run_seed: int, step_name: str) -> int:
    """The seed of one step: a hash of the run seed and the step's name, so adding
    or reordering steps never changes another step's seed."""
    return int(hash_value({"seed": run_seed, "step": step_name})[:8], 16) & 0x7FFFFFFF


def run_pipeline(pipe: Pipeline, raw_params: Mapping[str, Any], *, seed: int = 0,
                 workers: int | None = None, cache: bool = True, force: Iterable[str] = (),
                 workspace: Any = None, progress: Any = None, steps: Iterable[str] | None = None,
                 executor: Executor | str | None = None, tags: Mapping[str, str] | None = None,
                 pipeline_ref: str | None = None,
                 executor_address: str | None = None) -> PipelineResult:
    """Run ``pipe``. ``executor``: an :class:`Executor`, or ``"local"``/``"ray"``;
    None takes ``[executor]`` of the workspace's config (local by default), and
    ``executor_address`` (else the config's) is the Ray cluster's address."""
    from reprise.tracking._api import resolve_workspace, start_run

    t_begin = time.perf_counter()
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise UserError(f"seed must be an integer, got {seed!r}.")
    if workers is not None and workers < 1:
        raise UserError(f"workers must be at least 1, got {workers}.")
    ws = resolve_workspace(workspace)
    graph = pipe.build(pipe.coerce_params(raw_params))
    force = list(force)
    for label, names in (("--force", force), ("--steps", list(steps or ()))):
        unknown = sorted(set(names) - set(graph.nodes))
        if unknown:
            raise UserError(f"{label}: no step(s) {unknown} in pipeline {pipe.name!r}; its steps "
                            f"are {list(graph.nodes)}.")
    selected = graph.upstream_closure(steps) if steps else set(graph.nodes)
    forced = graph.downstream(force) if force else set()
    store = ws.artifacts
    hasher = FileHasher(ws.config.workspace_dir / "cache" / "files")
    user_roots = [str(ws.root)]
    mod_file = module_file(pipe.module)
    if mod_file:
        user_roots.append(str(Path(mod_file).parent))
    from reprise.pipeline._fingerprint import code_fingerprint

    fps = {n: code_fingerprint(node.step.func, user_roots=user_roots)
           for n, node in graph.nodes.items()}
    raw_inputs = _hash_path_inputs(graph, hasher, store)
    raw_inputs.update(_resolve_external_inputs(graph, ws))
    snapshot = _code_snapshot(ws, pipe, fps, store, user_roots, mod_file)
    params_record = {k: (_path_record(v, raw_inputs) if isinstance(v, PathInput)
                         else _external_record(v, raw_inputs) if is_external(v) else v)
                     for k, v in graph.params.items()}
    ref = pipeline_ref or _pipeline_ref(ws, pipe, mod_file)
    run_tags = {"reprise.pipeline": ref, "reprise.code_snapshot": snapshot["hash"],
                "reprise.cache": "on" if cache else "off", **(tags or {})}
    ex = _open_executor(ws, executor, executor_address, workers, store)
    try:
        run = start_run(name=pipe.name, params=params_record, tags=run_tags, kind="pipeline",
                        seed=seed, workspace=ws, system_metrics_interval=0, defer_ingest=True)
    except BaseException:
        ex.shutdown(cancel=True)
        raise
    run.record_artifact("code", snapshot)

    states = {n: NodeState(n) for n in graph.nodes}
    if progress is not None:
        progress.start(run.id, pipe.name, [n for n in graph.nodes if n in selected])
    step_cache = StepCache(ws.config.workspace_dir / "cache" / "steps")
    sys_path = [p for p in sys.path if p]
    ctx = _RunContext(graph, states, fps, raw_inputs, store, step_cache, run, seed, sys_path,
                      cache, forced, progress, ws, hasher, _watch_spec(ws),
                      code={"hash": snapshot["hash"], "materializer": snapshot["materializer"],
                            "root": str(ws.root)})
    status, error = "finished", None
    failed_step: tuple[str, str] | None = None
    try:
        failed_step = _schedule(ctx, ex, selected)
        if failed_step is not None:
            status = "failed"
            error = f"step {failed_step[0]!r} failed:\n{failed_step[1]}"
    except KeyboardInterrupt:
        ex.shutdown(cancel=True)
        for s in states.values():
            if s.status == "running":
                s.status = "killed"
        run.end("killed", error="interrupted (KeyboardInterrupt)")
        if progress is not None:
            progress.finish(_result(run, pipe, states, t_begin, ws, graph, "killed"))
        raise
    except BaseException as exc:
        ex.shutdown(cancel=True)
        import traceback

        run.end("failed", error="".join(traceback.format_exception(exc)))
        raise
    ex.shutdown()
    run.end(status, error=error)
    result = _result(run, pipe, states, t_begin, ws, graph, status)
    if progress is not None:
        progress.finish(result)
    if failed_step is not None:
        raise StepFailedError(
            f"step {failed_step[0]!r} failed in run {run.id}; steps that finished are cached, "
            f"so running again resumes from {failed_step[0]!r}.",
            run_id=run.id, step=failed_step[0], error=failed_step[1])
    return result


def _open_executor(ws: Any, executor: Executor | str | None, address: str | None,
                   workers: int | None, store: Any) -> Executor:
    if isinstance(executor, Executor):
        return executor
    from reprise.pipeline._executors import open_executor

    kind = executor or ws.config.executor
    if address is None and kind == "ray":
        address = ws.config.executor_address or None
    return open_executor(kind, address=address, workers=workers, store=store)


def _result(run: Any, pipe: Pipeline, states: dict[str, NodeState], t0: float, ws: Any,
            graph: Graph, status: str) -> PipelineResult:
    return PipelineResult(run_id=run.id, pipeline=pipe.name, status=status, nodes=states,
                          duration=time.perf_counter() - t0, workspace=ws, graph=graph)


@dataclass
class _RunContext:
    graph: Graph
    states: dict[str, NodeState]
    fps: dict[str, Any]
    raw_inputs: dict[str, dict[str, Any]]
    store: Any
    cache: StepCache
    run: Any
    seed: int
    sys_path: list[str]
    use_cache: bool
    forced: set[str]
    progress: Any
    ws: Any
    hasher: FileHasher
    watch: WatchSpec | None  # None: reads are not watched (config watch_reads = false)
    code: dict[str, Any] | None = None  # the code snapshot, for executors that ship it


def _watch_spec(ws: Any) -> WatchSpec | None:
    cfg = ws.config
    if not cfg.watch_reads:
        return None
    return watch_spec(ws, ignore_paths=cfg.ignore_reads, ignore_env=cfg.ignore_env)


def _schedule(ctx: _RunContext, ex: Executor, selected: set[str]) -> tuple[str, str] | None:
    graph, states = ctx.graph, ctx.states
    order = [n for n in graph.nodes if n in selected]
    remaining = {n: len(graph.nodes[n].upstream) for n in order}
    children: dict[str, list[str]] = {n: [] for n in order}
    for n in order:
        for u in graph.nodes[n].upstream:
            children[u].append(n)
    ready = deque(n for n in order if remaining[n] == 0)
    running: dict[Future[TaskResult], tuple[str, str, Task, dict[str, Any]]] = {}
    first_failure: tuple[str, str] | None = None

    def resolved(n: str) -> None:
        for c in children[n]:
            remaining[c] -= 1
            if remaining[c] == 0:
                ready.append(c)

    while ready or running:
        while ready:
            n = ready.popleft()
            node = graph.nodes[n]
            key, task, key_parts = _prepare(ctx, node)
            st = states[n]
            st.key = key
            stale: list[str] = []
            if ctx.use_cache and node.step.cache and n not in ctx.forced:
                entry = ctx.cache.get(key, ctx.store)
                if entry is not None:
                    stale = _stale(ctx, entry)
                    if not stale:
                        _reuse(ctx, node, entry, key_parts)
                        resolved(n)
                        continue
                    st.rerun_because = stale
            st.status, st.started, st.attempts = "running", time.perf_counter(), 1
            if ctx.progress is not None:
                ctx.progress.update(n, "running", note=_stale_note(stale))
            alone = not running and not ready
            running[ex.submit(task, alone=alone)] = (n, key, task, key_parts)
        if not running:
            break
        done, _ = wait(list(running), return_when=FIRST_COMPLETED)
        for fut in done:
            n, key, task, key_parts = running.pop(fut)
            res = fut.result()
            st = states[n]
            node = graph.nodes[n]
            if res.error is not None and st.attempts <= node.step.retries:
                st.attempts += 1
                task.attempt = st.attempts  # same seed: a retry repeats the same computation
                if ctx.progress is not None:
                    ctx.progress.update(n, "running", note=f"retry {st.attempts - 1}")
                running[ex.submit(task, alone=not running and not ready)] = (n, key, task,
                                                                            key_parts)
                continue
            _finish(ctx, node, key, task, key_parts, res)
            if res.error is None:
                resolved(n)
            elif first_failure is None:
                first_failure = (n, res.error)
    for n in order:
        if states[n].status == "pending":
            states[n].status = "skipped"
            if ctx.progress is not None:
                ctx.progress.update(n, "skipped")
    return first_failure


def _prepare(ctx: _RunContext, node: Node) -> tuple[str, Task, dict[str, Any]]:
    """The node's cache key, its task, and the key's ingredients (for explanations)."""
    params: dict[str, Any] = {}
    input_hashes: dict[str, str] = {}
    task_inputs: dict[str, tuple[str, Any]] = {}
    for pname, value in node.inputs.items():
        if isinstance(value, StepOutput):
            out = _output(ctx, value)
            input_hashes[pname] = out["hash"]
            task_inputs[pname] = ("artifact", _load_spec(out))
        elif is_gather(value):
            outs = [_output(ctx, v) for v in value]
            input_hashes[pname] = [o["hash"] for o in outs]  # type: ignore[assignment]
            task_inputs[pname] = ("artifacts", [_load_spec(o) for o in outs])
        elif isinstance(value, PathInput):
            raw = ctx.raw_inputs[str(value.path)]
            input_hashes[pname] = raw["content_hash"]
            task_inputs[pname] = ("path", {"kind": value.kind, "path": str(value.path),
                                           "artifact": _load_spec(raw["artifact"])})
        elif is_external(value):
            raw = ctx.raw_inputs[value.reprise_input_key()]
            input_hashes[pname] = raw["content_hash"]
            task_inputs[pname] = ("external", raw["rebuild"])
        else:
            params[pname] = value
            task_inputs[pname] = ("value", value)
    fp = ctx.fps[node.name]
    seed = step_seed(ctx.seed, node.name)
    parts = {
        "version": CACHE_FORMAT_VERSION,
        "step": node.name,
        "code": fp.hash,
        "params": params,
        "inputs": input_hashes,
        "env": step_scope(fp.distributions),
        "seed": seed,
    }
    key = hash_value(parts)
    step_ = node.step
    task = Task(node=node.name, module=step_.module, qualname=step_.qualname,
                module_file=module_file(step_.module), inputs=task_inputs, seed=seed,
                artifacts_url=str(ctx.ws.config.artifacts_url), sys_path=ctx.sys_path,
                run_id=ctx.run.id, scope=parts["env"], watch=ctx.watch, code=ctx.code,
                resources=step_.resources, retries=step_.retries,
                artifacts_options=ctx.ws.config.artifacts_options)
    return key, task, parts


def _load_spec(out: dict[str, Any]) -> dict[str, Any]:
    return {"hash": out["hash"], "materializer": out["materializer"],
            "meta": out.get("meta") or {}}


def _output(ctx: _RunContext, ref: StepOutput) -> dict[str, Any]:
    """The stored record of upstream output ``ref``."""
    return next(o for o in ctx.states[ref.node].outputs if o["name"] == ref.name)


def _inputs_record(ctx: _RunContext, node: Node) -> list[dict[str, Any]]:
    out = []
    for pname, value in node.inputs.items():
        if isinstance(value, StepOutput):
            out.append({"name": pname, "hash": _output(ctx, value)["hash"]})
        elif is_gather(value):
            out.extend({"name": f"{pname}[{i}]", "hash": _output(ctx, v)["hash"]}
                       for i, v in enumerate(value))
        elif isinstance(value, PathInput):
            raw = ctx.raw_inputs[str(value.path)]
            out.append({"name": pname, **raw["artifact"], "source": str(value.path)})
        elif is_external(value):
            raw = ctx.raw_inputs[value.reprise_input_key()]
            out.append({"name": pname, **raw["artifact"], "source": raw["source"]})
    return out


def _stale(ctx: _RunContext, entry: dict[str, Any]) -> list[str]:
    """Why a cache entry no longer holds because of what its step read (empty: it holds).

    With the watch on, an entry written without it is a miss: what that execution read
    is unknown (the cache fails toward recomputing)."""
    reads = entry.get("reads")
    if reads is None:
        return ["its reads were not watched"] if ctx.watch is not None else []
    if not reads.get("files") and not reads.get("env"):
        return []
    key = (ctx.watch.key if ctx.watch is not None
           else read_key(ctx.ws.config.workspace_dir / "cache"))
    return stale_reads(reads, ctx.hasher, key)


def _stale_note(stale: list[str]) -> str:
    if not stale:
        return ""
    return stale[0] + (f" (+{len(stale) - 1} more)" if len(stale) > 1 else "")


def _reuse(ctx: _RunContext, node: Node, entry: dict[str, Any], parts: dict[str, Any]) -> None:
    st = ctx.states[node.name]
    st.status, st.outputs = "cached", entry["outputs"]
    st.reused_from = entry.get("step_run_id")
    st.saved = float(entry.get("duration") or 0.0)
    st.metrics = [tuple(m) for m in entry.get("metrics", [])]  # type: ignore[misc]
    st.step_run_id = new_id()
    st.reads = entry.get("reads") or {}
    ctx.run.record_step({
        "id": st.step_run_id, "step_name": node.name, "cache_key": st.key, "status": "cached",
        "reused_from": st.reused_from, "started_at": time.time(), "ended_at": time.time(),
        "duration": 0.0, "seed": parts["seed"], "code_hash": parts["code"],
        "details": {"key_parts": parts, "callsite": node.callsite,
                    "original_run": entry.get("run_id"),
                    "requires": entry.get("requires") or {}, "reads": st.reads},
        "inputs": _inputs_record(ctx, node), "outputs": st.outputs})
    _log_step_metrics(ctx, node.name, st.metrics)
    if ctx.progress is not None:
        ctx.progress.update(node.name, "cached", duration=st.saved)


def _finish(ctx: _RunContext, node: Node, key: str, task: Task, parts: dict[str, Any],
            res: TaskResult) -> None:
    st = ctx.states[node.name]
    st.duration, st.metrics, st.step_run_id = res.duration, res.metrics, new_id()
    ok = res.error is None
    st.status = "done" if ok else "failed"
    st.outputs = [{**o, "created": time.time()} for o in res.outputs] if ok else []
    ctx.store.pin(o["hash"] for o in st.outputs)  # a worker's pins end with the worker
    st.error = res.error
    st.reads = res.reads or {}
    record = {
        "id": st.step_run_id, "step_name": node.name, "cache_key": key,
        "status": "executed" if ok else "failed", "started_at": res.started_at,
        "ended_at": res.ended_at, "duration": res.duration, "energy_joules": res.energy_joules,
        "error": res.error, "seed": task.seed, "code_hash": parts["code"],
        "details": {"key_parts": parts, "callsite": node.callsite, "attempts": st.attempts,
                    "pid": res.pid, "requires": res.requires, "reads": st.reads,
                    **({"rerun_because": st.rerun_because} if st.rerun_because else {})},
        "inputs": _inputs_record(ctx, node), "outputs": st.outputs,
    }
    ctx.run.record_step(record)
    _log_step_metrics(ctx, node.name, res.metrics)  # a failed step's too: say why it failed
    if ok:
        warn_undeclared_reads(node.name, st.reads)
        if node.step.cache:
            entry = {"step": node.name, "outputs": st.outputs, "metrics": res.metrics,
                     "duration": res.duration, "requires": res.requires,
                     "run_id": ctx.run.id, "step_run_id": st.step_run_id}
            if res.reads is not None:  # watched: the entry holds while these still do
                entry["reads"] = res.reads
            ctx.cache.put(key, entry)
    if ctx.progress is not None:
        ctx.progress.update(node.name, st.status, duration=res.duration,
                            note=(res.error_type or "") if not ok else "")


def _log_step_metrics(ctx: _RunContext, node: str, metrics: Iterable[Any]) -> None:
    for key, value, step in metrics:
        ctx.run.log_metric(f"{node}/{key}", value, step=step)


def _hash_path_inputs(graph: Graph, hasher: FileHasher, store: Any) -> dict[str, dict[str, Any]]:
    """Content hash of every File/Dir input, keeping a copy in the artifact store (so
    ``verify`` can replay from exactly these bytes and lineage ends at them)."""
    from reprise.store._materializers import save_object

    found: dict[str, Any] = {}
    for node in graph.nodes.values():
        for value in node.inputs.values():
            if isinstance(value, PathInput):
                found[str(value.path)] = value
    out: dict[str, dict[str, Any]] = {}
    for key, item in found.items():
        content = hasher.hash(item)
        if item.kind == "file" and store.exists(content):
            art = {"hash": content, "size": store.size(content), "kind": "file",
                   "materializer": "file", "meta": {"name": item.path.name}}
        else:
            art = save_object(store, Path(item.path)).to_dict()
        out[key] = {"content_hash": content, "artifact": art}
    return out


def _resolve_external_inputs(graph: Graph, ws: Any) -> dict[str, dict[str, Any]]:
    """Resolve inputs that live in the workspace (dataset versions, later registered
    models) once per run, so every step sees the same version however "latest" moves."""
    out: dict[str, dict[str, Any]] = {}
    for node in graph.nodes.values():
        for value in node.inputs.values():
            if is_external(value) and value.reprise_input_key() not in out:
                out[value.reprise_input_key()] = value.reprise_resolve(ws)
    return out


def _external_record(value: Any, raw: dict[str, dict[str, Any]]) -> dict[str, Any]:
    entry = raw.get(value.reprise_input_key())
    return {"$input": value.reprise_input_key(),
            "resolved": entry["source"] if entry else None,
            "hash": entry["content_hash"] if entry else None}


def _path_record(value: PathInput, raw: dict[str, dict[str, Any]]) -> dict[str, Any]:
    entry = raw.get(str(value.path))
    return {"$path": value.kind, "path": str(value.path),
            "hash": entry["content_hash"] if entry else None,
            "artifact": entry["artifact"]["hash"] if entry else None}


def _pipeline_ref(ws: Any, pipe: Pipeline, mod_file: str | None) -> str:
    if mod_file is None:
        return f"{pipe.module}:{pipe.name}"
    if "." in pipe.module:
        # A package's module: its relative imports need its name. Unless the package
        # holds the workspace: the snapshot, laid out from the root, cannot import it.
        from reprise.pipeline._walker import _import_folder

        folder = _import_folder(mod_file, pipe.module.split("."))
        if folder is not None and Path(folder).resolve() not in Path(ws.root).resolve().parents:
            return f"{pipe.module}:{pipe.func.__name__}"
    try:
        rel = Path(mod_file).relative_to(ws.root).as_posix()
    except ValueError:
        rel = mod_file
    return f"{rel}:{pipe.func.__name__}"


def _code_snapshot(ws: Any, pipe: Pipeline, fps: dict[str, Any], store: Any,
                   user_roots: list[str], mod_file: str | None) -> dict[str, Any]:
    """Store the pipeline's own source files (not third-party code) as one artifact:
    those its steps reach, and those of the pipeline function (its module, the modules
    its body uses, the packages they are in)."""
    from reprise.pipeline._fingerprint import code_fingerprint, in_path_order
    from reprise.pipeline._snapshot import snapshot_files

    files, folders = set(), set()
    for fp in [*fps.values(), code_fingerprint(pipe.func, user_roots=user_roots)]:
        files.update(fp.modules)
        folders.update(fp.import_paths)
    if mod_file:
        files.add(mod_file)
    return snapshot_files(sorted(files), Path(ws.root), store, in_path_order(folders))

