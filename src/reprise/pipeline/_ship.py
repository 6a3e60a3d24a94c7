"""Running a task from its run's code snapshot, on a worker that cannot read the
driver's files (a Ray node on another machine).

The local executor's workers import the user's modules from the driver's own
folders (``Task.sys_path``). A remote worker cannot: the driver :func:`ship`-s the
task with the snapshot's hash instead (the snapshot is already in the artifact
store, which every worker reads), and the worker (:func:`run_shipped`):

1. fetches the snapshot's bytes and checks they hash to the recorded name (a
   tampered or substituted snapshot is refused), extracts them into a folder of its
   own and notes each file's hash;
2. forgets the modules of any other snapshot it ran before (a worker process runs
   many tasks, maybe of several runs) and puts this snapshot's folders first on
   ``sys.path``;
3. imports the step, then checks every module loaded from the snapshot folder
   against those hashes, and that the step's module came from there at all (Ray
   also puts the driver's working folder on a worker's ``sys.path``): a worker
   with other code refuses to run, so it never produces outputs under the
   snapshot's key.
"""

from __future__ import annotations

import atexit
import dataclasses
import io
import os
import shutil
import sys
import tarfile
import tempfile
import traceback
from pathlib import Path
from typing import Any

from reprise.core._hashing import hash_bytes, hash_file
from reprise.core.errors import ArtifactNotFoundError, IntegrityError, RepriseError
from reprise.pipeline._execute import Task, TaskResult, _resolve_function, execute_task

__all__ = ["SnapshotMismatchError", "localize_paths", "run_shipped", "ship"]


class SnapshotMismatchError(RepriseError):
    """The code a worker would run is not the run's code snapshot; it refuses to run."""


def ship(task: Task) -> Task:
    """On the driver: the task as a remote worker needs it (no driver paths; the
    step's module file as a path inside the snapshot)."""
    if task.code is None:
        raise ValueError(f"task {task.node!r} has no code snapshot to ship")
    from reprise.pipeline._snapshot import snapshot_path

    rel = (snapshot_path(Path(task.module_file), Path(task.code["root"]))
           if task.module_file else None)
    # the read watch's hash cache is a folder of the driver's workspace: a speed-up only,
    # and a path that may not exist (or not be writable) on the worker's machine
    from reprise.pipeline._reads import WatchSpec

    watch = (dataclasses.replace(task.watch, hash_cache=None)
             if isinstance(task.watch, WatchSpec) else task.watch)
    return dataclasses.replace(task, sys_path=[], module_file=None, watch=watch,
                               code={**task.code, "module_rel": rel})


@dataclasses.dataclass
class _Loaded:
    hash: str
    folder: Path
    manifest: dict[str, str]  # path inside the snapshot -> hash of its bytes
    paths: list[str]  # the folders put on sys.path


_current: _Loaded | None = None  # the snapshot this worker process imports from


def run_shipped(task: Task) -> TaskResult:
    """On the worker: run ``task`` with exactly its run's snapshotted code."""
    try:
        loaded = _enter(task)
        rel = (task.code or {}).get("module_rel")
        local = dataclasses.replace(
            task, sys_path=list(loaded.paths),
            module_file=str(loaded.folder / rel) if rel else None)
        func = _resolve_function(local)
        _check_imports(local, loaded, func)
        local = localize_paths(local, loaded.folder.parent / "inputs")
    except Exception as exc:  # the step never ran: report why, as a failed step
        return TaskResult(node=task.node, error="".join(traceback.format_exception(exc)),
                          error_type=type(exc).__name__)
    return execute_task(local)


def _enter(task: Task) -> _Loaded:
    global _current
    code = task.code or {}
    if _current is not None and _current.hash == code["hash"]:
        return _current
    if _current is not None:
        _forget(_current)
        _current = None
    _forget_module(task.module)
    _current = _fetch(task, code["hash"])
    sys.path[:0] = _current.paths
    return _current


def _fetch(task: Task, h: str) -> _Loaded:
    from reprise.pipeline._snapshot import snapshot_sys_path
    from reprise.store._artifacts import open_artifact_store

    store = open_artifact_store(task.artifacts_url, **task.artifacts_options)
    try:
        data = store.get_bytes(h, verify=True)
    except (IntegrityError, ArtifactNotFoundError) as exc:
        raise SnapshotMismatchError(
            f"step {task.node!r}: the run's code snapshot {h[:12]} in the artifact store is "
            f"not the snapshot the run recorded ({exc}); refusing to run other code under "
            "its cache key. Run `reprise fsck`, then run the pipeline again.") from exc
    base = Path(tempfile.gettempdir()) / "reprise-code"
    base.mkdir(parents=True, exist_ok=True)
    _sweep(base)
    folder = Path(tempfile.mkdtemp(prefix=f"{h[:12]}-{os.getpid()}-", dir=base)).resolve()
    atexit.register(shutil.rmtree, folder, True)  # Ray may kill the worker: see _sweep
    manifest: dict[str, str] = {}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        for member in tar.getmembers():
            if member.isreg():
                f = tar.extractfile(member)
                manifest[member.name] = hash_bytes(f.read() if f is not None else b"")
        tar.extractall(folder, filter="data")  # refuses absolute paths, '..', devices
    return _Loaded(h, folder, manifest, [str(p) for p in snapshot_sys_path(folder)])


def _sweep(base: Path) -> None:
    """Remove the snapshot folders of worker processes that are gone (Ray ends a job's
    workers with SIGKILL, so their exit handlers never run)."""
    for folder in base.iterdir():
        parts = folder.name.split("-")
        if len(parts) == 3 and parts[1].isdigit() and not _alive(int(parts[1])):
            shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def _forget(loaded: _Loaded) -> None:
    """Unload another snapshot's modules (and their registered steps) and its folders."""
    for name, mod in list(sys.modules.items()):
        if _inside(getattr(mod, "__file__", None), loaded.folder):
            _forget_module(name)
    sys.path[:] = [p for p in sys.path if p not in loaded.paths]
    shutil.rmtree(loaded.folder, ignore_errors=True)


def _forget_module(name: str) -> None:
    from reprise.pipeline._step import _REGISTRY

    sys.modules.pop(name, None)
    for key in [k for k in _REGISTRY if k[0] == name]:
        del _REGISTRY[key]


def _inside(file: str | None, folder: Path) -> bool:
    """Whether ``file`` is below ``folder`` (resolved). A string test: it runs for every
    loaded module on every task, and the snapshot's modules are imported by the
    resolved paths put on ``sys.path``, which contain no links."""
    if not file:
        return False
    return os.path.abspath(file).startswith(str(folder) + os.sep)


def _check_imports(task: Task, loaded: _Loaded, func: Any) -> None:
    """Every module imported from the snapshot folder holds the snapshot's bytes, and the
    step's own module is one of them."""
    root = loaded.folder
    step_file = getattr(sys.modules.get(func.__module__), "__file__", None)
    if task.module_file is not None and not _inside(step_file, root):
        raise SnapshotMismatchError(
            f"step {task.node!r}: its module {func.__module__!r} was imported from "
            f"{step_file}, not from the run's code snapshot {loaded.hash[:12]}; refusing to "
            "run it (a module of that name was already loaded, or shadows the snapshot).")
    for mod in list(sys.modules.values()):
        file = getattr(mod, "__file__", None)
        if not _inside(file, root):
            continue
        rel = Path(os.path.abspath(file)).relative_to(root).as_posix()  # type: ignore[arg-type]
        if loaded.manifest.get(rel) != hash_file(file):  # type: ignore[arg-type]
            raise SnapshotMismatchError(
                f"step {task.node!r}: {rel} on this worker differs from the run's code "
                f"snapshot {loaded.hash[:12]}; refusing to run other code under its cache key.")


def localize_paths(task: Task, base: Path) -> Task:
    """``File``/``Dir`` inputs that do not exist on this machine (the driver's files, on
    a node elsewhere), copied out of the artifact store, where the driver stored them
    when it hashed them: the step reads exactly the bytes its cache key names."""
    from reprise.store._artifacts import open_artifact_store
    from reprise.store._materializers import load_object

    inputs, store = dict(task.inputs), None
    for name, (kind, payload) in task.inputs.items():
        art = payload.get("artifact") if kind == "path" else None
        if art is None or os.path.exists(payload["path"]):
            continue
        store = store or open_artifact_store(task.artifacts_url, **task.artifacts_options)
        dest = base / art["hash"][:24] / (Path(payload["path"]).name or "input")
        if not dest.exists():
            base.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=".part-", dir=base))
            part = tmp / dest.name
            if payload["kind"] == "dir":
                load_object(store, art["hash"], art["materializer"], art.get("meta") or {},
                            dest=part)
            else:  # durable: later tasks reuse ``dest`` without verifying it again
                store.copy_to(art["hash"], part, verify=True)
            dest.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.replace(part, dest)  # whole or not at all: another task may race us here
            except OSError:
                if not dest.exists():
                    raise
            shutil.rmtree(tmp, ignore_errors=True)
        inputs[name] = ("path", {**payload, "path": str(dest)})
    return dataclasses.replace(task, inputs=inputs)
