"""Tuning on Ray (the two-node loopback cluster of tests/_ray_cluster.py): trials as Ray
tasks give the same trials as local workers in reproducible mode (journal and
PostgreSQL workspaces); a task whose process dies is failed and retried; Ctrl-C cancels
the tasks in flight; a node that cannot see the workspace stops the search with a clear
error; two tuners share one PostgreSQL study; the CLI's --executor ray."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import reprise
from reprise.core.errors import UserError
from reprise.tune import load_study, tune
from tests.tune import _objectives as obj

pytest.importorskip("ray")

SPACE = {"x": {"low": -5.0, "high": 5.0}}
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", autouse=True)
def _loopback_driver() -> Iterator[None]:
    """This process drives the loopback cluster. Ray reads RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER
    when it is imported, which the ray_cluster fixture has done before any search could set
    it (a fresh process, as the CLI test's, gets it from the search itself); so the value
    it was read into is set here too. The searches leave the process connected (as a
    search does, for the next one); other modules start from a process without Ray."""
    import ray
    from ray._private import ray_constants

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        mp.setattr(ray_constants, "ENABLE_RAY_CLUSTER", False)
        yield
        ray.shutdown()


def _trials(res: Any) -> list[tuple[Any, ...]]:
    return [(t["number"], t["params"], t["state"], t["value"], t["last_step"])
            for t in res.trials]


def _pids(ws: Any, res: Any) -> set[int]:
    return {ws.metadata.get_run(t["run_id"]).pid for t in res.trials}


def test_reproducible_search_on_ray_gives_the_trials_of_two_local_workers(
        ray_cluster: Any, workspace: Any) -> None:
    kw: dict[str, Any] = dict(n_trials=8, workers=2, reproducible=True, batch_size=4,
                              pruner="median", seed=7, workspace=workspace)
    local = tune(obj.curve, SPACE, study="local", **kw)
    on_ray = tune(obj.curve, SPACE, study="ray", executor="ray",
                  ray_address=ray_cluster.address, **kw)
    assert _trials(on_ray) == _trials(local)
    assert on_ray.best_params == local.best_params
    pids = _pids(workspace, on_ray)  # Ray tasks' processes (which node takes a fast
    assert pids and os.getpid() not in pids  # trial is Ray's choice: not asserted here)
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True).stdout
    mine = [line for line in out.splitlines() if f"pid={os.getpid()}," in line]
    assert mine and all("127.0.0.1]:" in s or " 127.0.0.1:" in s for s in mine), mine
    assert not list((workspace.config.workspace_dir / "tune").iterdir())  # token removed


@pytest.mark.postgres
def test_reproducible_search_on_ray_with_a_postgresql_workspace(
        ray_cluster: Any, pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REPRISE_STORE_URL", pg_url)
    monkeypatch.chdir(tmp_path)
    ws = reprise.init(tmp_path)
    kw: dict[str, Any] = dict(n_trials=6, reproducible=True, batch_size=3, pruner=None,
                              seed=3, workspace=ws)
    local = tune(obj.quad, SPACE, study="local", **kw)
    on_ray = tune(obj.quad, SPACE, study="ray", executor="ray", workers=2,
                  ray_address=ray_cluster.address, **kw)
    assert _trials(on_ray) == _trials(local) and on_ray.counts["complete"] == 6
    import psycopg

    with psycopg.connect(pg_url) as conn:  # the study, and the trial runs, in the database
        (n,) = conn.execute("SELECT count(*) FROM optuna.trials t JOIN optuna.studies s "
                            "USING (study_id) WHERE s.study_name = 'ray'").fetchone()
        (runs,) = conn.execute("SELECT count(*) FROM public.runs WHERE kind = 'trial' "
                               "AND pid <> %s", (os.getpid(),)).fetchone()
    assert n == 6 and runs == 6
    ws.close()


@pytest.mark.parametrize("reproducible", [False, True])
def test_a_ray_task_whose_process_dies_is_failed_and_retried(
        ray_cluster: Any, workspace: Any, tmp_path: Path, reproducible: bool) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    res = tune(functools.partial(obj.dies_once_in, str(markers)), SPACE, n_trials=5,
               workers=2, executor="ray", ray_address=ray_cluster.address, pruner=None,
               seed=3, study="dies", reproducible=reproducible, workspace=workspace)
    assert res.counts["complete"] == 5 and list(markers.iterdir()), "no task died"
    if reproducible:  # re-run in place: the trials an uninterrupted search gives
        whole = tune(obj.quad, SPACE, n_trials=5, pruner=None, seed=3, study="whole",
                     reproducible=True, workspace=workspace)
        assert _trials(res) == _trials(whole)
        return
    failed = {t["number"]: t for t in res.trials if t["state"] == "failed"}
    retried = [t for t in res.trials if t["retry_of"] is not None]
    assert retried and all(failed[r["retry_of"]]["params"] == r["params"] for r in retried)
    assert all(t.system_attrs.get("reprise_retried") for t in
               load_study(workspace, "dies").trials if t.state.name == "FAIL")


def test_ray_tasks_that_cannot_load_the_objective_stop_the_search(
        ray_cluster: Any, workspace: Any) -> None:
    kw: dict[str, Any] = dict(n_trials=20, workers=2, executor="ray", pruner=None,
                              ray_address=ray_cluster.address, workspace=workspace)
    with pytest.raises(UserError, match="could not load the objective: RuntimeError: this "
                                        "objective only loads in the tuner's process"):
        tune(obj.FailsToLoad(), SPACE, study="fails", **kw)
    t0 = time.monotonic()
    with pytest.raises(UserError, match="died before loading the objective 3 times"):
        tune(obj.DiesAtStartup(), SPACE, study="dies", **kw)
    assert time.monotonic() - t0 < 60
    assert len(load_study(workspace, "dies").trials) <= 4  # no endless retries


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_an_interrupted_search_cancels_its_ray_tasks(
        ray_cluster: Any, workspace: Any, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from reprise.tune._ray import RayPool

    folder = tmp_path / "pids"
    folder.mkdir()
    real_wait = RayPool.wait

    def interrupted(self: Any, timeout: float | None) -> Any:  # Ctrl-C once both run
        if len(list(folder.iterdir())) >= 2:
            raise KeyboardInterrupt
        return real_wait(self, min(timeout or 0.2, 0.2))

    monkeypatch.setattr(RayPool, "wait", interrupted)
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        tune(functools.partial(obj.sleeps_in, str(folder)), SPACE, n_trials=4, workers=2,
             executor="ray", ray_address=ray_cluster.address, pruner=None, study="cut",
             workspace=workspace)
    pids = [int(p.name) for p in folder.iterdir()]
    assert len(pids) == 2 and os.getpid() not in pids
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not all(_gone(p) for p in pids):
        time.sleep(0.2)
    assert time.monotonic() - t0 < 50  # not the trials' minute of sleep
    assert all(_gone(p) for p in pids), "the cancelled trials' processes still run"
    (run,) = [r for r in workspace.metadata.list_runs() if r.kind == "tuning"]
    assert run.status.value == "killed"


def test_a_process_on_one_cluster_refuses_another_address(ray_cluster: Any,
                                                          workspace: Any) -> None:
    tune(obj.quad, SPACE, n_trials=1, executor="ray", ray_address=ray_cluster.address,
         pruner=None, study="first", workspace=workspace)  # connected, stays connected
    with pytest.raises(UserError, match="already connected to the Ray cluster at"):
        tune(obj.quad, SPACE, n_trials=1, executor="ray", ray_address="127.0.0.1:1",
             pruner=None, study="second", workspace=workspace)
    from reprise.tracking._api import _active

    assert _active.top() is None  # the refused search left no run active in this process
    assert "tune:second" not in {r.name for r in workspace.metadata.list_runs()}


def test_a_node_that_cannot_see_the_workspace_stops_the_search(
        ray_cluster: Any, workspace: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import reprise.core._atomic as atomic

    monkeypatch.setattr(atomic, "atomic_write_bytes", lambda path, data: None)  # no token
    with pytest.raises(UserError, match="cannot see the workspace .*mount it at the same "
                                        "path"):
        tune(obj.quad, SPACE, n_trials=2, executor="ray", ray_address=ray_cluster.address,
             pruner=None, study="unseen", workspace=workspace)


TUNER = '''
import sys
import reprise
from tests.tune import _objectives as obj

ws = reprise.init(sys.argv[1])
res = reprise.tune(obj.slow_quad, {"x": {"low": -5.0, "high": 5.0}}, n_trials=8,
                   study="shared", workspace=ws, pruner=None, heartbeat=1.0)
print("RESULT", res.counts["complete"])
'''


@pytest.mark.postgres
def test_two_tuners_with_their_own_folders_share_one_postgresql_study(
        pg_url: str, tmp_path: Path) -> None:
    """Two tuner processes, each with a workspace folder of its own (as on two machines)
    on the same PostgreSQL store, complete the study's n_trials together."""
    path = os.pathsep.join(filter(None, [str(ROOT / "src"), str(ROOT),
                                         os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "REPRISE_STORE_URL": pg_url, "PYTHONPATH": path,
           "REPRISE_TEST_SLEEP": "0.4"}
    procs = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        procs.append(subprocess.Popen([sys.executable, "-c", TUNER, str(tmp_path / name)],
                                      env=env, cwd=ROOT, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True,
                                      start_new_session=True))
    try:
        outs = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, 9)
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err[-3000:]
        assert "RESULT 8" in out  # each tuner ends with the whole study complete
    import psycopg

    with psycopg.connect(pg_url) as conn:
        states = conn.execute("SELECT state, count(*) FROM optuna.trials GROUP BY 1").fetchall()
        pids = conn.execute("SELECT DISTINCT pid FROM public.runs WHERE kind = 'trial'"
                            ).fetchall()
    assert states == [("COMPLETE", 8)]
    assert {pid for (pid,) in pids} == {p.pid for p in procs}  # both tuners ran trials


def test_reprise_tune_cli_on_ray(ray_cluster: Any, tmp_path: Path) -> None:
    (tmp_path / "space.yaml").write_text("x: {low: -5.0, high: 5.0}\n")
    (tmp_path / "flow.py").write_text(textwrap.dedent('''
        import reprise
        from reprise import step

        @step
        def score(x: float) -> float:
            reprise.log_metric("loss", (x - 2.0) ** 2)
            return x

        @reprise.pipeline
        def flow(x: float = 0.0):
            return score(x)
        '''))
    from tests.pipeline.test_pipelines import cli

    reprise.init(tmp_path)
    out = cli(tmp_path, "tune", "flow.py:flow", "--space", "space.yaml", "--metric",
              "score/loss", "--trials", "3", "--pruner", "none", "--workers", "2",
              "--executor", "ray", "--ray-address", ray_cluster.address, "--json")
    res = json.loads(out.stdout)
    assert res["counts"]["complete"] == 3
    bad = cli(tmp_path, "tune", "flow.py:flow", "--space", "space.yaml", "--metric",
              "score/loss", "--trials", "2", "--ray-address", ray_cluster.address,
              check=False)
    assert bad.returncode == 2 and "--executor ray" in bad.stderr
    from tests._ray_cluster import _free_port

    t0 = time.monotonic()
    nowhere = cli(tmp_path, "tune", "flow.py:flow", "--space", "space.yaml", "--metric",
                  "score/loss", "--trials", "2", "--executor", "ray", "--ray-address",
                  f"127.0.0.1:{_free_port()}", check=False)
    assert nowhere.returncode == 2 and "nothing answers there" in nowhere.stderr
    assert time.monotonic() - t0 < 60  # refused, not retried for minutes


SCORE_FLOW = '''
import reprise
from reprise import step

@step
def score(x: float) -> float:
    reprise.log_metric("loss", (x - 2.0) ** 2)
    return x

@reprise.pipeline
def flow(x: float = 0.0):
    return score(x)
'''


def _ray_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: str
                ) -> str:
    """A workspace whose config.toml says [executor] kind = "ray" at an address where
    nothing listens (refused at once), and the pipeline file to tune; the address."""
    from tests._ray_cluster import _free_port
    from tests.pipeline.test_pipelines import cli

    cli(tmp_path, "init", ".")  # in another process: this one has not read the config
    monkeypatch.chdir(tmp_path)  # a trial's pipeline run opens the workspace of its folder
    address = f"127.0.0.1:{_free_port()}"
    config = tmp_path / ".reprise" / "config.toml"
    text = config.read_text().replace('kind = "local"', 'kind = "ray"')
    config.write_text(text.replace('address = ""', f'address = "{address}"'))
    (tmp_path / f"{module}.py").write_text(SCORE_FLOW)  # one module name per test
    (tmp_path / "space.yaml").write_text("x: {low: -5.0, high: 5.0}\n")
    return address


def test_reprise_tune_takes_its_executor_and_address_from_config_toml(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As `reprise run` does: no --executor given, [executor] kind = "ray" and its
    address are used (here refused, exit 2: nothing listens there), not silently a
    local search."""
    from tests.pipeline.test_pipelines import cli

    address = _ray_config(tmp_path, monkeypatch, "cfg_ray_flow")
    res = cli(tmp_path, "tune", "cfg_ray_flow.py:flow", "--space", "space.yaml", "--metric",
              "score/loss", "--trials", "2", "--pruner", "none", check=False)
    assert res.returncode == 2, res.stderr[-2000:]
    # the search's own connection is refused (not a trial's pipeline run, after the fact)
    assert f"cannot reach the Ray cluster at '{address}': nothing answers" in res.stderr


def test_a_local_search_runs_its_trials_steps_in_place_whatever_config_toml_says(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """executor="local" with [executor] kind = "ray" in config.toml: a trial's pipeline
    run executes its steps in the trial's process (it opened the configured Ray per
    trial, here an address where nothing listens)."""
    _ray_config(tmp_path, monkeypatch, "cfg_local_flow")
    res = tune(f"{tmp_path / 'cfg_local_flow.py'}:flow", SPACE, metric="score/loss",
               n_trials=2, pruner=None, executor="local", workspace=tmp_path)
    assert res.counts["complete"] == 2


def test_reprise_tune_refuses_a_ray_address_that_is_not_a_ray_cluster(tmp_path: Path) -> None:
    """The address checks of `reprise run --executor ray` (one function): a malformed
    address, and a listener that accepts connections but never answers as gRPC (which
    ray.init waited on for minutes), are refused in seconds, exit 2."""
    import socket

    from tests.pipeline.test_pipelines import cli

    reprise.init(tmp_path)
    (tmp_path / "space.yaml").write_text("x: {low: -5.0, high: 5.0}\n")
    (tmp_path / "silent_flow.py").write_text(SCORE_FLOW)
    args = ["tune", "silent_flow.py:flow", "--space", "space.yaml", "--metric", "score/loss",
            "--trials", "1", "--executor", "ray", "--ray-address"]
    res = cli(tmp_path, *args, "127.0.0.1:99999", check=False)
    assert res.returncode == 2 and "must be auto, HOST:PORT" in res.stderr, res.stderr[-2000:]
    with socket.socket() as listener:  # accepts connections, never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        t0 = time.monotonic()
        res = cli(tmp_path, *args, f"127.0.0.1:{listener.getsockname()[1]}", check=False)
    assert res.returncode == 2, res.stderr[-2000:]
    assert "does not answer as a Ray cluster" in res.stderr
    assert time.monotonic() - t0 < 60
