"""``optimize``'s held-out set: found in the source version's lineage (the table the
evaluation read, not the training sample nor the data it was split from), given as a
file, or reported missing with the reason; the quantisation gate scores it against
its labels."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import reprise
from reprise.core.errors import UserError
from reprise.registry import (
    load_model,
    optimize,
    package_model,
    register_model,
    register_package,
)

FLOW = '''
from typing import Any

import numpy as np
import pandas as pd

import reprise
from reprise import step
from reprise.registry import ModelPackage, package_model


@step
def load(n: int) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"id": np.arange(n), "a": rng.normal(size=n),
                          "b": rng.uniform(0, 10, n)})
    noise = rng.normal(scale=0.6, size=n)
    frame["y"] = (frame["a"] + frame["b"] / 5 + noise > 1.0).astype(int)
    return frame


@step
def split(frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    cut = len(frame) * 2 // 3
    return frame.iloc[:cut].reset_index(drop=True), frame.iloc[cut:].reset_index(drop=True)


@step
def fit(train: pd.DataFrame) -> Any:
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return make_pipeline(StandardScaler(), LogisticRegression()).fit(train[["a", "b"]],
                                                                     train["y"])


@step
def evaluate(model: Any, test: pd.DataFrame) -> dict:
    from reprise.evaluate import evaluate as score

    return dict(score(model, test[["a", "b"]], test["y"], bootstrap=0))


@step
def package(model: Any, train: pd.DataFrame, evaluation: dict) -> ModelPackage:
    return package_model(model, sample=train[["a", "b"]], target=train["y"],
                         evaluation=evaluation)


@reprise.pipeline
def flow(n: int = 300):
    train, test = split(load(n))
    model = fit(train)
    return package(model, train, evaluate(model, test))


@reprise.pipeline
def on_training(n: int = 300):
    frame = load(n)
    model = fit(frame)
    return package(model, frame, evaluate(model, frame))
'''


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    (tmp_path / "holdflow.py").write_text(textwrap.dedent(FLOW))
    monkeypatch.setenv("REPRISE_ACTOR", "tester")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    w = reprise.init(tmp_path)
    yield w
    w.close()
    sys.modules.pop("holdflow", None)


def _run(ws: Any, pipeline: str) -> str:
    from reprise.pipeline import load_pipeline

    return str(load_pipeline(f"holdflow.py:{pipeline}").run(workers=1).run_id)


def _test_split(ws: Any, run_id: str) -> tuple[str, pd.DataFrame]:
    """The hash of the split step's second output (the test table) and the table."""
    from reprise.store._materializers import load_object

    split = next(st for st in ws.metadata.get_step_runs(run_id) if st["step_name"] == "split")
    out = sorted(split["outputs"], key=lambda o: o["name"])[1]
    art = ws.metadata.get_artifact(out["hash"])
    return out["hash"], load_object(ws.artifacts, art.hash, art.materializer, art.meta)


def test_the_heldout_rows_are_the_table_the_evaluation_read(ws: Any) -> None:
    run_id = _run(ws, "flow")
    register_model("m", run_id, workspace=ws)
    test_hash, test = _test_split(ws, run_id)
    assert len(test) == 100

    report = optimize("m", 1, workspace=ws).meta["onnx"]["report"]
    held = report["holdout"]
    assert held["source"] == "lineage" and held["artifact"] == test_hash
    assert (held["step"], held["consumed_by"], held["as"]) == ("split", "evaluate", "test")
    assert held["run"] == run_id and held["rows"] == held["rows_total"] == 100
    assert held["target"] == "y"  # the card's target, a column of the table
    assert report["sources"]["holdout"] == 100 and report["passed"] is True
    # stored on the version: the variant's card carries the same report
    assert load_model("m:2", workspace=ws).card["onnx"]["parity"]["holdout"] == held


def test_quantisation_gate_scores_the_heldout_rows_against_their_labels(ws: Any) -> None:
    from sklearn.metrics import accuracy_score

    run_id = _run(ws, "flow")
    register_model("m", run_id, workspace=ws)
    _, test = _test_split(ws, run_id)
    native = load_model("m:1", workspace=ws)
    expected = accuracy_score(test["y"], native.model.predict(test[["a", "b"]]))

    rec = optimize("m", 1, quantize="dynamic-int8", workspace=ws)
    gate = rec.meta["onnx"]["gate"]
    assert gate["basis"] == "holdout" and gate["rows"] == 100 and gate["target"] == "y"
    accuracy = next(r for r in gate["results"] if r["metric"] == "accuracy")
    assert accuracy["native"] == pytest.approx(expected)
    # the same rows the evaluation on the card was computed on
    assert accuracy["native"] == pytest.approx(native.card["metrics"]["accuracy"]["value"])

    # demanding a gain fails the gate, still on the held-out basis
    failed = optimize("m", 1, quantize="dynamic-int8", max_drop=-0.01,
                      workspace=ws).meta["onnx"]["gate"]
    assert failed["basis"] == "holdout" and failed["passed"] is False


def test_a_version_without_lineage_says_why(ws: Any) -> None:
    from reprise.cli._models import parity_lines

    frame = pd.DataFrame({"a": np.linspace(-2, 2, 60), "b": np.linspace(0, 10, 60)})
    y = (frame["a"] > 0).astype(int)
    from sklearn.linear_model import LogisticRegression

    register_package("bare", package_model(LogisticRegression().fit(frame, y), sample=frame),
                     workspace=ws)
    rec = optimize("bare", 1, quantize="dynamic-int8", workspace=ws)
    report, gate = rec.meta["onnx"]["report"], rec.meta["onnx"]["gate"]
    assert report["holdout"]["source"] == "none" and report["sources"]["holdout"] == 0
    assert "registered without a run" in report["holdout"]["reason"]
    assert gate["basis"].startswith("agreement") and "no held-out set" in gate["basis"]
    text = "\n".join(parity_lines(report, gate))
    assert "held-out rows     none found in lineage: bare:1 was registered without a run" in text


def test_evaluated_on_its_training_rows_nothing_was_held_out(ws: Any) -> None:
    register_model("t", _run(ws, "on_training"), workspace=ws)
    held = optimize("t", 1, workspace=ws).meta["onnx"]["report"]["holdout"]
    assert held["source"] == "none"
    assert "training sample (input `train` of step package)" in held["reason"]


def test_a_given_file_overrides_the_lineage(ws: Any) -> None:
    from typer.testing import CliRunner

    from reprise.cli._app import app

    register_model("m", _run(ws, "flow"), workspace=ws)
    rng = np.random.default_rng(5)
    held = pd.DataFrame({"a": rng.normal(size=40), "b": rng.uniform(0, 10, 40)})
    held["label"] = (held["a"] > 0).astype(int)
    held.to_csv("held.csv", index=False)
    res = CliRunner().invoke(app, ["models", "optimize", "m:1", "--holdout", "held.csv",
                                   "--target", "label", "--quantize", "dynamic-int8"])
    assert res.exit_code == 0, res.output
    assert "40 rows from file held.csv, labels in column 'label'" in res.output
    assert "rows compared     299: 3 example, 40 held-out, 256 drawn" in res.output
    gate = load_model("m:2", workspace=ws).card["onnx"]["quantization"]["gate"]
    assert gate["rows"] == 40 and gate["target"] == "label"
    with pytest.raises(UserError, match="no target column 'nope'"):
        optimize("m", 1, holdout="held.csv", holdout_target="nope", workspace=ws)


def test_heldout_rows_with_a_missing_value_are_left_out_and_counted(ws: Any) -> None:
    register_model("m", _run(ws, "flow"), workspace=ws)
    held = pd.DataFrame({"a": [0.1, np.nan, -0.4, 1.2], "b": [1.0, 2.0, np.nan, 9.0],
                         "y": [0, 1, 0, 1]})
    info = optimize("m", 1, holdout=held, workspace=ws).meta["onnx"]["report"]["holdout"]
    assert (info["source"], info["rows"], info["rows_total"]) == ("given", 2, 4)
    assert info["rows_with_missing_values"] == 2 and info["target"] == "y"
