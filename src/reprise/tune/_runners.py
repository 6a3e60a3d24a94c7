"""Where trials run, and how this tuner shows it is alive: in this process (``workers=1``),
in worker processes that get the objective by value, or as Ray tasks (``_ray``); the
heartbeat thread that marks the tuner's running trials as owned.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from reprise.tune._trial import (
    Objective,
    TrialOutcome,
    TrialTask,
    run_trial,
)

_OWNER, _RETRIED, _RETRY_OF, _BATCH = ("reprise_owner", "reprise_retried", "reprise_retry_of",
                                       "reprise_batch")


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class _Heartbeat:
    """Refreshes the heartbeat of this tuner's running trials every ``interval`` seconds:
    one system attribute per trial holds the owner (host, pid) and the last beat."""

    def __init__(self, storage: Any, interval: float) -> None:
        self.storage, self.interval = storage, interval
        self.me = {"host": socket.gethostname(), "pid": os.getpid()}
        self.ids: dict[int, str | None] = {}  # trial id -> its run id
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="reprise-tune-heartbeat",
                                        daemon=True)

    def __enter__(self) -> _Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def add(self, trial_id: int, run_id: str | None = None) -> None:
        with self._lock:
            self.ids[trial_id] = run_id
        self._write(trial_id, run_id)

    def _write(self, trial_id: int, run_id: str | None) -> None:
        self.storage.set_trial_system_attr(trial_id, _OWNER, {**self.me, "beat": time.time(),
                                                              "run": run_id})

    def discard(self, trial_id: int) -> None:
        with self._lock:
            self.ids.pop(trial_id, None)

    def _beat(self) -> None:
        # Beats are written under the lock: once discard() returns, no beat of that trial
        # can follow the trial's tell in the journal (Optuna refuses a journal in which this
        # process wrote to a finished trial, at every later sync).
        while not self._stop.wait(self.interval):
            with self._lock:
                for tid, run_id in list(self.ids.items()):
                    try:
                        self._write(tid, run_id)
                    except Exception:  # noqa: BLE001 - finished elsewhere; beat it no more
                        self.ids.pop(tid, None)


class _Inline:
    """Runs each trial in this process as it is submitted (``workers=1``)."""

    def __init__(self, objective: Objective, study: Any) -> None:
        self.objective, self.study = objective, study
        self.done: list[TrialOutcome] = []

    def idle(self) -> int:
        return 0 if self.done else 1

    def busy(self) -> int:
        return len(self.done)

    def submit(self, task: TrialTask) -> None:
        self.done.append(run_trial(task, self.objective, self.study))

    def wait(self, timeout: float | None) -> Iterator[TrialOutcome]:
        done, self.done = self.done, []
        yield from done

    def close(self, *, kill: bool = False) -> None:
        return None


def _pack(objective: Objective) -> bytes:
    from reprise.tune._workers import pack_objective

    return pack_objective(objective)


def _runner(settings: Any, objective: Objective, payload: bytes, study: Any,
            workspace_dir: Path) -> Any:
    if settings.executor == "ray":
        from reprise.tune._ray import RayPool

        return RayPool(settings.workers, payload, workspace_dir, settings.ray_address)
    if settings.workers == 1:
        return _Inline(objective, study)
    from reprise.tune._workers import WorkerPool

    return WorkerPool(settings.workers, payload)
