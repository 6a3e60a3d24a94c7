"""Executors: where tasks run. The interface is two methods, so a Ray executor
(or any other) plugs in without touching step code:

* ``submit(task) -> concurrent.futures.Future[TaskResult]``
* ``shutdown(cancel: bool)``

``LocalExecutor`` runs a task in this process when it is the only one ready
(no start-up cost, the common case for a chain of steps) and in a pool of
``spawn``-ed worker processes when independent branches are ready together.
``RayExecutor`` (``._ray``, ``--executor ray``) runs each task as a Ray task on a
cluster, placed by the step's declared resources, with the run's code snapshot
shipped to the worker (``._ship``).
"""

from __future__ import annotations

import abc
import contextlib
import multiprocessing
import os
import signal
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any

from reprise.core._orphan import exit_with_parent
from reprise.pipeline._execute import Task, TaskResult, execute_task

__all__ = ["EXECUTORS", "Executor", "InProcessExecutor", "LocalExecutor", "open_executor"]

EXECUTORS = ("local", "ray")


class Executor(abc.ABC):
    """Runs tasks; ``parallel`` says whether submitting several at once helps."""

    parallel = False

    @abc.abstractmethod
    def submit(self, task: Task, *, alone: bool = False) -> Future[TaskResult]:
        """Start ``task``; ``alone`` says no other task is ready or running."""

    @abc.abstractmethod
    def shutdown(self, *, cancel: bool = False) -> None:
        """Release workers; with ``cancel``, stop running tasks too."""


class InProcessExecutor(Executor):
    """Runs each task synchronously in this process (``--workers 1``, debugging)."""

    def __init__(self, store: Any = None) -> None:
        self.store = store

    def submit(self, task: Task, *, alone: bool = False) -> Future[TaskResult]:
        fut: Future[TaskResult] = Future()
        fut.set_result(execute_task(task, self.store))
        return fut

    def shutdown(self, *, cancel: bool = False) -> None:
        return None


def _worker_init(parent_pid: int) -> None:
    # A killed parent must not leave workers blocked forever on the call queue (whose
    # pipe they hold both ends of, so they never see end-of-file).
    exit_with_parent(parent_pid)
    # Ctrl-C goes to the whole process group; the parent decides what happens to
    # workers (it terminates them), so workers ignore SIGINT themselves.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class LocalExecutor(Executor):
    """In-process for a lone ready task, a process pool for parallel branches."""

    parallel = True

    def __init__(self, workers: int | None = None, store: Any = None) -> None:
        self.workers = max(1, workers or os.cpu_count() or 1)
        self._inproc = InProcessExecutor(store)
        self._pool: ProcessPoolExecutor | None = None

    def submit(self, task: Task, *, alone: bool = False) -> Future[TaskResult]:
        if alone or self.workers == 1:
            return self._inproc.submit(task)
        if self._pool is None:
            self._pool = ProcessPoolExecutor(
                max_workers=self.workers, mp_context=multiprocessing.get_context("spawn"),
                initializer=_worker_init, initargs=(os.getpid(),))
        return self._pool.submit(execute_task, task)

    def shutdown(self, *, cancel: bool = False) -> None:
        pool, self._pool = self._pool, None
        if pool is None:
            return
        if cancel:
            procs = list(getattr(pool, "_processes", {}).values())
            pool.shutdown(wait=False, cancel_futures=True)
            for p in procs:  # a running step is stopped, not waited for
                with contextlib.suppress(Exception):
                    p.kill()
            for p in procs:
                with contextlib.suppress(Exception):
                    p.join(timeout=5)
        else:
            pool.shutdown(wait=True)


def open_executor(kind: str | None = None, *, address: str | None = None,
                  workers: int | None = None, store: Any = None) -> Executor:
    """The executor named ``kind`` (``local``, the default, or ``ray``); ``address``
    is the Ray cluster's (see :class:`~reprise.pipeline._ray.RayExecutor`)."""
    from reprise.core.errors import UserError

    kind = kind or "local"
    if kind not in EXECUTORS:
        raise UserError(f"executor {kind!r} does not exist; use one of {', '.join(EXECUTORS)}.")
    if kind == "ray":
        from reprise.pipeline._ray import RayExecutor

        return RayExecutor(address, store=store)
    if address:
        raise UserError("a Ray address was given with the local executor; add --executor ray "
                        "(or set kind = \"ray\" under [executor] in .reprise/config.toml).")
    return LocalExecutor(workers, store=store)
