"""``reprise monitor watch``: one round with the real live detector over a logged window
(alarm -> webhook on loopback; a second round records nothing new), and a bad policy is a
user error (exit 2) naming the key."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from reprise.cli import main
from tests.monitor._live_setup import log_traffic, setup_model, traffic
from tests.monitor.test_loop import Receiver


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out = capsys.readouterr()
    return int(exc.value.code or 0), out.out, out.err


def test_watch_once_raises_the_alarm_and_notifies(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    ws, model = setup_model(tmp_path)
    log_traffic(ws, model, traffic(500, seed=3, shift=1.0), at=1000)
    with Receiver() as rx:
        (tmp_path / "loop.yaml").write_text(yaml.safe_dump({
            "window": 500, "reference": "train@1", "rules": [{"on": "input_drift", "do": "notify"}],
            "notify": {"url": rx.url, "timeout": "2s"}}))
        code, out, err = _cli(capsys, "monitor", "watch", "churn@production", "--policy",
                              "loop.yaml", "--once", "--json")
        assert code == 0, err
        doc: dict[str, Any] = json.loads(out)
        assert doc["leader"] is True
        kinds = {a["kind"] for a in doc["alarms"]}
        assert "input_drift" in kinds
        notified = [a for a in doc["actions"] if a["action"] == "notify"]
        assert notified[0]["outcome"] == "succeeded"
        assert rx.bodies[0]["alarm"]["kind"] == "input_drift"
        # the same window again (a restart, another --once): nothing new to record
        code, out, _ = _cli(capsys, "monitor", "watch", "churn@production", "--policy",
                            "loop.yaml", "--once")
        assert code == 0 and "alarm-" in out and "(new)" not in out
        assert len(rx.bodies) == 1


def test_a_bad_policy_is_a_user_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    setup_model(tmp_path)
    (tmp_path / "loop.yaml").write_text("rules: [{on: input_drift, do: reboot}]\n")
    code, _, err = _cli(capsys, "monitor", "watch", "churn@production", "--policy",
                        "loop.yaml", "--once")
    assert code == 2 and "rules[0].do" in err and "'reboot'" in err
    code, _, err = _cli(capsys, "monitor", "watch", "churn:1", "--policy", "loop.yaml")
    assert code == 2


def test_a_stopped_retrain_and_a_lost_lease_are_shown(capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    from reprise.cli._monitor_watch import _print
    from reprise.monitor._loop import TickResult
    from tests.monitor.test_loop import alarm

    a = alarm()
    res = TickResult(leader=True, alarms=[a], new_alarms=[a.id], lease_lost=True,
                     actions=[{"action": "retrain", "alarm": a.id, "outcome": "failed",
                               "reason": "lease_lost", "error": "the retraining process 7 "
                               "was stopped"}])
    _print("churn@production", res, False)
    out = capsys.readouterr().out
    assert "  retrain: failed (lease_lost: the retraining process 7 was stopped)" in out
    assert "churn@production: this watcher lost its lease during the round" in out
    _print("churn@production", res, True)
    assert json.loads(capsys.readouterr().out)["lease_lost"] is True
