"""The read-only listings on the fast path, on SQLite (read through sqlite3) and
PostgreSQL (through SQLAlchemy): the same answers, newest first, limits honoured,
final metrics by the highest step, a live run's unread lines caught up."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import reprise


def _cli(root: Path, *args: str, code: int = 0) -> Any:
    res = subprocess.run([sys.executable, "-m", "reprise.cli", *args], cwd=root,
                         capture_output=True, text=True, timeout=120, env=os.environ.copy())
    assert res.returncode == code, res.stderr
    return json.loads(res.stdout) if "--json" in args else res


@pytest.fixture
def ws(tmp_path: Path, store_url: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("REPRISE_STORE_URL", store_url)
    w = reprise.init(tmp_path)
    yield w
    w.close()


def test_runs_list_and_show(ws: Any) -> None:
    ids = []
    for i in range(3):
        with reprise.start_run("train", params={"i": i}, workspace=ws) as run:
            run.log_metric("loss", 1.0, step=5)
            run.log_metric("loss", 9.0, step=2)  # a lower step written later: not final
            run.log_metric("acc", 0.1 * i)
            ids.append(run.id)
        with reprise.start_run("trial", parent=run, workspace=ws):
            pass
    listed = _cli(ws.root, "runs", "list", "--json", "--limit", "2")
    assert [r["id"] for r in listed] == ids[::-1][:2]
    assert listed[0]["metrics"] == {"acc": pytest.approx(0.2), "loss": 1.0}
    assert len(_cli(ws.root, "runs", "list", "--json", "--all")) == 6
    assert [r["id"] for r in _cli(ws.root, "runs", "list", "--json", "--sort", "acc",
                                   "--asc")] == ids
    shown = _cli(ws.root, "runs", "show", ids[0][:12], "--json")
    assert shown["id"] == ids[0] and shown["params"] == {"i": 0}
    assert shown["metric_steps"] == {"acc": 0, "loss": 5} and len(shown["children"]) == 1
    assert "loss" in _cli(ws.root, "runs", "list").stdout
    bad = _cli(ws.root, "runs", "show", "nope", code=2)
    assert "no run with id 'nope'" in bad.stderr
    assert "unknown status 'x'" in _cli(ws.root, "runs", "list", "--status", "x",
                                        code=2).stderr
    assert "invalid int value" in _cli(ws.root, "runs", "list", "--limit", "x", code=2).stderr


def test_live_run_lines_are_caught_up(ws: Any) -> None:
    run = reprise.start_run("live", workspace=ws)
    try:
        run.log_metric("loss", 0.5)
        listed = _cli(ws.root, "runs", "list", "--json")
        assert listed[0]["id"] == run.id and listed[0]["metrics"] == {"loss": 0.5}
        assert listed[0]["status"] == "running"
    finally:
        run.end()


def test_data_and_models_list_empty_and_json(ws: Any) -> None:
    assert "No datasets yet" in _cli(ws.root, "data", "list").stdout
    assert _cli(ws.root, "models", "list", "--json") == []
    path = ws.root / "d.csv"
    path.write_text("a,b\n1,2\n3,4\n")
    _cli(ws.root, "data", "add", "d", str(path))
    path.write_text("a,b\n1,2\n")
    _cli(ws.root, "data", "add", "d", str(path))
    (row,) = _cli(ws.root, "data", "list", "--json")
    assert (row["name"], row["latest"], row["versions"], row["rows"]) == ("d", 2, 2, 1)
