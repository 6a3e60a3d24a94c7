"""A model registered by a pipeline run: its reference is found from its lineage (the
dataset version the run read), restricted to the model's inputs, without --reference."""

from __future__ import annotations

from pathlib import Path

import pytest

import reprise
from reprise.monitor import model_reference
from tests.registry.test_cli import cli, make_project, points


def test_the_training_dataset_comes_from_the_lineage(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    project = make_project(tmp_path)
    cli(project, "run", "flow.py:auto")  # registers points-auto:1 from points@1
    monkeypatch.chdir(project)
    ws = reprise.open_workspace(project)
    try:
        ref = model_reference("points-auto:1", workspace=ws)
        assert ref.dataset == "points@1" and ref.predictions_source == "reference_sample"
        assert sorted(ref.inputs.kinds) == ["a", "b"]  # not the dataset's id nor its target
        assert ref.sample_rows == 200 and ref.inputs.rows == 200
        assert set(ref.predictions.kinds) == {"prediction", "score"}
        assert ref.metrics["accuracy"] > 0.6  # the card's, the performance baseline
        rec = ws.metadata.get_monitor_reference("points-auto", 1)
        assert rec.dataset == "points@1" and rec.artifact_hash == ref.artifact_hash
        # a one-off --reference is used for that call and kept, but the lineage's
        # training dataset stays the default (it silently replaced it for every later run)
        points(seed=5).to_csv(project / "points2.csv", index=False)
        cli(project, "data", "add", "points", "points2.csv")  # points@2
        assert model_reference("points-auto:1", dataset="points@2",
                               workspace=ws).dataset == "points@2"
        assert model_reference("points-auto:1", workspace=ws).dataset == "points@1"
        assert model_reference("points-auto:1", dataset="points@2",
                               workspace=ws).dataset == "points@2"  # read back
    finally:
        ws.close()
