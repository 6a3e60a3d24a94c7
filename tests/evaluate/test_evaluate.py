"""``evaluate`` end to end: models, JSON round trip, logging to runs and steps."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from sklearn.compose import ColumnTransformer
from sklearn.linear_model import LinearRegression, LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler

import reprise
from reprise.core.errors import UserError
from reprise.evaluate import Evaluation, evaluate
from reprise.store._materializers import load_object, materializer_for, save_object


@pytest.fixture
def frame() -> tuple[pd.DataFrame, np.ndarray]:
    rng = np.random.default_rng(0)
    n = 240
    X = pd.DataFrame({"x": rng.normal(size=n), "age": rng.integers(18, 80, n),
                      "region": rng.choice(["n", "s"], n)})
    y = ((X["x"] + 0.3 * rng.normal(size=n)) > 0).astype(int).to_numpy()
    return X, y


def test_sklearn_pipeline_with_slices_fairness_and_json_round_trip(
        frame: tuple[pd.DataFrame, np.ndarray], workspace: Any) -> None:
    X, y = frame
    pre = ColumnTransformer([("num", StandardScaler(), ["x", "age"]),
                             ("cat", OneHotEncoder(), ["region"])])
    model = make_pipeline(pre, LogisticRegression()).fit(X, y)
    ev = evaluate(model, X, y, slices=["age", "region"], sensitive="region", bootstrap=200)
    assert ev.task == "binary" and ev["positive_label"] == 1 and ev["n"] == len(y)
    assert ev.value("accuracy") == pytest.approx(float((model.predict(X) == y).mean()))
    m = ev["metrics"]["roc_auc"]
    assert m["ci_low"] <= m["value"] <= m["ci_high"]
    assert m["ci_method"] == "delong-logit+newcombe" and "resamples" not in m
    assert ev["metrics"]["log_loss"]["resamples"] == 200
    assert set(ev["per_class"]) == {"0", "1"}
    assert {len(c["fpr"]) for c in ev["curves"]["roc"].values()} <= set(range(2, 201))
    assert [r["segment"] for r in ev["slices"]][-2:] == ["region=n", "region=s"]
    assert ev["fairness"]["sensitive"] == "region"
    assert materializer_for(ev).name == "json"
    back = load_object(workspace.artifacts, **_load_args(save_object(workspace.artifacts, ev)))
    assert type(back) is dict and back == ev
    assert Evaluation.from_dict(back).value("f1") == ev.value("f1")


def _load_args(record: Any) -> dict[str, Any]:
    return {"h": record.hash, "materializer": record.materializer, "meta": record.meta}


def test_multiclass_model_with_string_classes() -> None:
    rng = np.random.default_rng(1)
    X = rng.normal(size=(150, 2))
    y = np.array(["ant", "bee", "cat"])[np.argmax(X @ rng.normal(size=(2, 3)), axis=1)]
    ev = evaluate(LogisticRegression().fit(X, y), X, y, bootstrap=50)
    assert ev.task == "multiclass" and ev["labels"] == ["ant", "bee", "cat"]
    assert set(ev["curves"]["roc"]) == {"ant", "bee", "cat"}
    assert ev["confusion_matrix"]["labels"] == ["ant", "bee", "cat"]


def test_regression_model_and_predictions(regression: dict[str, Any]) -> None:
    X = regression["pred"].reshape(-1, 1)
    ev = evaluate(LinearRegression().fit(X, regression["y"]), X, regression["y"], bootstrap=50)
    assert ev.task == "regression" and ev["per_class"] is None
    assert set(ev["metrics"]) == {"mae", "rmse", "r2", "mape"}
    assert len(ev["curves"]["predicted_vs_actual"]["actual"]) == 200


def test_torch_module() -> None:
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(2, 3))
    X = np.random.default_rng(0).normal(size=(40, 2)).astype(np.float32)
    y = np.random.default_rng(1).integers(0, 3, 40)
    net.train()
    ev = evaluate(net, X, y, bootstrap=0)
    assert ev.task == "multiclass" and net.training  # the module's mode is restored
    with torch.no_grad():
        expected = net(torch.as_tensor(X)).argmax(dim=1).numpy()
    assert ev.value("accuracy") == pytest.approx(float((expected == y).mean()))


@pytest.mark.parametrize(("args", "kwargs", "message"), [
    ((LogisticRegression(),), {"X": [[0], [1]], "y": [0, 1]}, "is not fitted"),
    ((object(),), {"X": [[0]], "y": [0]}, "has no predict"),
    ((LogisticRegression(),), {"y": [0, 1]}, "no X to predict on"),
    ((LogisticRegression(),), {"X": [[0]], "y": [0], "y_pred": [0]}, "not both"),
    ((), {"y": [0, 1], "y_pred": [0, 1], "bootstrap": -5}, "bootstrap must be"),
    ((), {"y": [0, 1], "y_pred": [0, 1], "slices": [3]}, "slices must be column names"),
])
def test_bad_calls(args: tuple[Any, ...], kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(UserError, match=message):
        evaluate(*args, **kwargs)


def test_logs_headline_metrics_and_report_to_the_active_run(workspace: Any) -> None:
    X = {"g": np.array(["a", "b"] * 20)}
    y, p = np.array([0, 1, 1, 0] * 10), np.linspace(0.1, 0.9, 40)
    with reprise.start_run("train", workspace=workspace) as run:
        for i in range(3):
            reprise.log_metric("train/loss", 1.0 / (i + 1), step=i)
        ev = evaluate(y=y, y_proba=p, X=X, slices="g", sensitive="g", min_slice_size=5,
                      gates={"f1": ">= 0.1"}, bootstrap=100)
    final = {k: v.value for k, v in workspace.metadata.latest_metrics([run.id])[run.id].items()}
    assert final["f1"] == ev.value("f1")
    assert final["f1.ci_low"] == ev["metrics"]["f1"]["ci_low"]
    assert final["worst_slice.f1"] == ev["worst_slice"]["f1"]["value"]
    assert "fairness.demographic_parity_difference" in final and final["gates.passed"] == 1.0
    html = workspace.artifacts.get_bytes(
        workspace.metadata.run_artifacts(run.id)["evaluation.html"].hash)
    assert b'id="fig-history"' in html
    assert b"train\\u002floss" in html  # plotly escapes / in its JSON


def test_outside_a_run_nothing_is_logged(workspace: Any) -> None:
    evaluate(y=[0, 1, 1], y_pred=[0, 1, 0], bootstrap=0)
    assert workspace.metadata.list_runs() == []


FLOW = '''
import numpy as np
import reprise
from reprise import step
from reprise.evaluate import evaluate


@step
def score(n: int) -> dict:
    y = np.arange(n) % 2
    return evaluate(y=y, y_proba=np.where(y == 1, 0.8, 0.3), bootstrap=50)


@step
def twice(n: int) -> int:
    y = np.arange(n) % 2
    evaluate(y=y, y_pred=y, bootstrap=0, name="val")
    evaluate(y=y, y_pred=1 - y, bootstrap=0, name="test")
    return n


@reprise.pipeline
def flow(n: int = 20):
    twice(n)
    return score(n)
'''


def test_inside_a_step_metrics_are_step_metrics_and_the_report_an_output(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "evalflow.py").write_text(textwrap.dedent(FLOW))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    ws = reprise.init(tmp_path)
    from reprise.pipeline import load_pipeline

    try:
        res = load_pipeline("evalflow.py:flow").run(workers=1)
    finally:
        sys.modules.pop("evalflow", None)
    assert Evaluation.from_dict(res["score"]).value("accuracy") == 1.0
    names = {o["name"] for o in res.nodes["score"].outputs}
    assert names == {"output", "artifacts/evaluation.html"}
    final = ws.metadata.latest_metrics([res.run_id])[res.run_id]
    assert final["score/accuracy"].value == 1.0 and "score/accuracy.ci_high" in final
    # several evaluations in one step, told apart by name=
    assert final["twice/val/accuracy"].value == 1.0 and final["twice/test/accuracy"].value == 0
    assert {o["name"] for o in res.nodes["twice"].outputs} == {
        "output", "artifacts/evaluation-val.html", "artifacts/evaluation-test.html"}
    from reprise.evaluate import load_report

    with pytest.raises(UserError, match="--step twice --name test; --step twice --name val"):
        load_report(ws, res.run_id, step="twice")
    _, ref, html = load_report(ws, res.run_id, step="twice", name="test")
    assert ref.name == "test" and html.startswith(b"<!DOCTYPE html>")
    with pytest.raises(UserError, match="name must be"):
        evaluate(y=[0, 1], y_pred=[0, 1], name="../x")


def test_sample_weight_reaches_metrics_slices_and_intervals(binary: dict[str, Any]) -> None:
    """Issue 21.4: sample_weight= raised TypeError."""
    from sklearn.metrics import f1_score, roc_auc_score

    y, pr, w = binary["y"], binary["p"], binary["age"]
    X = {"region": binary["region"]}
    ev = evaluate(y=y, y_proba=pr, X=X, slices=["region"], sample_weight=w, bootstrap=100)
    assert ev.value("roc_auc") == pytest.approx(roc_auc_score(y, pr, sample_weight=w))
    north = binary["region"] == "north"
    row = next(r for r in ev["slices"] if r["segment"] == "region=north")
    assert row["metrics"]["f1"] == pytest.approx(
        f1_score(y[north], pr[north] >= 0.5, sample_weight=w[north]))
    assert ev["sample_weight"]["total"] == pytest.approx(w.sum())
    assert len(y) / 1.2 < ev["sample_weight"]["effective_rows"] < len(y)
    assert ev["metrics"]["f1"]["ci_method"] == "clopper-pearson"
    assert ev["confusion_matrix"]["matrix"][1][1] == pytest.approx(w[(y == 1) & (pr >= 0.5)].sum())
    unweighted = evaluate(y=y, y_proba=pr, bootstrap=100)
    assert unweighted["sample_weight"] is None
    assert ev["curves"]["roc"] != unweighted["curves"]["roc"]  # the curves are weighted too
    assert ev["metrics"]["log_loss"] != unweighted["metrics"]["log_loss"]
