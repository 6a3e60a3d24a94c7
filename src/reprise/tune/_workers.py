"""Worker processes that run trials, one at a time each.

Written on ``multiprocessing`` (spawn) rather than ``ProcessPoolExecutor``
because the tuner must know which trial a worker was running when it dies: a
pool marks itself broken and fails every pending future when one worker is
killed, and ``multiprocessing.Pool`` silently loses the task. Here each worker
has its own pipe; a dead worker's sentinel tells the tuner which trial to fail
and retry, and a fresh worker takes its place.
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

from reprise.tune._trial import Objective, TrialOutcome, TrialTask, run_trial

__all__ = ["WorkerDied", "WorkerPool"]


@dataclass
class WorkerDied:
    """A worker exited while running ``task``."""

    task: TrialTask
    exitcode: int | None


def _worker_main(conn: Any, objective: Objective, sys_path: list[str], cwd: str) -> None:
    # Ctrl-C reaches the whole process group; the tuner decides what happens to workers.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for p in reversed(sys_path):
        if p not in sys.path:
            sys.path.insert(0, p)
    os.chdir(cwd)
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    while True:
        try:
            task = conn.recv()
        except EOFError:
            return
        if task is None:
            return
        conn.send(run_trial(task, objective))


class _Worker:
    def __init__(self, ctx: Any, objective: Objective) -> None:
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, daemon=True,
                                args=(child, objective, [p for p in sys.path if p],
                                      os.getcwd()))
        self.proc.start()
        child.close()
        self.task: TrialTask | None = None


class WorkerPool:
    """``size`` worker processes running ``objective``."""

    def __init__(self, size: int, objective: Objective) -> None:
        self._ctx = multiprocessing.get_context("spawn")
        self._objective = objective
        self._workers = [_Worker(self._ctx, objective) for _ in range(size)]

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
            try:
                if w.conn.poll():
                    outcome = w.conn.recv()
                    w.task = None
                    yield outcome
                    continue
            except (EOFError, OSError):
                pass
            if not w.proc.is_alive():
                task, w.task = w.task, None
                assert task is not None
                w.proc.join(timeout=1)
                self._workers[i] = _Worker(self._ctx, self._objective)
                yield WorkerDied(task, w.proc.exitcode)

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
