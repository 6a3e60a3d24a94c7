from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import reprise
from reprise.core import RunStatus
from reprise.core.errors import (
    InvalidNameError,
    NoActiveRunError,
    ParamConflictError,
    RunFinishedError,
)


def test_run_records_params_metrics_tags_and_finishes(workspace: reprise.Workspace) -> None:
    with reprise.start_run("train", params={"lr": 0.1}, tags={"team": "a"}) as run:
        run.log_param("layers", [64, 64])
        for i in range(5):
            reprise.log_metric("loss", 1.0 / (i + 1))
        run.log_metric("acc", 0.5, step=10)
        run.log_metric("acc", 0.7)  # continues after the last explicit step
        run.log_metrics({"a": 1, "b": np.float32(2.5)}, step=3)
        reprise.set_tag("stage", "dev")
    rec = workspace.metadata.get_run(run.id)
    assert rec.status is RunStatus.FINISHED and rec.ended_at is not None
    assert rec.params == {"lr": 0.1, "layers": [64, 64]}
    assert rec.tags == {"team": "a", "stage": "dev"}
    assert rec.env_hash is not None and rec.energy_source is not None
    assert [(p.step, p.value) for p in workspace.metadata.get_metrics(run.id, "acc")] == [
        (10, 0.5), (11, 0.7)]
    assert len(workspace.metadata.get_metrics(run.id, "loss")) == 5
    assert not list(workspace.journals_dir.glob("*.jrnl"))  # archived after ingestion


def test_exception_marks_run_failed_with_text(workspace: reprise.Workspace) -> None:
    with pytest.raises(ZeroDivisionError), reprise.start_run("bad") as run:
        1 / 0  # noqa: B018
    rec = workspace.metadata.get_run(run.id)
    assert rec.status is RunStatus.FAILED
    assert "ZeroDivisionError" in (rec.error or "")


def test_keyboard_interrupt_marks_run_killed(workspace: reprise.Workspace) -> None:
    with pytest.raises(KeyboardInterrupt), reprise.start_run("ctrl-c") as run:
        raise KeyboardInterrupt
    assert workspace.metadata.get_run(run.id).status is RunStatus.KILLED


def test_nested_runs(workspace: reprise.Workspace) -> None:
    with reprise.start_run("parent") as parent:
        with reprise.start_run("child") as child:
            assert reprise.active_run() is child
            reprise.log_metric("x", 1.0)
        assert reprise.active_run() is parent
    assert reprise.active_run() is None
    assert workspace.metadata.get_run(child.id).parent_id == parent.id
    assert workspace.metadata.get_metrics(parent.id) == []


def test_writing_to_a_finished_run_is_an_error(workspace: reprise.Workspace) -> None:
    with reprise.start_run("done") as run:
        pass
    for call in (lambda: run.log_metric("x", 1), lambda: run.log_param("p", 1),
                 lambda: run.set_tag("t", 1), lambda: run.log_metrics({"x": 1})):
        with pytest.raises(RunFinishedError, match="has ended"):
            call()


def test_no_active_run(workspace: reprise.Workspace) -> None:
    with pytest.raises(NoActiveRunError, match="start_run"):
        reprise.log_metric("x", 1.0)


def test_params_are_immutable(workspace: reprise.Workspace) -> None:
    with reprise.start_run("p", params={"lr": 0.1}) as run:
        run.log_param("lr", 0.1)  # same value: fine
        with pytest.raises(ParamConflictError, match="cannot change"):
            run.log_param("lr", 0.2)
        with pytest.raises(InvalidNameError):
            run.log_param("obj", object())


@pytest.mark.parametrize("key", ["", "a\tb", "a\nb", " lead", "x" * 251])
def test_bad_metric_keys_are_rejected(workspace: reprise.Workspace, key: str) -> None:
    with reprise.start_run("k") as run, pytest.raises(InvalidNameError):
        run.log_metric(key, 1.0)


def test_non_finite_values_roundtrip(workspace: reprise.Workspace) -> None:
    with reprise.start_run("nan") as run:
        run.log_metric("v", math.nan)
        run.log_metric("v", math.inf)
    values = [p.value for p in workspace.metadata.get_metrics(run.id, "v")]
    assert math.isnan(values[0]) and values[1] == math.inf


def test_log_artifact_objects_and_files(workspace: reprise.Workspace, tmp_path: Path) -> None:
    f = tmp_path / "notes.txt"
    f.write_text("hello")
    with reprise.start_run("arts") as run:
        rec = run.log_artifact(np.arange(5), "arr.npy")
        run.log_artifact(f)
        run.log_artifact({"a": 1}, "meta/info.json")
        with pytest.raises(InvalidNameError):
            run.log_artifact(b"x", "../escape")
        with pytest.raises(InvalidNameError, match="needs a name"):
            run.log_artifact(b"x")
        with pytest.raises(InvalidNameError, match="no file"):
            run.log_artifact(str(tmp_path / "missing.txt"))
    arts = workspace.metadata.run_artifacts(run.id)
    assert set(arts) == {"arr.npy", "notes.txt", "meta/info.json"}
    assert arts["arr.npy"].hash == rec.hash
    assert workspace.artifacts.exists(rec.hash)


def test_system_metrics_are_sampled(workspace: reprise.Workspace) -> None:
    import time

    with reprise.start_run("sys", system_metrics_interval=0.05) as run:
        time.sleep(0.3)
    keys = {p.key for p in workspace.metadata.get_metrics(run.id)}
    assert "system/cpu_percent" in keys and "system/rss_mb" in keys


def test_database_failure_keeps_the_journal(workspace: reprise.Workspace,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    store = workspace.metadata

    def broken(*_a: object, **_k: object) -> bool:
        raise RuntimeError("database down")

    with reprise.start_run("offline") as run:
        run.log_metric("x", 1.0)
        monkeypatch.setattr(store, "ingest", broken)
    journal = workspace.journal_path(run.id)
    assert journal.exists()
    monkeypatch.undo()
    assert workspace.recover() == []  # ended properly, just not ingested: not "killed"
    rec = store.get_run(run.id)
    assert rec.status is RunStatus.FINISHED
    assert [p.value for p in store.get_metrics(run.id)] == [1.0]
