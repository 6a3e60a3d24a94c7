"""A workspace removed and created again at the same path, in one process (a test suite, a
notebook): new runs and studies go to the new workspace, never to the deleted database."""

from __future__ import annotations

import shutil
from pathlib import Path

import reprise
from tests.tune import _objectives as obj


def test_runs_and_studies_go_to_the_new_workspace(tmp_path: Path) -> None:
    ws = reprise.init(tmp_path)
    with reprise.start_run("old", workspace=ws) as run:
        run.log_metric("x", 1.0)
    reprise.tune(obj.quad, {"x": {"low": -1.0, "high": 1.0}}, n_trials=2, workspace=ws,
                 report=False, study="s")
    shutil.rmtree(tmp_path / ".reprise")
    fresh = reprise.init(tmp_path)
    assert fresh is not ws and reprise.open_workspace(tmp_path) is fresh
    with reprise.start_run("new", workspace=fresh):
        pass
    res = reprise.tune(obj.quad, {"x": {"low": -1.0, "high": 1.0}}, n_trials=2,
                       workspace=fresh, report=False, study="s")
    assert len(res.trials) == 2  # a new study, not the deleted one resumed
    names = {r.name for r in reprise.open_workspace(tmp_path).metadata.list_runs()}
    assert names == {"new", "tune:s", "trial-0", "trial-1"}  # nothing of the old one
    fresh.close()
