"""Pruning, parallel workers, reproducible parallel search, and dead trials: a killed
worker is retried at once; a killed tuner's trials are found by heartbeat and the study
resumes (to the very same trials in reproducible mode)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from reprise.tune import load_study, tune
from tests.tune import _objectives as obj

SPACE = {"x": {"low": -5.0, "high": 5.0}}
ROOT = Path(__file__).resolve().parents[2]


def test_median_pruning_stops_bad_trials_and_records_them(workspace: Any) -> None:
    res = tune(obj.curve, SPACE, n_trials=20, pruner="median", workspace=workspace, seed=2)
    assert res.counts["pruned"] >= 3 and res.counts["complete"] + res.counts["pruned"] == 20
    pruned = [t for t in res.trials if t["state"] == "pruned"]
    assert all(t["last_step"] is not None and t["last_step"] < 7 for t in pruned)
    run = workspace.metadata.get_run(pruned[0]["run_id"])
    assert run.status.value == "finished" and run.tags["reprise.trial_state"] == "pruned"
    points = workspace.metadata.get_metrics(run.id, "intermediate/loss")
    assert [p.step for p in points] == list(range(pruned[0]["last_step"] + 1))


def test_two_workers_run_trials_in_two_processes(workspace: Any,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REPRISE_TEST_SLEEP", "0.3")
    res = tune(obj.slow_quad, SPACE, n_trials=6, workers=2, workspace=workspace, pruner=None)
    assert res.counts["complete"] == 6
    pids = {workspace.metadata.get_run(t["run_id"]).pid for t in res.trials}
    assert len(pids) == 2 and os.getpid() not in pids


@pytest.mark.parametrize("pruner", ["median", "hyperband"])
def test_reproducible_search_gives_the_same_trials_with_one_or_two_workers(
        workspace: Any, pruner: str) -> None:
    runs = [tune(obj.curve, SPACE, n_trials=14, workers=w, reproducible=True, batch_size=4,
                 pruner=pruner, seed=7, study=f"{pruner}{w}", workspace=workspace)
            for w in (1, 2)]
    seen = [[(t["number"], t["params"], t["state"], t["value"], t["last_step"])
             for t in r.trials] for r in runs]
    assert seen[0] == seen[1]
    assert runs[0].best_params == runs[1].best_params
    if pruner == "median":
        assert runs[0].counts["pruned"] > 0  # the frozen view still prunes


def test_a_worker_that_dies_has_its_trial_failed_and_retried(
        workspace: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REPRISE_TEST_MARKERS", str(tmp_path))
    res = tune(obj.dies_once, SPACE, n_trials=6, workers=2, workspace=workspace, pruner=None,
               seed=3)
    assert res.counts["complete"] == 6 and res.counts["failed"] >= 1
    retried = [t for t in res.trials if t["retry_of"] is not None]
    failed = {t["number"]: t for t in res.trials if t["state"] == "failed"}
    assert retried and all(r["retry_of"] in failed for r in retried)
    assert all(failed[r["retry_of"]]["params"] == r["params"] for r in retried)
    study = load_study(workspace, "dies_once")
    assert all(t.system_attrs.get("reprise_retried") for t in study.trials
               if t.state.name == "FAIL")


TUNER = '''
import sys
import reprise
from tests.tune import _objectives as obj

if __name__ == "__main__":
    ws = reprise.open_workspace(sys.argv[1])
    res = reprise.tune(obj.slow_quad, {"x": {"low": -5.0, "high": 5.0}}, n_trials=8,
                       workers=2, reproducible=sys.argv[2] == "1", batch_size=4, seed=5,
                       study=sys.argv[3], workspace=ws, pruner=None, heartbeat=0.5)
    print("RESULT", [(t["number"], t["params"], t["state"]) for t in res.trials])
'''


def _start(script: Path, ws: Any, reproducible: bool, study: str) -> subprocess.Popen[str]:
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "REPRISE_TEST_SLEEP": "0.4", "PYTHONPATH": path}  # this checkout's src
    return subprocess.Popen([sys.executable, str(script), str(ws.root), str(int(reproducible)),
                             study], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def _finish(proc: subprocess.Popen[str]) -> list[Any]:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    line = next(li for li in out.splitlines() if li.startswith("RESULT"))
    return list(eval(line.removeprefix("RESULT ")))  # our own printed literal


@pytest.mark.parametrize("reproducible", [False, True])
def test_a_killed_tuner_is_resumed_from_its_study(workspace: Any, tmp_path: Path,
                                                  reproducible: bool) -> None:
    script = tmp_path / "tuner.py"
    script.write_text(textwrap.dedent(TUNER))
    proc = _start(script, workspace, reproducible, "killed")
    study_seen = 0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and study_seen < 3:  # kill it mid-study
        time.sleep(0.2)
        try:
            study_seen = len(load_study(workspace, "killed").trials)
        except Exception:  # noqa: BLE001 - the study does not exist yet
            study_seen = 0
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    running = [t for t in load_study(workspace, "killed").trials if t.state.name == "RUNNING"]
    assert running, "the tuner was killed with trials in flight"
    resumed = _finish(_start(script, workspace, reproducible, "killed"))
    states = [s for _, _, s in resumed]
    assert states.count("complete") == 8
    if reproducible:  # the very trials an uninterrupted run gives
        whole = _finish(_start(script, workspace, reproducible, "whole"))
        assert [r for r in resumed if r[2] == "complete"] == whole
    else:
        assert states.count("failed") == len(running)  # failed as stale, then retried


def test_a_trial_left_without_its_params_is_redrawn_as_the_uninterrupted_run_drew_it(
        workspace: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tuner killed between creating a trial and writing its params (Optuna's ``ask``
    does one journal write for each) leaves a RUNNING trial without params. Resumed in
    reproducible mode, that trial gets the params the uninterrupted search drew for it,
    rather than reaching the objective with none ("'Trial' object is not subscriptable")."""
    from reprise.tune import _scheduler

    kw: dict[str, Any] = dict(n_trials=8, reproducible=True, batch_size=4, seed=5,
                              pruner=None, heartbeat=0.2, workspace=workspace)
    whole = tune(obj.quad, SPACE, study="whole", **kw)
    real_ask, asked = _scheduler._Tuner._ask, []

    def dies_mid_ask(self: Any) -> Any:
        if len(asked) == 5:  # trial 5, the second of the second batch: created, no params
            self.study._storage.create_new_trial(self.study._study_id)
            raise KeyboardInterrupt
        asked.append(1)
        return real_ask(self)

    monkeypatch.setattr(_scheduler._Tuner, "_ask", dies_mid_ask)
    with pytest.raises(KeyboardInterrupt):
        tune(obj.quad, SPACE, study="killed", **kw)
    monkeypatch.setattr(_scheduler._Tuner, "_ask", real_ask)
    stuck = [t for t in load_study(workspace, "killed").trials if t.state.name == "RUNNING"]
    assert [t.number for t in stuck] == [4, 5] and stuck[1].params == {}
    resumed = tune(obj.quad, SPACE, study="killed", **kw)
    assert [(t["number"], t["params"], t["state"], t["value"]) for t in resumed.trials] == \
        [(t["number"], t["params"], t["state"], t["value"]) for t in whole.trials]
