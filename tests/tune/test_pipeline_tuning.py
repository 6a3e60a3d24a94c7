"""Tuning pipelines: each trial is a pipeline run (child of its trial run), steps that do
not depend on the tuned params are reused across trials, the Trainer inside a step feeds
the pruner (in-process and from a pipeline worker process), BestParams feeds a final
pipeline, and the CLI end to end."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import reprise
from reprise.core.errors import UserError
from reprise.tune import tune
from tests.pipeline.test_pipelines import cli

FLOW = '''
import numpy as np
import reprise
from reprise import step
from reprise.tune import BestParams


@step
def make(n: int) -> np.ndarray:
    return np.random.default_rng(0).normal(size=(n, 3))


@step
def fit(x: np.ndarray, alpha: float, shift: float) -> dict:
    return {"score": -((alpha - 0.3) ** 2) - (shift - 1.0) ** 2 + 0.0 * float(x.mean())}


@step
def evaluate(res: dict) -> dict:
    reprise.log_metric("score", res["score"])
    return res


@reprise.pipeline
def flow(n: int = 50, alpha: float = 0.5, shift: float = 0.0):
    return evaluate(fit(make(n), alpha, shift))


@step
def final_fit(x: np.ndarray, best: BestParams) -> dict:
    return {"alpha": best["alpha"], "shift": best["shift"], "trial": best.trial}


@reprise.pipeline
def final(n: int = 50, best: BestParams = BestParams("flow")):
    return final_fit(make(n), best)
'''

TRAIN = '''
import reprise
from reprise import step


@step
def train(lr: float) -> dict:
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    from reprise.train import Trainer

    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, 4, generator=g)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]])
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    trainer = Trainer(model, lambda p: torch.optim.SGD(p, lr=lr),
                      loss=torch.nn.functional.mse_loss, max_epochs=8, device="cpu",
                      deterministic=True, seed=0, log_every=1000)
    result = trainer.fit(DataLoader(TensorDataset(x[:192], y[:192]), batch_size=32),
                         DataLoader(TensorDataset(x[192:], y[192:]), batch_size=64))
    val = result.validations[-1]["val_loss"]
    reprise.log_metric("val_loss", val)
    return {"val_loss": val}


@step
def other(k: int) -> int:
    return k + 1


@reprise.pipeline
def learn(lr: float = 0.01):
    return train(lr)


@reprise.pipeline
def branches(lr: float = 0.01, k: int = 1):
    other(k)
    return train(lr)
'''

SPACE = {"alpha": {"low": 0.0, "high": 1.0}, "shift": {"low": -2.0, "high": 2.0}}


@pytest.fixture
def project(workspace: Any, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = Path(workspace.root)
    (root / "flow.py").write_text(textwrap.dedent(FLOW))
    (root / "learn.py").write_text(textwrap.dedent(TRAIN))
    (root / "space.yaml").write_text("alpha: {low: 0.0, high: 1.0}\nshift: {low: -2.0, "
                                     "high: 2.0}\n")
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield root
    for name in ("flow", "learn"):
        sys.modules.pop(name, None)


def test_each_trial_is_a_pipeline_run_sharing_unchanged_steps(workspace: Any,
                                                              project: Path) -> None:
    res = tune("flow.py:flow", SPACE, metric="evaluate/score", direction="maximize",
               n_trials=5, workspace=workspace, pruner=None)
    assert res.counts["complete"] == 5 and res.study == "flow"
    from reprise.store._metadata_base import RunFilter

    store = workspace.metadata
    executed = {"make": 0, "fit": 0}
    for t in res.trials:
        pipes = store.list_runs(RunFilter(parent_id=t["run_id"]))
        assert len(pipes) == 1 and pipes[0].kind.value == "pipeline"
        for st in store.get_step_runs(pipes[0].id):
            if st["step_name"] in executed and st["status"] == "executed":
                executed[st["step_name"]] += 1
    assert executed == {"make": 1, "fit": 5}  # make is computed once, reused by 4 trials


def test_best_params_feed_a_final_pipeline_and_are_in_its_cache_key(workspace: Any,
                                                                    project: Path) -> None:
    from reprise.pipeline import load_pipeline

    tune("flow.py:flow", SPACE, metric="evaluate/score", direction="maximize", n_trials=4,
         workspace=workspace, pruner=None, seed=0)
    best = reprise.tune.show_study(workspace, "flow")["best"]
    final = load_pipeline("flow.py:final")
    first = final.run(workers=1)
    assert first["final_fit"] == {**best["params"], "trial": best["number"]}
    assert first.executed == ["final_fit"]  # make: already cached by the trials
    assert sorted(final.run(workers=1).reused) == ["final_fit", "make"]
    workspace.recover()  # pipeline runs are ingested by the next command that reads
    run = workspace.metadata.get_run(first.run_id)
    assert run.params["best"]["resolved"] == f"flow#{best['number']}"
    from reprise.pipeline import verify_run

    tune("flow.py:flow", SPACE, metric="evaluate/score", direction="maximize", n_trials=8,
         workspace=workspace, pruner=None, seed=0)  # the study may find better params...
    report = verify_run(workspace, first.run_id)  # ...verify replays the trial recorded
    assert report.ok, [(v.step, v.status, v.error) for v in report.steps]
    pinned = final.run(workers=1, best=f"flow#{best['number']}")
    assert "final_fit" in pinned.reused
    with pytest.raises(UserError, match="no complete trial 99"):
        final.run(workers=1, best="flow#99")


@pytest.mark.parametrize("pipeline", ["learn", "branches"])
def test_the_trainer_inside_a_step_feeds_the_pruner(workspace: Any, project: Path,
                                                    pipeline: str) -> None:
    space = {"lr": [0.1, 0.05, 0.08, 0.0001, 0.00005, 0.0002]}
    res = tune(f"learn.py:{pipeline}", space, metric="train/val_loss", n_trials=6,
               sampler="grid", pruner="median", workspace=workspace, pipeline_workers=2,
               study=pipeline)
    states = {t["params"]["lr"]: t["state"] for t in res.trials}
    assert res.counts["pruned"] >= 1
    assert all(states[lr] == "complete" for lr in (0.1, 0.05, 0.08) if lr in states)
    assert all(s in ("complete", "pruned") for s in states.values())
    pruned = next(t for t in res.trials if t["state"] == "pruned")
    assert pruned["last_step"] is not None  # the Trainer's validation steps reached Optuna


def test_pipeline_input_errors_are_found_before_any_trial(workspace: Any,
                                                          project: Path) -> None:
    with pytest.raises(UserError, match="needs metric="):
        tune("flow.py:flow", SPACE, n_trials=2, workspace=workspace)
    with pytest.raises(UserError, match=r"no parameter\(s\) \['depth'\]"):
        tune("flow.py:flow", {"depth": [1, 2]}, metric="evaluate/score", n_trials=2,
             workspace=workspace)
    with pytest.raises(UserError, match="both tuned and fixed"):
        tune("flow.py:flow", SPACE, metric="evaluate/score", n_trials=2,
             params={"alpha": 0.1}, workspace=workspace)
    with pytest.raises(UserError, match="STEP/KEY"):
        tune("flow.py:flow", SPACE, metric="score", n_trials=2, workspace=workspace)
    with pytest.raises(UserError, match="logged no metric 'evaluate/f1'.*evaluate/score"):
        tune("flow.py:flow", SPACE, metric="evaluate/f1", n_trials=2, workspace=workspace,
             study="wrong-metric")
    with pytest.raises(UserError, match=r"no step 'report'; its steps are \['make', 'fit', "
                                        r"'evaluate'\]"):
        tune("flow.py:flow", SPACE, metric="report/f1", n_trials=2, workspace=workspace)


def test_a_trial_runs_only_what_its_metric_needs(workspace: Any, project: Path) -> None:
    res = tune("flow.py:flow", SPACE, metric="fit/never", n_trials=1, workspace=workspace,
               catch=True, study="upstream-only")
    from reprise.store._metadata_base import RunFilter

    (pipe,) = workspace.metadata.list_runs(RunFilter(parent_id=res.trials[0]["run_id"]))
    assert {s["step_name"] for s in workspace.metadata.get_step_runs(pipe.id)} == {"make",
                                                                                    "fit"}


def test_reprise_tune_cli_end_to_end(project: Path) -> None:
    out = cli(project, "tune", "flow.py:flow", "--space", "space.yaml", "--metric",
              "evaluate/score", "--direction", "maximize", "--trials", "3", "--pruner",
              "none", "--json")
    res = json.loads(out.stdout)
    assert res["counts"]["complete"] == 3 and res["study"] == "flow"
    listed = json.loads(cli(project, "tune", "list", "--json").stdout)
    assert [r["study"] for r in listed] == ["flow"] and listed[0]["trials"] == 3
    shown = cli(project, "tune", "show", "flow", "--html", "study.html")
    assert "best trial" in shown.stdout and (project / "study.html").read_text().startswith(
        "<!doctype html>")
    for trial in res["trials"]:  # the run column's prefix names the trial's run alone
        (prefix,) = [w for w in shown.stdout.split() if len(w) >= 8
                     and trial["run_id"].startswith(w) and w != trial["run_id"]]
        assert json.loads(cli(project, "runs", "show", prefix, "--json").stdout)["id"] == (
            trial["run_id"])
    more = cli(project, "tune", "run", "flow.py:flow", "--space", "space.yaml", "--metric",
               "evaluate/score", "--direction", "maximize", "--trials", "4")
    assert "study flow: best trial" in more.stdout
    for args, needle in [
        (["tune", "flow.py:flow", "--space", "nope.yaml", "--metric", "evaluate/score",
          "--trials", "2"], "does not exist"),
        (["tune", "flow.py:flow", "--space", "space.yaml", "--metric", "evaluate/score",
          "--trials", "2", "--sampler", "bayes"], "sampler 'bayes'"),
        (["tune", "flow.py:flow", "--space", "space.yaml", "--metric", "evaluate/score",
          "--trials", "2", "-p", "nope=1"], "no parameter(s) ['nope']"),
        (["tune", "show", "nope"], "no study 'nope'"),
    ]:
        bad = cli(project, *args, check=False)
        assert bad.returncode == 2 and needle in bad.stderr, (args, bad.stderr)
