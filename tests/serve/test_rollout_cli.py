"""``reprise rollout ...`` end to end (issue 14.1, 14.5): real processes on a workspace with
two registered versions; user errors exit 2 with one line; the audit log shows rollout
decisions readably and verifies."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import reprise
from reprise.core import LATENCY_BOUNDS_MS, BucketRow
from reprise.core._rollout_types import bucket_of, bucket_seconds
from reprise.registry import promote, register_package
from tests.registry.test_registry import pkg

ROOT = Path(__file__).resolve().parents[2]


def cli(root: Path, *args: str, code: int = 0) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "REPRISE_ACTOR": "ops", "COLUMNS": "200",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run([sys.executable, "-m", "reprise.cli", *args], cwd=root, env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == code, f"reprise {args}: {res.returncode}\n{res.stdout}\n{res.stderr}"
    return res


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.chdir(tmp_path)
    ws = reprise.init(tmp_path)
    register_package("churn", pkg(1.0), workspace=ws)
    register_package("churn", pkg(0.5), workspace=ws)
    promote("churn", 1, "production", workspace=ws)
    yield tmp_path, ws
    ws.close()


def feed(ws: Any, rollout_id: str, interval_s: float) -> None:
    """What a server following churn@production would have flushed: both versions healthy."""
    b = bucket_of(time.time(), bucket_seconds(interval_s))
    rows = []
    for version, n in ((1, 3000), (2, 400)):
        latency = [0] * (len(LATENCY_BOUNDS_MS) + 1)
        latency[2] = n
        rows.append(BucketRow(rollout_id, version, b, "srv", n, 0, latency,
                              {"0": n // 2, "1": n - n // 2}))
    ws.metadata.add_buckets(rows)


def test_a_rollout_from_start_to_promotion(project: Any) -> None:
    root, ws = project
    rec = json.loads(cli(root, "rollout", "start", "churn", "2", "--steps", "10,100",
                         "--interval", "250ms", "--key-header", "X-Request-Key",
                         "--json").stdout)
    assert (rec["stable"], rec["candidate"], rec["weight"], rec["key"]) == (
        1, 2, 10.0, {"header": "x-request-key"})
    status = cli(root, "rollout", "status", "churn").stdout
    assert "churn@production: canary 1 -> 2, running, step 1 of 2, candidate weight 10%" in status
    assert "insufficient data: 0 of 200 requests" in status
    listed = cli(root, "rollout", "list").stdout
    assert rec["id"] in listed and "1 -> 2" in listed and "running" in listed

    feed(ws, rec["id"], 0.25)
    time.sleep(0.3)
    out = cli(root, "rollout", "analyze", "churn").stdout
    assert out.startswith("step (applied): all checks pass: weight 10% -> 100%")
    data = json.loads(cli(root, "rollout", "status", "churn", "--json").stdout)
    assert data["rollout"]["weight"] == 100.0
    assert [d["action"] for d in data["decisions"]] == ["rollout.start", "rollout.step"]

    out = cli(root, "rollout", "promote", "churn", "--reason", "dashboards look fine").stdout
    assert out.startswith("churn@production -> 2 (was 1)")
    assert '"production": 2' in cli(root, "models", "show", "churn", "--json").stdout

    log = cli(root, "audit", "log").stdout
    assert f"rollout {rec['id']}: 1 -> 2, canary 10,100, every 0.25 s" in log
    assert f"rollout {rec['id']} #1; all checks pass: weight 10% -> 100%" in log
    assert "dashboards look fine" in log and "rollout.promote" in log
    assert "audit log intact" in cli(root, "audit", "verify").stdout
    events = json.loads(cli(root, "audit", "log", "--json").stdout)
    assert [e["action"] for e in events][-4:] == ["rollout.start", "rollout.step",
                                                  "rollout.promote", "promote"]


def test_abort_keeps_the_alias_and_status_shows_the_end(project: Any) -> None:
    root, _ = project
    cli(root, "rollout", "start", "churn", "2", "--strategy", "blue-green")
    out = cli(root, "rollout", "abort", "churn", "--reason", "wrong build").stdout
    assert "aborted; churn@production stays at 1" in out
    status = cli(root, "rollout", "status", "churn").stdout
    assert "aborted" in status and "reason: wrong build" in status
    assert cli(root, "rollout", "list", "--running").stdout == "No running rollouts.\n"


@pytest.mark.parametrize(("args", "message"), [
    (["start", "churn", "1"], "is version 1 already"),
    (["start", "churn", "two"], "CANDIDATE must be a version number"),
    (["start", "churn", "2", "--steps", "a,b"], "--steps takes whole percentages"),
    (["start", "churn", "2", "--alias", "staging"], "has no alias 'staging'"),
    (["start", "churn", "2", "--policy", "policy.yaml"], "unknown key latency.p95_max_ms"),
    (["start", "nope", "2"], "no model 'nope'"),
    (["status", "churn"], "has no running rollout"),
    (["abort", "churn"], "has no running rollout"),
])
def test_user_errors_exit_2_with_one_line(project: Any, args: list[str], message: str) -> None:
    root, _ = project
    (root / "policy.yaml").write_text("latency:\n  p95_max_ms: 100\n")
    res = cli(root, "rollout", *args, code=2)
    assert message in res.stderr and res.stderr.startswith("error: ")
    assert len(res.stderr.strip().splitlines()) == 1


def test_a_second_rollout_on_the_alias_is_refused(project: Any) -> None:
    root, ws = project
    register_package("churn", pkg(0.2), workspace=ws)
    cli(root, "rollout", "start", "churn", "2")
    res = cli(root, "rollout", "start", "churn", "3", code=2)
    assert "already has a running rollout" in res.stderr


def test_status_shows_holds_in_a_row_waiting_for_data_as_one_row() -> None:
    from reprise.cli._rollout import _decision_rows

    def d(seq: int, action: str, reason: str | None, weight: float = 20.0) -> dict[str, Any]:
        return {"seq": seq, "time": 1.8e9 + seq, "action": f"rollout.{action}",
                "weight": weight, "actor": "srv", "reason": reason}

    waits = [d(n, "hold", f"insufficient data: {n * 10} of 100 requests (candidate v2)")
             for n in range(2, 6)]
    rows = _decision_rows([d(1, "start", None), *waits, d(6, "step", "all checks pass", 50),
                           d(7, "hold", "insufficient data: 3 of 100 requests (candidate v2)"),
                           d(8, "hold", "failed analysis 1 of 2: prediction_shift: ..."),
                           d(9, "hold", "insufficient data: 9 of 100 requests (candidate v2)"),
                           d(10, "rollback", "2 failed analyses in a row", 0)])
    assert [(r[0], r[2], r[5]) for r in rows] == [
        ("1", "start", "-"),
        ("2-5", "hold", "4 holds, the last: insufficient data: 50 of 100 requests "
                        "(candidate v2)"),
        ("6", "step", "all checks pass"),
        ("7", "hold", "insufficient data: 3 of 100 requests (candidate v2)"),
        ("8", "hold", "failed analysis 1 of 2: prediction_shift: ..."),
        ("9", "hold", "insufficient data: 9 of 100 requests (candidate v2)"),
        ("10", "rollback", "2 failed analyses in a row")]
    from reprise.cli._render import timestamp

    assert rows[1][1] == timestamp(1.8e9 + 5) and rows[1][3] == "20%"  # the last hold's


def test_the_audit_log_line_of_a_hold_names_the_weight_it_keeps() -> None:
    from reprise.cli._models import _rollout_details

    hold = {"rollout": "r1", "decision": 3, "from": {"weight": 25.0}, "weight": 25.0,
            "reason": "insufficient data: 9 of 100 requests (candidate v2)"}
    step = {**hold, "weight": 50.0, "reason": "all checks pass"}
    assert _rollout_details("rollout.hold", hold) == (
        "rollout r1 #3; weight 25%; insufficient data: 9 of 100 requests (candidate v2)")
    assert _rollout_details("rollout.step", step) == (
        "rollout r1 #3; weight 25% -> 50%; all checks pass")
