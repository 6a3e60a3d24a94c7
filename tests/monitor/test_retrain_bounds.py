"""The retraining process is bounded (issue 15.7, hardening): past ``retrain.timeout`` its
whole process group is ended (SIGTERM, then SIGKILL), the action is audited as failed with
reason ``timeout``, and nothing is registered."""

from __future__ import annotations

import os
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from reprise.monitor._loop import LoopActions, loop_events, watch_once
from reprise.monitor._retrain import RetrainStopped, run_bounded
from tests.monitor.test_loop import alarm, ws  # noqa: F401 (a fixture)

pytestmark = pytest.mark.skipif(os.name != "posix", reason="process groups are POSIX")

SLEEPER = """
import os, signal, subprocess, sys, time
if {ignore_term}:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
kid = subprocess.Popen([sys.executable, "-c", "import signal, time; "
                        + ("signal.signal(signal.SIGTERM, signal.SIG_IGN); " if {ignore_term}
                           else "") + "time.sleep(60)"])
with open({pids!r} + ".tmp", "w") as f:
    f.write(f"{{os.getpid()}} {{kid.pid}}")
os.replace({pids!r} + ".tmp", {pids!r})
time.sleep(60)
"""


def sleeper(tmp_path: Path, *, ignore_term: bool = False) -> tuple[list[str], Path]:
    """A process that starts a child of its own and sleeps; it writes both pids."""
    pids = tmp_path / "pids"
    script = tmp_path / "sleeper.py"
    script.write_text(textwrap.dedent(SLEEPER.format(ignore_term=ignore_term,
                                                     pids=str(pids))))
    return [sys.executable, str(script)], pids


def gone(pid: int, within_s: float = 10.0) -> bool:
    """True once ``pid`` no longer runs (gone, or a zombie nobody has reaped yet)."""
    end = time.monotonic() + within_s
    while True:
        try:
            os.kill(pid, 0)
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (ProcessLookupError, FileNotFoundError):
            return True
        if state in ("Z", "X"):
            return True
        if time.monotonic() > end:
            return False
        time.sleep(0.05)


def wait_for(path: Path, within_s: float = 20.0) -> list[int]:
    end = time.monotonic() + within_s
    while not path.exists():
        assert time.monotonic() < end, "the sleeper never started"
        time.sleep(0.05)
    return [int(p) for p in path.read_text().split()]


def test_a_timeout_ends_the_whole_process_group(tmp_path: Path) -> None:
    argv, pids = sleeper(tmp_path)
    t0 = time.monotonic()
    with pytest.raises(RetrainStopped, match="ran past retrain.timeout") as info:
        run_bounded(argv, timeout_s=4.0, grace_s=2.0)
    assert info.value.reason == "timeout"
    assert time.monotonic() - t0 < 30
    parent, child = wait_for(pids)
    assert info.value.pid == parent
    assert gone(parent) and gone(child)


def test_a_process_that_ignores_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    argv, pids = sleeper(tmp_path, ignore_term=True)
    with pytest.raises(RetrainStopped) as info:
        run_bounded(argv, timeout_s=4.0, grace_s=0.5)
    parent, child = wait_for(pids)
    assert info.value.reason == "timeout" and gone(parent) and gone(child)


def test_a_finished_process_returns_its_output(tmp_path: Path) -> None:
    code, out, err = run_bounded([sys.executable, "-c", "import sys; print('hi'); "
                                  "sys.stderr.write('x' * 200000); sys.exit(3)"],
                                 timeout_s=60)
    assert (code, out.strip(), len(err)) == (3, "hi", 200000)


def test_cancelling_ends_the_process(tmp_path: Path) -> None:
    argv, pids = sleeper(tmp_path)
    with pytest.raises(RetrainStopped, match="lost its lease") as info:
        run_bounded(argv, timeout_s=60, grace_s=2.0, cancelled=pids.exists)
    assert info.value.reason == "lease_lost"
    assert all(gone(p) for p in wait_for(pids))


def test_the_loop_audits_a_timed_out_retrain_and_registers_nothing(
        ws: Any, tmp_path: Path) -> None:  # noqa: F811
    argv, pids = sleeper(tmp_path)

    def slow_retrain(ws: Any, name: str, alias: str, alarm: Any, settings: Any,
                     **kw: Any) -> dict[str, Any]:
        run_bounded(argv, timeout_s=settings.timeout_s, grace_s=2.0)
        raise AssertionError("the retrain was not stopped")

    pol = {"rules": [{"on": "input_drift", "do": "retrain"}], "retrain": {"timeout": "4s"}}
    res = watch_once("churn@production", pol, lambda: [alarm()], workspace=ws, holder="w",
                     actions=LoopActions(retrain=slow_retrain))
    out = res.actions[0]
    assert out["outcome"] == "failed" and out["reason"] == "timeout", out
    last = loop_events(ws, "churn@production")[-1]
    assert last.action == "monitor.action.failed" and last.payload["reason"] == "timeout"
    assert "retrain.timeout (4s)" in last.payload["error"]
    parent, child = wait_for(pids)
    assert last.payload["pid"] == parent and gone(parent) and gone(child)
    assert [v.version for v in ws.metadata.list_model_versions("churn")] == [1, 2]


def test_only_a_stopped_retrain_gives_a_reason(ws: Any) -> None:  # noqa: F811
    """An error that merely has a ``reason`` attribute (URLError: an OSError) is a plain
    failure, recorded as such."""
    import urllib.error

    def boom(*a: Any, **kw: Any) -> dict[str, Any]:
        raise urllib.error.URLError(ConnectionRefusedError("refused"))

    pol = {"rules": [{"on": "input_drift", "do": "retrain"}]}
    res = watch_once("churn@production", pol, lambda: [alarm()], workspace=ws, holder="w",
                     actions=LoopActions(retrain=boom))
    assert res.actions[0]["outcome"] == "failed" and "reason" not in res.actions[0]
    last = loop_events(ws, "churn@production")[-1]
    assert last.action == "monitor.action.failed" and "refused" in last.payload["error"]
    assert "reason" not in last.payload
