"""Module-level tracking API: workspaces, the active-run stack, ``reprise.log_metric``."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from reprise.core._config import create_workspace, find_workspace
from reprise.core._types import ArtifactRecord, RunKind
from reprise.core.errors import NoActiveRunError, UserError
from reprise.store._workspace import Workspace
from reprise.tracking._run import Run

__all__ = [
    "active_run",
    "environment",
    "init",
    "log_artifact",
    "log_metric",
    "log_metrics",
    "log_param",
    "log_params",
    "open_workspace",
    "resolve_workspace",
    "set_tag",
    "start_run",
]

_workspaces: dict[Path, Workspace] = {}
_env_cache: dict[Path, tuple[str, dict[str, Any]]] = {}
_lock = threading.Lock()


class _ActiveRuns:
    """The process-wide stack of active runs (innermost last)."""

    def __init__(self) -> None:
        self._stack: list[Run] = []

    def push(self, run: Run) -> None:
        self._stack.append(run)

    def remove(self, run: Run) -> None:
        if run in self._stack:
            self._stack.remove(run)

    def top(self) -> Run | None:
        return self._stack[-1] if self._stack else None


_active = _ActiveRuns()


def open_workspace(root: str | os.PathLike[str] | None = None) -> Workspace:
    """The workspace at ``root`` (found upwards from the current directory when None).

    One :class:`Workspace` object per folder per process.
    """
    base = find_workspace(root) if root is not None else find_workspace()
    with _lock:
        ws = _workspaces.get(base)
        if ws is not None and not ws.is_current():  # removed and created again
            ws.close()
            _env_cache.pop(ws.root, None)
            ws = None
        if ws is None:
            ws = _workspaces[base] = Workspace.open(base)
        return ws


def resolve_workspace(workspace: Workspace | str | os.PathLike[str] | None) -> Workspace:
    """What a public function's ``workspace=`` argument means: an open
    :class:`Workspace` as it is, a path as the workspace at (or above) that folder,
    None as the one found upwards from the current directory.

    Example:
        >>> import reprise, tempfile
        >>> ws = reprise.init(tempfile.mkdtemp())
        >>> resolve_workspace(str(ws.root)) is ws
        True
    """
    if isinstance(workspace, Workspace):
        return workspace
    if workspace is None or isinstance(workspace, str | os.PathLike):
        return open_workspace(workspace)
    raise UserError(f"workspace must be a Workspace, a path or None; got a "
                    f"{type(workspace).__name__}")


def init(root: str | os.PathLike[str] | None = None) -> Workspace:
    """Create a workspace at ``root`` (default: the current directory) and open it.

    Example:
        >>> import reprise, tempfile
        >>> ws = reprise.init(tempfile.mkdtemp())
        >>> (ws.root / ".reprise").is_dir()
        True
    """
    return open_workspace(create_workspace(root))


def environment(ws: Workspace) -> tuple[str, dict[str, Any]]:
    """This process's environment fingerprint and its hash (computed once per process)."""
    from reprise.env import fingerprint, fingerprint_hash

    with _lock:
        cached = _env_cache.get(ws.root)
        if cached is None:
            fp = fingerprint(ws.root)
            cached = _env_cache[ws.root] = (fingerprint_hash(fp), fp)
        return cached


def start_run(
    name: str | None = None,
    params: dict[str, Any] | None = None,
    *,
    tags: dict[str, Any] | None = None,
    kind: RunKind | str = RunKind.RUN,
    parent: Run | str | None = None,
    seed: int | None = None,
    workspace: Workspace | str | os.PathLike[str] | None = None,
    system_metrics_interval: float | None = None,
    defer_ingest: bool = False,
    run_id: str | None = None,
) -> Run:
    """Start a run; use it as a context manager so it ends with the right status.

    A run started while another is active becomes its child unless ``parent`` is
    given. ``run_id`` takes an id made beforehand with ``reprise.core._ids.new_id``
    (a tuner records a trial's run before the trial starts). The run ends ``finished``
    on a clean exit, ``failed`` (with the traceback) on an exception, ``killed`` on
    Ctrl-C; a process killed outright is marked ``killed`` by the next command that
    opens the workspace.

    Example:
        >>> import reprise, tempfile
        >>> ws = reprise.init(tempfile.mkdtemp())
        >>> with reprise.start_run("train", params={"lr": 1e-3}, workspace=ws) as run:
        ...     for step in range(3):
        ...         reprise.log_metric("loss", 1.0 / (step + 1))
        >>> [p.value for p in ws.metadata.get_metrics(run.id, "loss")]
        [1.0, 0.5, 0.3333333333333333]
    """
    ws = resolve_workspace(workspace)
    if parent is None:
        parent = _active.top()
    parent_id = parent.id if isinstance(parent, Run) else parent
    run = Run(ws, name=name or "run", kind=RunKind(kind), parent_id=parent_id, seed=seed,
              env=environment(ws), system_metrics_interval=system_metrics_interval,
              defer_ingest=defer_ingest, run_id=run_id)
    try:
        if params:
            run.log_params(params)
        if tags:
            run.set_tags(tags)
    except BaseException as exc:
        run.end("failed", error=str(exc))
        raise
    _active.push(run)
    return run


def active_run() -> Run | None:
    """The innermost active run, or None."""
    return _active.top()


def _require() -> Run:
    run = _active.top()
    if run is None:
        raise NoActiveRunError(
            "no active run; wrap the code in `with reprise.start_run(name=...):`."
        )
    return run


def log_metric(key: str, value: float, step: int | None = None) -> None:
    """Log a metric point to the active run."""
    _require().log_metric(key, value, step)


def log_metrics(metrics: dict[str, float], step: int | None = None) -> None:
    _require().log_metrics(metrics, step)


def log_param(key: str, value: Any) -> None:
    _require().log_param(key, value)


def log_params(params: dict[str, Any]) -> None:
    _require().log_params(params)


def set_tag(key: str, value: Any) -> None:
    _require().set_tag(key, value)


def log_artifact(obj: Any, name: str | None = None) -> ArtifactRecord:
    return _require().log_artifact(obj, name)
