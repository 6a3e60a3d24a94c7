"""Worker processes get the objective by value, and a worker that cannot start stops
the study with a clear error instead of being respawned without end."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import reprise
from reprise.core.errors import UserError
from reprise.tune import tune
from reprise.tune._workers import MAX_STARTUP_DEATHS
from tests.tune import _objectives as obj

SPACE = {"x": {"low": -5.0, "high": 5.0}}

# an objective defined in `python -c` (as in a notebook cell or a REPL): workers
# cannot import it by name from their own __main__
INLINE = {
    "def": "def objective(p):\n    return (p['x'] - 1.0) ** 2\n",
    "lambda": "objective = lambda p: (p['x'] - 1.0) ** 2\n",
}
RUN = ("import sys, reprise\n"
       "ws = reprise.open_workspace(sys.argv[1])\n"
       "res = reprise.tune(objective, {'x': (-2.0, 2.0)}, n_trials=3, workers=2, study='s',\n"
       "                   workspace=ws, pruner=None)\n"
       "print('COUNTS', res.counts['complete'], res.counts['failed'])\n")


@pytest.mark.parametrize("kind", sorted(INLINE))
def test_an_objective_from_python_c_runs_in_two_workers(workspace: Any, kind: str) -> None:
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", INLINE[kind] + RUN, str(workspace.root)],
                          capture_output=True, text=True, timeout=120, cwd=workspace.root,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "COUNTS 3 0" in proc.stdout, proc.stdout + proc.stderr[-3000:]
    # a bound against a hang, not a timing: two workers importing the stack took over
    # 30 s on this 2-core machine under load (they start in about 5 s when it is quiet)
    assert time.monotonic() - t0 < 120


def test_workers_that_die_at_start_up_stop_the_study(workspace: Any,
                                                     capfd: pytest.CaptureFixture[str]) -> None:
    t0 = time.monotonic()
    with pytest.raises(UserError, match=f"died at start-up {MAX_STARTUP_DEATHS} times"):
        tune(obj.DiesAtStartup(), SPACE, n_trials=20, workers=2, workspace=workspace,
             pruner=None, study="dies")
    assert time.monotonic() - t0 < 30
    trials = reprise.tune.load_study(workspace, "dies").trials
    assert len(trials) <= MAX_STARTUP_DEATHS + 1  # no trial ran, and no endless retries


@pytest.mark.parametrize("reproducible", [False, True])
def test_a_worker_that_cannot_load_the_objective_stops_the_study(
        workspace: Any, reproducible: bool, capfd: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(UserError, match="could not load the objective: RuntimeError: this "
                                        "objective only loads in the tuner's process"):
        tune(obj.FailsToLoad(), SPACE, n_trials=20, workers=2, workspace=workspace,
             pruner=None, reproducible=reproducible, batch_size=4)


def test_an_objective_that_cannot_be_sent_is_refused_before_any_trial(workspace: Any) -> None:
    lock = threading.Lock()

    def locked(p: dict[str, Any]) -> float:
        with lock:
            return obj.quad(p)

    with pytest.raises(UserError, match="cannot be serialized.*workers=1"):
        tune(locked, SPACE, n_trials=2, workers=2, workspace=workspace)
    assert reprise.tune.list_studies(workspace) == []
    assert tune(locked, SPACE, n_trials=2, workspace=workspace).counts["complete"] == 2


def test_a_worker_killed_mid_trial_is_not_a_start_up_death(workspace: Any, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    monkeypatch.setenv("REPRISE_TEST_MARKERS", str(tmp_path))
    res = tune(obj.dies_once, SPACE, n_trials=8, workers=2, workspace=workspace, pruner=None,
               seed=3)
    assert res.counts["complete"] == 8 and res.counts["failed"] >= MAX_STARTUP_DEATHS
