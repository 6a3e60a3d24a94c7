"""Trials as Ray tasks (``executor="ray"``): the runner the tuner uses in place of its
worker processes, on a local Ray or on a cluster.

Each trial is one Ray task that calls :func:`~reprise.tune._trial.run_trial`, as a
worker process does; the objective travels by value, packed once by
:func:`~reprise.tune._workers.pack_objective`, put once in Ray's object store and
unpacked once per Ray worker process. ``workers`` is the number of trials in flight;
Ray places them where a CPU is free. The task is a streaming generator: it yields a
"started" mark once the objective is loaded, then the trial's outcome, so that a task
whose process dies is told apart from one whose objective cannot load (as the worker
pool tells them apart), and a task that dies is reported as :class:`WorkerDied`: the
tuner fails and retries it, or re-runs it in place in reproducible mode. Ray's own
retries are off (``max_retries=0``): the study must record the failure.

Where the files are. A trial writes its run in the workspace folder (its journal, the
artifacts the objective logs) and, with the embedded store, the study's journal file in
it too. A Ray task on another machine sees that folder only where it is shared (NFS, a
shared volume). Rather than refuse every remote address (a cluster whose nodes mount
the workspace is a real set-up) or guess from addresses (a local head may have remote
nodes), the runner checks: it writes a token file with a random name in the workspace,
and every task looks for it before it runs anything. A task that cannot see it stops
the search with a :class:`UserError` (exit code 2) naming the node. This holds for a
PostgreSQL store too: its study is shared through the database, but the trial runs'
journals and local artifacts are still files of the workspace.

Ray is imported only here, and only when a search runs on it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import socket
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reprise.core.errors import UserError
from reprise.tune._trial import Objective, TrialOutcome, TrialTask, run_trial
from reprise.tune._workers import MAX_STARTUP_DEATHS, WorkerDied, _Started, _StartupFailed

__all__ = ["RayPool", "connect"]

CONNECT_TIMEOUT = 5.0  # seconds to reach the head before giving up

# the loaded objective of this Ray worker process: (payload digest, objective)
_LOADED: dict[str, Objective] = {}


@dataclass
class _NotShared:
    """The task's node cannot see the workspace folder."""

    host: str
    workspace: str


def _trial_task(payload: bytes, digest: str, task: TrialTask, token: str,
                sys_path: list[str], cwd: str) -> Iterator[Any]:
    """One trial, in a Ray worker process (a generator: Ray streams what it yields)."""
    if not _sees(token):
        yield _NotShared(socket.gethostname(), task.workspace)
        return
    for p in reversed(sys_path):  # the tuner's import path, where it exists on this node
        if p not in sys.path and os.path.isdir(p):
            sys.path.insert(0, p)
    if os.path.isdir(cwd):
        os.chdir(cwd)
    objective = _LOADED.get(digest)
    if objective is None:
        try:
            import cloudpickle
            import optuna

            optuna.logging.set_verbosity(optuna.logging.WARNING)
            objective = cloudpickle.loads(payload)
        except BaseException as exc:  # noqa: BLE001 - reported to the tuner, which stops
            yield _StartupFailed(f"{type(exc).__name__}: {exc}")
            return
        _LOADED.clear()
        _LOADED[digest] = objective
    yield _Started()
    yield run_trial(task, objective)


def _sees(token: str) -> bool:
    try:
        return Path(token).read_text() == Path(token).name
    except OSError:
        return False


def connect(address: str | None) -> None:
    """Connect this process to Ray at ``address`` (``auto``, ``HOST:PORT``,
    ``ray://HOST:PORT``), or start a local Ray when it is None and ``RAY_ADDRESS`` is
    unset. A process already connected stays on its cluster (as Ray Tune does)."""
    from reprise.pipeline._ray import check_ray_address, stay_on_loopback

    stay_on_loopback(address)  # before Ray is imported: it reads the setting then
    
    try:
        import ray
    except ImportError:
        raise UserError("executor='ray' needs Ray: pip install 'reprise-ml[ray]'") from None
    if ray.is_initialized():
        now = ray.get_runtime_context().gcs_address
        if address not in (None, "auto") and _hostport(address) not in (None, _hostport(now)):
            raise UserError(f"this process is already connected to the Ray cluster at {now}; "
                            f"it cannot also run trials on {address!r} (one cluster per "
                            "process): run the search from another process")
        return
    if address not in (None, "auto"):  # refused in seconds, not retried for minutes
        check_ray_address(address, CONNECT_TIMEOUT)
    kw: dict[str, Any] = {}
    if address is None and not os.environ.get("RAY_ADDRESS"):
        kw["include_dashboard"] = False  # a local Ray for this search: nothing more to serve
    try:
        ray.init(address=address, **kw)
    except (ConnectionError, ValueError, RuntimeError) as exc:
        raise UserError(f"cannot connect to the Ray cluster at {address!r}: {exc}. Give its "
                        "address as HOST:PORT of the head (ray start --head prints it), "
                        "'auto' for a cluster started on this machine, or ray://HOST:PORT "
                        "for Ray Client") from None


def _hostport(address: str | None) -> tuple[str, int] | None:
    if not address or address == "auto":
        return None
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        return host.strip("[]"), int(port)
    except ValueError:
        return None


_DIED = ("WorkerCrashedError", "NodeDiedError", "OutOfMemoryError", "LocalRayletDiedError",
         "ObjectLostError", "TaskCancelledError")


def _died(ray: Any) -> tuple[type[BaseException], ...]:
    """Ray's errors for a task whose process (or node) went away."""
    return tuple(getattr(ray.exceptions, n) for n in _DIED if hasattr(ray.exceptions, n))


class RayPool:
    """Up to ``size`` trials in flight as Ray tasks; the runner interface of
    :class:`~reprise.tune._workers.WorkerPool`."""

    def __init__(self, size: int, payload: bytes, workspace_dir: Path,
                 address: str | None) -> None:
        import ray

        connect(address)
        self.size = size
        self._digest = hashlib.sha256(payload).hexdigest()
        self._payload = ray.put(payload)
        folder = workspace_dir / "tune"
        folder.mkdir(parents=True, exist_ok=True)
        name = f"ray-{secrets.token_hex(8)}"
        self._token = folder / name
        from reprise.core._atomic import atomic_write_bytes

        atomic_write_bytes(self._token, name.encode())
        # Backpressure of one object: the task's "started" mark must reach this process
        # before the objective runs. Ray reports what a generator yields asynchronously, so
        # a task that dies at once (an objective that SIGKILLs or is OOM-killed early) could
        # die before its mark was sent, and a trial death would count as a death at start-up
        # (measured: 13 of 30 such marks lost without it, none with it). With it, the task
        # waits at its first yield until the mark is read here, which wait() does as soon
        # as it is ready.
        options: dict[str, Any] = {"num_cpus": 1, "max_retries": 0,
                                   "num_returns": "streaming",
                                   "_generator_backpressure_num_objects": 1}  # (private)
        self._remote = ray.remote(**options)(_trial_task)
        self._flight: dict[Any, tuple[TrialTask, bool]] = {}  # generator -> (task, started)
        self._startup_deaths = 0

    def idle(self) -> int:
        return self.size - len(self._flight)

    def busy(self) -> int:
        return len(self._flight)

    def submit(self, task: TrialTask) -> None:
        gen = self._remote.remote(self._payload, self._digest, task, str(self._token),
                                  [p for p in sys.path if p], os.getcwd())
        self._flight[gen] = (task, False)

    def wait(self, timeout: float | None) -> Iterator[TrialOutcome | WorkerDied]:
        """Outcomes (and deaths) of the trials that finish within ``timeout`` seconds."""
        import ray

        deadline = None if timeout is None else time.monotonic() + timeout
        while self._flight:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _ = ray.wait(list(self._flight), num_returns=1, timeout=left)
            if not ready:
                return
            ready, _ = ray.wait(list(self._flight), num_returns=len(self._flight), timeout=0)
            done = False
            for gen in ready:
                item = self._next(gen)
                if item is not None:
                    done = True
                    yield item
            if done:
                return

    def _next(self, gen: Any) -> TrialOutcome | WorkerDied | None:
        """What the task ``gen`` sent: an outcome, its death, or None (it has started)."""
        import ray

        task, started = self._flight[gen]
        try:
            item = ray.get(next(gen))
        except StopIteration:  # a finished stream says nothing more; cannot happen before
            item = None        # its outcome, which ends the task's part here
        except ray.exceptions.RayTaskError as exc:  # run_trial itself failed: not a death
            del self._flight[gen]
            raise UserError(f"trial {task.number} failed on the Ray cluster outside its "
                            f"objective: {exc}") from None
        except _died(ray) as exc:
            del self._flight[gen]
            if not started:
                self._count_startup_death(exc)
            return WorkerDied(task, None, f"its Ray task's process died ({type(exc).__name__})")
        if isinstance(item, _Started):
            self._flight[gen] = (task, True)
            return None
        del self._flight[gen]
        if isinstance(item, _NotShared):
            raise UserError(
                f"a trial ran on Ray node {item.host!r}, which cannot see the workspace "
                f"{item.workspace}: trials write their runs (and, with the embedded store, "
                "the study's journal) in the workspace folder, so on Ray every node must "
                "mount it at the same path. Share the folder with the nodes, or run the "
                "search with local workers (--executor local); tuners on several machines "
                "can share one study through a PostgreSQL store (REPRISE_STORE_URL)")
        if isinstance(item, _StartupFailed):
            raise UserError(
                f"a Ray task could not load the objective: {item.error}. The objective is "
                "sent by value, but the modules it imports must be importable on the Ray "
                "nodes too (same Python packages; sys.path entries of this process are "
                "added where they exist); fix that, or use local workers")
        if item is None:
            return WorkerDied(task, None, "its Ray task ended without an outcome")
        return item  # type: ignore[no-any-return]

    def _count_startup_death(self, exc: BaseException) -> None:
        self._startup_deaths += 1
        if self._startup_deaths >= MAX_STARTUP_DEATHS:
            raise UserError(
                f"Ray tasks died before loading the objective {self._startup_deaths} times "
                f"(last: {type(exc).__name__}) before running any trial; run with local "
                "workers (or workers=1) to see the error in this process")

    def close(self, *, kill: bool = False) -> None:
        """Drop the tasks in flight (killed with ``kill``: Ray ends their processes) and
        the workspace token. Ray stays connected for this process's later searches."""
        import ray

        if kill:
            for gen in list(self._flight):
                with contextlib.suppress(Exception):
                    ray.cancel(gen, force=True)
        self._flight.clear()
        with contextlib.suppress(OSError):
            self._token.unlink()
