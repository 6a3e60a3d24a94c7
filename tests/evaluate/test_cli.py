"""``reprise report`` end to end, and a failing gate stopping a pipeline."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import reprise
from reprise.evaluate import evaluate

FLOW = '''
import numpy as np
import reprise
from reprise import step
from reprise.evaluate import evaluate

Y = [0, 1, 1, 0, 1, 0, 1, 1]
PRED = [0, 1, 0, 0, 1, 0, 1, 1]


@step
def check_a(n: int) -> dict:
    return evaluate(y=Y, y_pred=PRED, bootstrap=0)


@step
def check_b(n: int) -> dict:
    return evaluate(y=Y, y_pred=PRED, bootstrap=0, gates={"accuracy": ">= 0.99"})


@step
def register(evaluation: dict) -> int:
    return 1


@step
def plain(n: int) -> int:
    return n


@reprise.pipeline
def two(n: int = 1):
    check_a(n)
    return check_a(n + 1)


@reprise.pipeline
def gated(n: int = 1):
    return register(check_b(n))


@reprise.pipeline
def none(n: int = 1):
    return plain(n)
'''


def cli(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "REPRISE_WORKSPACE"}
    return subprocess.run([sys.executable, "-m", "reprise.cli", *args], cwd=root, env=env,
                          capture_output=True, text=True, timeout=240)


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    (tmp_path / "reportflow.py").write_text(textwrap.dedent(FLOW))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    reprise.init(tmp_path)
    yield tmp_path
    sys.modules.pop("reportflow", None)


def test_report_of_a_plain_run(project: Path) -> None:
    ws = reprise.open_workspace()
    with reprise.start_run("eval", workspace=ws) as run:
        evaluate(y=[0, 1, 1, 0], y_proba=[0.2, 0.9, 0.6, 0.4], bootstrap=50)
    stored = ws.artifacts.get_bytes(ws.metadata.run_artifacts(run.id)["evaluation.html"].hash)
    res = cli(project, "report", run.id[:10], "-o", "out/report.html")  # folder made too
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "out/report.html"
    assert (project / "out" / "report.html").read_bytes() == stored


def test_report_of_a_pipeline_run_picks_the_step(project: Path) -> None:
    run = cli(project, "run", "reportflow.py:two", "--workers", "1", "--json")
    assert run.returncode == 0, run.stderr
    import json

    run_id = json.loads(run.stdout)["run_id"]
    several = cli(project, "report", run_id)
    assert several.returncode == 2
    assert "pick one with --step/--name: --step check_a; --step check_a_2" in several.stderr
    picked = cli(project, "report", run_id, "--step", "check_a_2")
    assert picked.returncode == 0, picked.stderr
    out = project / f"evaluation-{run_id[:8]}.html"
    assert picked.stdout.strip() == out.name and out.read_bytes().startswith(b"<!DOCTYPE html>")
    wrong = cli(project, "report", run_id, "--step", "nope")
    assert wrong.returncode == 2 and "it has: --step check_a; --step check_a_2" in wrong.stderr


def test_no_report_and_unknown_run_exit_2(project: Path) -> None:
    res = reprise.pipeline.load_pipeline("reportflow.py:none").run(workers=1)
    none = cli(project, "report", res.run_id)
    assert none.returncode == 2
    assert "has no evaluation report; call reprise.evaluate.evaluate(" in none.stderr
    unknown = cli(project, "report", "zzzzzzzz")
    assert unknown.returncode == 2 and unknown.stderr.startswith("error:")


class _Recorder:
    """A progress sink that keeps the final node statuses."""

    def start(self, run_id: str, pipeline: str, nodes: list[str]) -> None:
        self.statuses: dict[str, str] = {}

    def update(self, node: str, status: str, **_: Any) -> None:
        self.statuses[node] = status

    def finish(self, result: Any) -> None:
        self.statuses = {n: s.status for n, s in result.nodes.items()}


def test_a_failing_gate_fails_its_step_and_skips_downstream(project: Path) -> None:
    from reprise.pipeline import StepFailedError, load_pipeline

    progress = _Recorder()
    with pytest.raises(StepFailedError) as info:
        load_pipeline("reportflow.py:gated").run(workers=1, progress=progress)
    assert progress.statuses == {"check_b": "failed", "register": "skipped"}
    assert "GateFailedError" in info.value.error and "accuracy >= 0.99" in info.value.error
    run = reprise.open_workspace().metadata.get_run(info.value.run_id)
    assert run.status.value == "failed" and "quality gate(s) failed" in (run.error or "")


def test_open_writes_then_opens_the_file(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import webbrowser

    from reprise.cli import main

    ws = reprise.open_workspace()
    with reprise.start_run("eval", workspace=ws) as run:
        evaluate(y=[0, 1, 1, 0], y_pred=[0, 1, 1, 1], bootstrap=0)
    opened: list[str] = []
    monkeypatch.setattr(webbrowser, "open", opened.append)
    with pytest.raises(SystemExit) as done:
        main(["report", run.id, "--open"])
    assert done.value.code == 0
    path = project / f"evaluation-{run.id[:8]}.html"
    assert opened == [path.resolve().as_uri()] and path.exists()
