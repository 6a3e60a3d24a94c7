"""The registry as a user drives it: pipeline -> package -> register -> promote -> lineage
-> batch predict -> rollback, the register step, a failing gate blocking registration,
and the audit log verified, then tampered with."""

from __future__ import annotations

import json
import sqlite3
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from tests.pipeline.test_pipelines import cli

FLOW = '''
from typing import Any

import pandas as pd

import reprise
from reprise import Dataset, step
from reprise.registry import ModelPackage, package_model, register


@step
def load(data: Dataset) -> pd.DataFrame:
    return data.to_pandas()


@step
def fit(frame: pd.DataFrame, C: float) -> Any:
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return make_pipeline(StandardScaler(), LogisticRegression(C=C)).fit(frame[["a", "b"]],
                                                                        frame["y"])


@step
def evaluate(model: Any, frame: pd.DataFrame, threshold: float) -> dict:
    from reprise.evaluate import evaluate as score

    return dict(score(model, frame[["a", "b"]], frame["y"], bootstrap=50,
                      gates={"accuracy": f">= {threshold}"}))


@step
def package(model: Any, frame: pd.DataFrame, evaluation: dict) -> ModelPackage:
    return package_model(model, sample=frame[["a", "b"]], evaluation=evaluation)


@reprise.pipeline
def flow(data: Dataset = Dataset("points@latest"), C: float = 1.0, threshold: float = 0.6):
    frame = load(data)
    model = fit(frame, C)
    return package(model, frame, evaluate(model, frame, threshold))


@reprise.pipeline
def auto(data: Dataset = Dataset("points@latest")):
    frame = load(data)
    model = fit(frame, 1.0)
    return register(package(model, frame, evaluate(model, frame, 0.6)), "points-auto")
'''


def points(n: int = 200, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({"id": np.arange(n), "a": rng.normal(size=n),
                          "b": rng.normal(size=n)})
    frame["y"] = (frame["a"] - frame["b"] > 0).astype(int)
    return frame


def js(project: Path, *args: str) -> Any:
    return json.loads(cli(project, *args, "--json").stdout)


def make_project(tmp_path: Path) -> Path:
    """A workspace with the pipeline above and the dataset ``points@1``."""
    root = tmp_path / "proj"
    root.mkdir()
    (root / "flow.py").write_text(textwrap.dedent(FLOW))
    points().to_csv(root / "points.csv", index=False)
    cli(root, "init", ".")
    cli(root, "data", "add", "points", "points.csv")
    return root


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path)


def test_train_register_promote_trace_predict_rollback(project: Path) -> None:
    run1 = js(project, "run", "flow.py:flow")["run_id"]
    reg = js(project, "models", "register", "points", "--run", run1)
    assert reg["version"] == 1 and reg["created"] is True
    assert js(project, "models", "register", "points", "--run", run1)["created"] is False
    shown = js(project, "models", "show", "points:1")
    assert shown["gates_passed"] is True and shown["meta"]["lineage"]["datasets"] == ["points@1"]
    assert [f["name"] for f in shown["signature"]["inputs"]] == ["a", "b"]
    cli(project, "models", "promote", "points", "1", "--alias", "production")

    tree = js(project, "lineage", "points@production")
    assert tree["model"] == "points:1" and tree["summary"]["datasets"] == ["points@1"]
    assert "points@1" in json.dumps(tree["nodes"])  # down to the dataset version
    shown_tree = cli(project, "lineage", "points@production").stdout
    assert "model points@production = points:1" in shown_tree and "points@1" in shown_tree

    res = js(project, "predict", "points@production", "points.csv", "-o", "out/p.parquet",
             "--chunk-rows", "64")
    out = pd.read_parquet(project / "out/p.parquet")
    assert res["rows"] == 200 and len(out) == 200
    assert list(out.columns) == ["id", "y", "prediction", "probability_0", "probability_1",
                                 "model_version"]
    assert set(out["model_version"]) == {"points:1"} and out["id"].tolist() == list(range(200))
    assert (out["prediction"] == out["y"]).mean() > 0.9
    via_dataset = js(project, "predict", "points:1", "points@1", "-o", "p.csv")
    assert via_dataset["rows"] == 200 and (project / "p.csv").read_text().count("\n") == 201
    pred_tree = js(project, "lineage", res["run_id"])
    assert "points.csv" in json.dumps(pred_tree) and "points:1" in json.dumps(pred_tree)

    run2 = js(project, "run", "flow.py:flow", "-p", "C=0.01")["run_id"]
    assert js(project, "models", "register", "points", "--run", run2)["version"] == 2
    cli(project, "models", "promote", "points", "2", "--alias", "production")
    again = cli(project, "models", "promote", "points", "2", "--alias", "production")
    assert "points@production is already 2; nothing changed" in again.stdout
    held = cli(project, "models", "delete", "points", "2", check=False)
    assert held.returncode == 2 and "held by alias(es) ['production']" in held.stderr
    assert "Move the alias first" in held.stderr
    assert js(project, "models", "show", "points@production")["version"] == 2
    rolled = cli(project, "models", "rollback", "points", "--alias", "production",
                 "--reason", "alerts after v2")
    assert "-> 1 (rolled back from 2)" in rolled.stdout
    listed = js(project, "models", "list")
    assert listed[0]["aliases"] == {"production": 1} and listed[0]["versions"] == 2
    actions = [e["action"] for e in js(project, "audit", "log")]
    assert actions == ["register", "promote", "register", "promote", "rollback"]
    assert js(project, "audit", "log")[-1]["payload"]["reason"] == "alerts after v2"


def test_bad_input_to_predict_writes_nothing(project: Path) -> None:
    run1 = js(project, "run", "flow.py:flow")["run_id"]
    cli(project, "models", "register", "points", "--run", run1)
    points().drop(columns=["b"]).to_csv(project / "no_b.csv", index=False)
    bad = cli(project, "predict", "points:1", "no_b.csv", "-o", "x.parquet", check=False)
    assert bad.returncode == 2 and "b: expected a number, got nothing" in bad.stderr
    frame = points().astype({"a": str})
    frame.loc[5, "a"] = "oops"
    frame.to_csv(project / "text.csv", index=False)
    bad = cli(project, "predict", "points:1", "text.csv", "-o", "x.parquet", check=False)
    assert bad.returncode == 2 and "a: expected a number" in bad.stderr
    assert "oops" not in bad.stderr  # never echo the data
    for args, needle in [(["predict", "points:1", "nope.csv", "-o", "x.parquet"],
                          "no input file"),
                         (["predict", "points:1", "points.csv", "-o", "x.json"],
                          "must end in .parquet or .csv"),
                         (["predict", "ghost@production", "points.csv", "-o", "x.csv"],
                          "no model 'ghost'")]:
        res = cli(project, *args, check=False)
        assert res.returncode == 2 and needle in res.stderr, res.stderr
    assert not list(project.glob("x.*")) and not list(project.glob(".tmp-*"))


def test_a_failing_gate_leaves_nothing_to_register(project: Path) -> None:
    res = cli(project, "run", "flow.py:flow", "-p", "threshold=0.999", "--json", check=False)
    run = json.loads(res.stdout)["run_id"] if res.stdout.strip().startswith("{") else None
    assert res.returncode == 1 and "accuracy" in res.stderr
    runs = js(project, "runs", "list")
    failed = run or runs[0]["id"]
    bad = cli(project, "models", "register", "points", "--run", failed, check=False)
    assert bad.returncode == 2 and "produced no model package" in bad.stderr


def test_the_register_step_registers_with_lineage(project: Path) -> None:
    first = js(project, "run", "flow.py:auto")
    assert first["status"] == "finished"
    listed = js(project, "models", "list")
    assert [m["name"] for m in listed] == ["points-auto"]
    shown = js(project, "models", "show", "points-auto:1")
    assert shown["run_id"] == first["run_id"] and shown["meta"]["step"] == "register"
    assert shown["meta"]["lineage"]["datasets"] == ["points@1"]
    js(project, "run", "flow.py:auto")  # cached: no new version
    assert js(project, "models", "list")[0]["versions"] == 1


def test_promotion_refused_without_gates_and_forced_with_a_reason(project: Path) -> None:
    run1 = js(project, "run", "flow.py:flow")["run_id"]
    cli(project, "models", "register", "points", "--run", run1)
    bad = cli(project, "models", "promote", "points", "1", "--alias", "prod", "--force",
              check=False)
    assert bad.returncode == 2 and "--force needs --reason" in bad.stderr
    bad = cli(project, "models", "promote", "points", "x", "--alias", "prod", check=False)
    assert bad.returncode == 2 and "VERSION must be a version number" in bad.stderr


def test_audit_verify_catches_a_tampered_database(project: Path) -> None:
    run1 = js(project, "run", "flow.py:flow")["run_id"]
    cli(project, "models", "register", "points", "--run", run1)
    cli(project, "models", "promote", "points", "1", "--alias", "production")
    ok = cli(project, "audit", "verify")
    assert "audit log intact: 2 event(s)" in ok.stdout
    db = project / ".reprise" / "reprise.db"
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE audit_events SET subject = 'points@staging' WHERE seq = 2")
    bad = cli(project, "audit", "verify", check=False)
    assert bad.returncode == 1 and "#2 edited" in bad.stderr and "TAMPERED" in bad.stderr
