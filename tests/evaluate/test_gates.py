"""Quality gates: parsing, directions, failures, baselines from runs."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import reprise
from reprise.core.errors import GateFailedError, RunNotFoundError, UserError
from reprise.evaluate import Gate, baseline_metrics, check_gates, evaluate, parse_gates
from reprise.evaluate._baseline import baseline_value
from reprise.evaluate._gates import gate_names


@given(st.sampled_from(gate_names()), st.sampled_from([">=", ">", "<=", "<", "baseline"]),
       st.floats(allow_nan=False, allow_infinity=False, min_value=0.0))
def test_parse_of_format_is_identity(metric: str, op: str, value: float) -> None:
    gate = Gate(metric, op, value)
    assert parse_gates({metric: gate.text}) == [gate]


def test_spellings_are_accepted() -> None:
    gates = parse_gates({"f1": ">=0.9", "mae": "  NO worse than baseline by 1e-2 ",
                         "roc_auc": "> .8", "worst_slice.f1": "no worse than baseline"})
    assert [(g.op, g.value) for g in gates] == [(">=", 0.9), ("baseline", 0.01), (">", 0.8),
                                                ("baseline", 0.0)]


@pytest.mark.parametrize(("gates", "message"), [
    ({"f2": ">= 0.9"}, r"unknown metric 'f2'; known metrics are accuracy, .*worst_slice\.<"),
    ({"f1": "=> 0.9"}, "cannot read rule '=> 0.9'; write one of '>= X', '> X'"),
    ({"f1": ">= ninety"}, "cannot read rule"),
    ({"f1": ">= 1e999"}, "not a finite number"),
    ({"f1": 0.9}, "the rule must be a string"),
    ({"f1": "no worse than baseline by -0.1"}, "margin must be >= 0"),
    ({"f1": "better than baseline"}, "cannot read rule"),
    (["f1 >= 0.9"], "gates must be a dict"),
])
def test_parse_errors(gates: Any, message: str) -> None:
    with pytest.raises(UserError, match=message):
        parse_gates(gates)


class _Spy:
    """A model that records whether it was asked to predict."""

    called = False

    def predict(self, X: Any) -> Any:
        self.called = True
        return np.zeros(len(X), dtype=int)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"gates": {"f2": ">= 1"}}, "unknown metric"),
    ({"gates": {"f1": "=="}}, "cannot read rule"),
    ({"bins": 0}, "bins must be"),
    ({"confidence": 2.0}, "between 0 and 1"),
    ({"gates": {"f1": "no worse than baseline"}, "baseline": "model@prod"}, "run:<RUN_ID>"),
])
def test_gate_and_option_errors_come_before_any_prediction(kwargs: dict[str, Any],
                                                           message: str) -> None:
    spy = _Spy()
    with pytest.raises(UserError, match=message):
        evaluate(spy, [[0], [1]], [0, 1], **kwargs)
    assert not spy.called


@pytest.mark.parametrize(("gates", "extra", "message"), [
    ({"worst_slice.f1": ">= 0.5"}, {}, "needs slices="),
    ({"worst_slice.mae": "<= 0.5"}, {"slices": ["g"]}, "slices of a binary"),
    ({"fairness.demographic_parity_difference": "<= 0.1"}, {}, "needs sensitive="),
    ({"f1.ci_low": ">= 0.5"}, {"bootstrap": 0}, "needs bootstrap intervals"),
    ({"roc_auc": ">= 0.5"}, {"metrics": ["f1"]}, "metric 'roc_auc' is not computed here"),
    ({"mae": "<= 0.5"}, {}, "metric 'mae' is not computed here"),
    ({"f1": "no worse than baseline"}, {}, "pass baseline='run:<RUN_ID>'"),
])
def test_gates_that_cannot_apply(gates: dict[str, str], extra: dict[str, Any],
                                 message: str) -> None:
    X = {"g": np.array(["a", "b"] * 10)}
    with pytest.raises(UserError, match=message):
        evaluate(y=[0, 1] * 10, y_proba=[0.2, 0.7] * 10, X=X, gates=gates, **extra)


def test_no_worse_respects_direction() -> None:
    gates = parse_gates({"f1": "no worse than baseline by 0.01",
                         "log_loss": "no worse than baseline by 0.01"})
    base = {"f1": 0.80, "log_loss": 0.30}
    ok = check_gates(gates, {"f1": 0.795, "log_loss": 0.305}, base)
    assert [r["passed"] for r in ok] == [True, True]
    bad = check_gates(gates, {"f1": 0.78, "log_loss": 0.32}, base)
    assert [r["passed"] for r in bad] == [False, False]
    assert [r["threshold"] for r in bad] == pytest.approx([0.79, 0.31])
    assert [r["by"] for r in bad] == pytest.approx([0.01, 0.01])
    improved = check_gates(gates, {"f1": 0.9, "log_loss": 0.1}, base)
    assert all(r["passed"] for r in improved)


def test_undefined_value_fails_its_gate() -> None:
    [res] = check_gates(parse_gates({"roc_auc": ">= 0.5"}), {"roc_auc": None})
    assert not res["passed"] and res["by"] is None


def test_failing_gate_raises_a_table_after_logging(workspace: Any) -> None:
    y, p = [0, 1, 1, 0, 1, 0], [0.2, 0.4, 0.9, 0.6, 0.7, 0.1]
    with pytest.raises(GateFailedError) as info, \
            reprise.start_run("eval", workspace=workspace) as run:
        evaluate(y=y, y_proba=p, gates={"accuracy": ">= 0.9", "roc_auc": ">= 0.5"},
                 bootstrap=100)
    text = str(info.value)
    assert "1 of 2 quality gate(s) failed" in text
    assert "accuracy >= 0.9" in text and "0.6667" in text and "0.2333" in text
    assert "roc_auc" not in text  # passed gates are not listed
    assert info.value.evaluation["gates"]["passed"] is False
    final = workspace.metadata.latest_metrics([run.id])[run.id]
    assert final["gates.passed"].value == 0.0 and final["accuracy"].value == pytest.approx(2 / 3)
    assert "evaluation.html" in workspace.metadata.run_artifacts(run.id)


def test_fifty_right_answers_do_not_prove_99_percent() -> None:
    """Issue 21.1: the interval of 50/50 was [1, 1], so this gate passed on 50 rows."""
    with pytest.raises(GateFailedError) as info:
        evaluate(y=[0, 1] * 25, y_pred=[0, 1] * 25, gates={"accuracy.ci_low": ">= 0.99"},
                 bootstrap=100, log=False, report=False)
    [result] = info.value.evaluation["gates"]["results"]
    assert result["actual"] == pytest.approx(0.9289, abs=1e-4)


def test_passing_gates_are_recorded(workspace: Any) -> None:
    ev = evaluate(y=[0, 1, 1, 0], y_pred=[0, 1, 1, 0], gates={"f1": ">= 0.9"}, bootstrap=0)
    assert ev["gates"]["passed"] is True and ev.passed is True
    assert ev["gates"]["results"][0] == {"metric": "f1", "rule": ">= 0.9", "threshold": 0.9,
                                         "baseline": None, "actual": 1.0, "passed": True,
                                         "by": None}


def test_baseline_from_a_plain_run(workspace: Any) -> None:
    with reprise.start_run("old", workspace=workspace) as old:
        reprise.log_metrics({"f1": 0.75, "log_loss": 0.2})
    y, pred = [0, 1, 1, 0, 1, 0, 1, 1], [0, 1, 1, 0, 1, 0, 0, 1]  # f1 = 0.889
    ev = evaluate(y=y, y_pred=pred, gates={"f1": "no worse than baseline by 0.01"},
                  baseline=f"run:{old.id[:12]}", bootstrap=0, workspace=workspace)
    assert ev["gates"]["results"][0]["baseline"] == 0.75
    assert ev["baseline"] == f"run:{old.id[:12]}"
    with pytest.raises(GateFailedError, match="no worse than baseline"):
        evaluate(y=y, y_proba=[0.5] * 8, gates={"log_loss": "no worse than baseline"},
                 baseline=f"run:{old.id}", bootstrap=0, workspace=workspace)


def test_baseline_key_suffixes_of_pipeline_runs(workspace: Any) -> None:
    values = {"evaluate/f1": 0.8, "evaluate/mae": 1.0, "cv/mae": 2.0}
    assert baseline_value(values, "f1", "run:X") == 0.8
    with pytest.raises(UserError, match="from several steps.*baseline='run:X/"):
        baseline_value(values, "mae", "run:X")
    with pytest.raises(UserError, match="has no metric 'r2'; its metrics are cv/mae"):
        baseline_value(values, "r2", "run:X")
    with reprise.start_run("pipe", workspace=workspace) as run:
        reprise.log_metrics(values)
    assert baseline_metrics(f"run:{run.id}/cv", workspace) == {"mae": 2.0}
    with pytest.raises(UserError, match="no metrics logged by a step named 'nope'"):
        baseline_metrics(f"run:{run.id}/nope", workspace)


@pytest.mark.parametrize("ref", ["model@production", "churn", "run:", "runs:01ABC", 42])
def test_unknown_baseline_forms_list_the_accepted_ones(ref: Any, workspace: Any) -> None:
    with pytest.raises(UserError, match=r"run:<RUN_ID>, run:<RUN_ID>/<STEP>"):
        baseline_metrics(ref, workspace)


def test_unknown_baseline_run(workspace: Any) -> None:
    with pytest.raises(RunNotFoundError):
        evaluate(y=[0, 1], y_pred=[0, 1], gates={"f1": "no worse than baseline"},
                 baseline="run:zzzzzz", bootstrap=0, workspace=workspace)
