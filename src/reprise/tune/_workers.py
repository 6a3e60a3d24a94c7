"""Worker processes that run trials, one at a time each.

Written on ``multiprocessing`` (spawn) rather than ``ProcessPoolExecutor``
because the tuner must know which trial a worker was running when it dies: a
pool marks itself broken and fails every pending future when one worker is
killed, and ``multiprocessing.Pool`` silently loses the task. Here each worker
has its own pipe; a dead worker's sentinel tells the tuner which trial to fail
and retry, and a fresh worker takes its place.

The objective travels by value (cloudpickle, as joblib and Ray send functions),
so an objective defined in ``python -c``, a notebook cell, a REPL or a lambda
runs in the workers too; this is transport between live processes, never
storage. A worker says it has started once the objective is loaded; one that
cannot load it reports why and the study fails at once, and one that dies
before it started is counted: after ``MAX_STARTUP_DEATHS`` of them the study
fails with an error instead of respawning workers without end.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from reprise.core._orphan import exit_with_parent
from reprise.core.errors import UserError
from reprise.tune._trial import Objective, TrialOutcome, TrialTask, run_trial

__all__ = ["MAX_STARTUP_DEATHS", "WorkerDied", "WorkerPool", "pack_objective"]

MAX_STARTUP_DEATHS = 3


def pack_objective(objective: Objective) -> bytes:
    """``objective`` as bytes for the worker processes; a clear error when it cannot go."""
    import cloudpickle

    try:
        return bytes(cloudpickle.dumps(objective))
    except Exception as exc:  # noqa: BLE001 - any pickling failure means the same to the user
        raise UserError(f"with workers > 1 (or on Ray) the objective {objective.name!r} is sent "
                        "to worker processes, but it cannot be serialized: "
                        f"{type(exc).__name__}: {exc}. "
                        "Keep what it captures (locks, open files, connections) out of its "
                        "closure and create it inside the function, or use workers=1"
                        ) from exc


@dataclass
class _Started:
    """A worker's first message: the objective is loaded."""


@dataclass
class _StartupFailed:
    """A worker's first message when the objective could not be loaded."""

    error: str


@dataclass
class WorkerDied:
    """A worker exited while running ``task`` (``reason``: how, when not an exit code)."""

    task: TrialTask
    exitcode: int | None
    reason: str | None = None


def _worker_main(conn: Any, payload: bytes, sys_path: list[str], cwd: str,
                 parent_pid: int) -> None:
    # A trial runs to its end before the worker reads its pipe again: without this, a
    # killed tuner would leave workers computing (and then blocked) for a whole trial.
    exit_with_parent(parent_pid)
    # Ctrl-C reaches the whole process group; the tuner decides what happens to workers.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for p in reversed(sys_path):
        if p not in sys.path:
            sys.path.insert(0, p)
    os.chdir(cwd)
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        import cloudpickle

        objective = cloudpickle.loads(payload)
    except BaseException as exc:  # noqa: BLE001 - reported to the tuner, which stops
        conn.send(_StartupFailed(f"{type(exc).__name__}: {exc}"))
        return
    conn.send(_Started())
    while True:
        try:
            task = conn.recv()
        except EOFError:
            return
        if task is None:
            return
        conn.send(run_trial(task, objective))


class _Worker:
    def __init__(self, ctx: Any, payload: bytes) -> None:
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, daemon=True,
                                args=(child, payload, [p for p in sys.path if p],
                                      os.getcwd(), os.getpid()))
        self.proc.start()
        child.close()
        self.task: TrialTask | None = None
        self.started = False

    def receive(self) -> TrialOutcome | None:
        """The trial's outcome if it has come; notes the start-up message on the way."""
        try:
            while self.conn.poll():
                msg = self.conn.recv()
                if isinstance(msg, _Started):
                    self.started = True
                elif isinstance(msg, _StartupFailed):
                    raise UserError(
                        f"a worker process could not load the objective: {msg.error}. The "
                        "objective is sent to workers by value, but the modules it imports "
                        "must be importable there too (same Python, sys.path and working "
                        "directory); fix that, or use workers=1")
                else:
                    return msg  # type: ignore[no-any-return]
        except (EOFError, OSError):
            pass
        return None


class WorkerPool:
    """``size`` worker processes running the objective packed by :func:`pack_objective`."""

    def __init__(self, size: int, payload: bytes) -> None:
        self._ctx = multiprocessing.get_context("spawn")
        self._payload = payload
        self._startup_deaths = 0
        self._workers = [_Worker(self._ctx, payload) for _ in range(size)]

    def idle(self) -> int:
        return sum(w.task is None for w in self._workers)

    def busy(self) -> int:
        return len(self._workers) - self.idle()

    def submit(self, task: TrialTask) -> None:
        worker = next(w for w in self._workers if w.task is None)
        worker.task = task
        worker.conn.send(task)

    def wait(self, timeout: float | None) -> Iterator[TrialOutcome | WorkerDied]:
        """Outcomes (and deaths) of the trials that finish within ``timeout`` seconds."""
        busy = [w for w in self._workers if w.task is not None]
        waitables: list[Any] = [w.conn for w in busy] + [w.proc.sentinel for w in busy]
        ready = set(multiprocessing.connection.wait(waitables, timeout))
        for i, w in enumerate(list(self._workers)):
            if w.task is None or (w.conn not in ready and w.proc.sentinel not in ready):
                continue
            outcome = w.receive()
            if outcome is not None:
                w.task = None
                yield outcome
                continue
            if not w.proc.is_alive():
                task, w.task = w.task, None
                assert task is not None
                w.proc.join(timeout=1)
                self._count_startup_death(w)
                self._workers[i] = _Worker(self._ctx, self._payload)
                yield WorkerDied(task, w.proc.exitcode)

    def _count_startup_death(self, w: _Worker) -> None:
        if w.started:
            return
        self._startup_deaths += 1
        if self._startup_deaths >= MAX_STARTUP_DEATHS:
            raise UserError(
                f"worker processes died at start-up {self._startup_deaths} times (last exit "
                f"code {w.proc.exitcode}) before running any trial; their error is in the "
                "output above. A script that tunes with workers > 1 must guard the call "
                "with `if __name__ == '__main__':`; run with workers=1 to see the error in "
                "this process")

    def pids(self) -> list[int]:
        return [w.proc.pid for w in self._workers if w.proc.pid is not None]

    def close(self, *, kill: bool = False) -> None:
        for w in self._workers:
            try:
                if kill:
                    w.proc.kill()
                else:
                    w.conn.send(None)
            except (OSError, ValueError):
                pass
        for w in self._workers:
            w.proc.join(timeout=5 if not kill else 2)
            if w.proc.is_alive():
                w.proc.kill()
                w.proc.join(timeout=2)
            w.conn.close()
