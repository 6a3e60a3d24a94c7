"""reprise.tune with function objectives: search, tracking, resume, failures, bad input."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import reprise
from reprise.core.errors import UserError
from reprise.tune import load_study, show_study, tune
from tests.tune import _objectives as obj

SPACE = {"x": {"low": -5.0, "high": 5.0}, "kind": ["a", "b"]}


def trial_runs(ws: Any, tuning_run: str) -> list[Any]:
    from reprise.store._metadata_base import RunFilter

    return sorted(ws.metadata.list_runs(RunFilter(parent_id=tuning_run)), key=lambda r: r.name)


def finals(ws: Any, run_id: str) -> dict[str, float]:
    return {k: p.value for k, p in ws.metadata.latest_metrics([run_id]).get(run_id, {}).items()}


def test_a_function_objective_is_searched_and_every_trial_is_a_tracked_child_run(
        workspace: Any) -> None:
    res = tune(obj.logs, SPACE, n_trials=15, workspace=workspace, pruner=None, seed=1)
    assert res.counts["complete"] == 15 and res.study == "logs"
    assert res.best_value == min(t["value"] for t in res.trials) < 2.0
    best = next(t for t in res.trials if t["number"] == res.best_trial)
    assert best["params"] == res.best_params
    tuning = workspace.metadata.get_run(res.run_id)
    assert tuning.kind.value == "tuning" and tuning.status.value == "finished"
    assert tuning.tags["reprise.study"] == "logs"
    top = finals(workspace, res.run_id)
    assert top["best_value"] == res.best_value and top["trials_complete"] == 15
    kids = trial_runs(workspace, res.run_id)
    assert len(kids) == 15 and {k.kind.value for k in kids} == {"trial"}
    first = next(t for t in res.trials if t["number"] == 0)
    run0 = workspace.metadata.get_run(first["run_id"])
    assert run0.params == first["params"] and run0.tags["reprise.trial_state"] == "complete"
    got = finals(workspace, run0.id)
    assert got["value"] == first["value"] and got["seen"] == first["params"]["x"]
    assert "tuning.html" in workspace.metadata.run_artifacts(res.run_id)


def test_a_study_resumes_to_its_total_and_refuses_other_settings(workspace: Any) -> None:
    tune(obj.quad, SPACE, n_trials=6, study="s", workspace=workspace, pruner=None)
    more = tune(obj.quad, SPACE, n_trials=9, study="s", workspace=workspace, pruner=None)
    assert more.counts["complete"] == 9 and len(more.trials) == 9
    again = tune(obj.quad, SPACE, n_trials=9, study="s", workspace=workspace, pruner=None)
    assert len(again.trials) == 9  # nothing left to do
    with pytest.raises(UserError, match="exists with another space"):
        tune(obj.quad, {"x": {"low": 0.0, "high": 1.0}}, n_trials=10, study="s",
             workspace=workspace)
    with pytest.raises(UserError, match="another direction"):
        tune(obj.quad, SPACE, n_trials=10, study="s", workspace=workspace,
             direction="maximize")


def test_a_failing_objective_stops_the_search_unless_caught(workspace: Any) -> None:
    with pytest.raises(UserError, match=r"trial 0 of study 'fails' failed: ValueError: bad "
                                        r"luck.*catch=True"):
        tune(obj.fails, SPACE, n_trials=5, workspace=workspace)
    study = load_study(workspace, "fails")
    assert [t.state.name for t in study.trials] == ["FAIL"]
    run = workspace.metadata.get_run(study.trials[0].system_attrs["reprise_owner"]["run"])
    assert run.status.value == "failed" and "bad luck" in (run.error or "")
    res = tune(obj.fails, SPACE, n_trials=3, workspace=workspace, study="caught", catch=True)
    assert res.counts["failed"] == 3 and res.best_trial is None


def test_a_user_error_in_the_objective_is_reported_as_such(workspace: Any) -> None:
    with pytest.raises(UserError, match="needs a column 'price'"):
        tune(obj.refuses, SPACE, n_trials=2, workspace=workspace)


@pytest.mark.parametrize("fn", [obj.nan, obj.not_a_number])
def test_nan_or_a_non_number_fails_the_trial(workspace: Any, fn: Any) -> None:
    res = tune(fn, SPACE, n_trials=2, workspace=workspace, catch=True)
    assert res.counts["failed"] == 2


def test_define_by_run_without_a_space(workspace: Any) -> None:
    res = tune(obj.define_by_run, None, n_trials=12, workspace=workspace, pruner=None)
    assert abs(res.best_params["x"] - 1.0) < 2.0 and res.counts["complete"] == 12


def test_grid_search_visits_every_point_once(workspace: Any) -> None:
    space = {"x": {"low": 0.0, "high": 3.0, "grid": [0.0, 1.0, 2.0, 3.0]}, "kind": ["a", "b"]}
    res = tune(obj.quad, space, sampler="grid", workspace=workspace)
    seen = sorted((t["params"]["x"], t["params"]["kind"]) for t in res.trials)
    assert seen == [(x, k) for x in (0.0, 1.0, 2.0, 3.0) for k in ("a", "b")]
    assert res.best_params == {"x": 2.0, "kind": "a"} and res.best_value == 0.0


@pytest.mark.parametrize("sampler", ["random", "cmaes"])
def test_other_samplers_run(workspace: Any, sampler: str) -> None:
    res = tune(obj.quad, {"x": {"low": -5.0, "high": 5.0}}, n_trials=6, sampler=sampler,
               workspace=workspace, study=sampler)
    assert res.counts["complete"] == 6


def test_a_timeout_bounds_the_search(workspace: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REPRISE_TEST_SLEEP", "0.2")
    res = tune(obj.slow_quad, SPACE, timeout=0.5, workspace=workspace)
    assert 1 <= len(res.trials) <= 4


def test_the_same_seed_gives_the_same_trials_in_one_process(workspace: Any) -> None:
    a = tune(obj.quad, SPACE, n_trials=8, workspace=workspace, study="a", seed=4)
    b = tune(obj.quad, SPACE, n_trials=8, workspace=workspace, study="b", seed=4)
    assert [t["params"] for t in a.trials] == [t["params"] for t in b.trials]


@pytest.mark.parametrize(("kwargs", "needle"), [
    ({"direction": "up"}, "direction must be"),
    ({"sampler": "bayes"}, "sampler 'bayes'"),
    ({"pruner": "early"}, "pruner 'early'"),
    ({"workers": 0}, "workers must be a positive integer"),
    ({"batch_size": 0}, "batch_size must be"),
    ({"n_trials": 0}, "n_trials must be a positive integer"),
    ({"n_trials": None}, "give n_trials"),
    ({"timeout": -1}, "timeout must be a positive"),
    ({"heartbeat": 0}, "heartbeat must be > 0"),
    ({"params": {"a": 1}}, "fixes pipeline parameters"),
    ({"space": None, "workers": 2}, "define-by-run"),
    ({"space": {"x": {"low": 1, "high": 0}}}, "low < high"),
])
def test_bad_arguments_are_refused_before_any_trial(workspace: Any, kwargs: dict[str, Any],
                                                    needle: str) -> None:
    args: dict[str, Any] = {"n_trials": 3, "space": SPACE, **kwargs}
    space = args.pop("space")
    with pytest.raises(UserError, match=needle):
        tune(obj.quad, space, workspace=workspace, **args)
    assert reprise.tune.list_studies(workspace) == []


def test_show_and_the_html_report(workspace: Any, tmp_path: Path) -> None:
    tune(obj.quad, SPACE, n_trials=6, study="shown", workspace=workspace, pruner=None)
    info = show_study(workspace, "shown")
    assert info["counts"]["complete"] == 6 and info["best"]["number"] in range(6)
    assert set(info["importances"]) <= {"x", "kind"}
    html = reprise.tune.study_html(load_study(workspace, "shown"), info)
    assert html.count("<script") >= 1 and "<script src" not in html  # plotly.js embedded
    assert "Optimisation history" in html and "Parallel coordinates" in html
    with pytest.raises(reprise.errors.NotFoundError, match="no study 'nope'.*shown"):
        show_study(workspace, "nope")


def test_reprise_tune_is_the_function_and_the_package() -> None:
    import reprise.tune as package

    assert callable(reprise.tune) and reprise.tune is package
    assert package.tune.__name__ == "tune"


def test_the_study_storage_can_be_overridden(tmp_path: Path, workspace: Any,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REPRISE_TUNE_STORAGE", f"sqlite:///{tmp_path / 'studies.db'}")
    res = tune(obj.quad, {"x": {"low": -5.0, "high": 5.0}}, n_trials=3, workspace=workspace,
               pruner=None)
    assert res.counts["complete"] == 3 and (tmp_path / "studies.db").is_file()
