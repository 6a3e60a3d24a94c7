"""``reprise monitor NAME[@alias]`` (the live windows), its exit codes, and
``reprise monitor report NAME@alias -o drift.html``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from reprise.cli import main
from tests.monitor._live_setup import log_traffic, setup_model, traffic


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out = capsys.readouterr()
    return int(exc.value.code or 0), out.out, out.err


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.chdir(tmp_path)
    ws, model = setup_model(tmp_path)
    log_traffic(ws, model, traffic(1000, seed=11), at=1000)
    log_traffic(ws, model, traffic(1000, seed=12, shift=0.5), at=5000)
    yield ws
    ws.close()


def test_monitor_a_model_as_a_table_and_as_json(served: Any,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _cli(capsys, "monitor", "churn@production", "--windows", "2",
                        "--reference", "train@1")
    assert code == 0  # a report: drifting is not a failure
    assert "ALARM input_drift" in out and "inputs drift" in out and "inputs no_drift" in out
    code, out, _ = _cli(capsys, "monitor", "show", "churn:1", "--window", "500", "--json",
                        "--reference", "train@1")
    doc = json.loads(out)
    assert code == 0 and [w["window"]["rows"] for w in doc["windows"]] == [500]
    assert doc["windows"][0]["verdicts"]["input_drift"] == "drift"
    assert {a["kind"] for a in doc["alarms"]} == {"input_drift", "prediction_drift"}
    code, _, _ = _cli(capsys, "monitor", "churn@production", "--reference", "train@1",
                      "--fail-on-alarm")
    assert code == 1
    strict = Path("strict.yaml")  # in the workspace (the current directory)
    strict.write_text("min_rows: 5000\n")  # every window is then too small for a verdict
    code, out, _ = _cli(capsys, "monitor", "churn", "--policy", str(strict), "--json",
                        "--fail-on-alarm")
    assert code == 0 and json.loads(out)["windows"][0]["verdicts"]["input_drift"] == \
        "insufficient"


def test_bad_refs_and_options_exit_2(served: Any, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _cli(capsys, "monitor", "nosuch")
    assert code == 2 and "no model 'nosuch'" in err
    code, _, err = _cli(capsys, "monitor", "churn@production")
    assert code == 2 and "--reference DATASET@N" in err
    code, _, err = _cli(capsys, "monitor", "churn", "--window", "soon", "--reference",
                        "train@1")
    assert code == 2 and "window 'soon'" in err
    code, _, err = _cli(capsys, "monitor", "compre")  # a typo is not taken for a model
    assert code == 2 and "No such command" in err
    code, out, _ = _cli(capsys, "monitor", "--help")
    assert code == 0 and "compare" in out and "show" in out and "requests" in out


def test_a_live_html_report(served: Any, tmp_path: Path,
                            capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _cli(capsys, "monitor", "report", "churn@production", "--reference",
                        "train@1", "-o", str(tmp_path / "drift.html"))
    page = (tmp_path / "drift.html").read_bytes()
    assert code == 0 and "inputs drift" in out
    assert page.startswith(b"<!DOCTYPE html>") and len(page) <= 5 * 1024 * 1024
    assert b"Live drift of churn:1" in page


def test_a_version_that_never_logged_a_request_exits_2(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    ws, _ = setup_model(tmp_path)  # registered and promoted, never served
    try:
        for args in (("monitor", "churn@production"), ("monitor", "churn:1", "--json"),
                     ("monitor", "report", "churn@production", "-o", "d.html")):
            code, out, err = _cli(capsys, *args, "--reference", "train@1")
            assert code == 2 and "churn:1 has no logged requests" in err, (args, err)
            assert "reprise serve churn" in err and "Traceback" not in err + out
        assert not Path("d.html").exists()
    finally:
        ws.close()


def test_an_empty_range_of_a_version_that_logged_is_a_report(
        served: Any, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _cli(capsys, "monitor", "churn@production", "--reference", "train@1",
                        "--since", "1s")  # the fixture's traffic is from 1970
    assert code == 0 and "no logged traffic of churn:1 in that range" in out


def test_a_policy_naming_a_column_the_model_lacks_exits_2(
        served: Any, capsys: pytest.CaptureFixture[str]) -> None:
    Path("typo.yaml").write_text("columns: {aa: {ignore: true}}\n")
    code, out, err = _cli(capsys, "monitor", "churn@production", "--reference", "train@1",
                          "--policy", "typo.yaml")
    assert code == 2 and "names column(s) ['aa'] that churn:1" in err and "'a'" in err
    Path("ok.yaml").write_text("columns: {b: {ignore: true}, score: {threshold: 0.5}}\n")
    code, out, err = _cli(capsys, "monitor", "churn@production", "--reference", "train@1",
                          "--policy", "ok.yaml")  # an input and an output column
    assert code == 0, err
