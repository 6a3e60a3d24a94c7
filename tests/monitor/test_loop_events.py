"""A round of the loop reads only what it needs of the audit log (issue 15.7, hardening):
this subject's recent ``monitor.*`` events and the events of the alarms it detected, found
by the database; never the whole log. Old events of the same alarm still count."""

from __future__ import annotations

from typing import Any

import pytest

from reprise.monitor._loop import LoopActions, loop_events, watch_once
from reprise.store import _sql_registry
from tests.monitor.test_loop import Recorder, alarm, notify_only, ws  # noqa: F401


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def time(self) -> float:
        return self.now


def test_a_round_reads_only_recent_events_of_its_subject(
        ws: Any, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    import time

    now = time.time()
    old = alarm(start=now - 30 * 86400)
    # a month ago: the alarm ``old`` and its notify, and lots of traffic on other models
    monkeypatch.setattr(_sql_registry, "time", Clock(now - 30 * 86400))
    ws.metadata.append_audit("w0", "monitor.alarm", "churn@production",
                             {"alarm": old.id, "at": now - 30 * 86400, **old.to_dict()})
    for i in range(40):
        ws.metadata.append_audit("w0", "monitor.action.started", "churn@production",
                                 {"action": "notify", "alarm": f"ancient-{i}",
                                  "at": now - 30 * 86400})
    monkeypatch.setattr(_sql_registry, "time", Clock(now - 60))
    for i in range(200):
        ws.metadata.append_audit("w0", "monitor.alarm", f"other{i % 5}@production",
                                 {"alarm": f"x{i}", "at": now - 60})
    monkeypatch.undo()

    fetched: list[int] = []
    real = ws.metadata.subject_events

    def counted(*a: Any, **kw: Any) -> Any:
        out = real(*a, **kw)
        fetched.append(len(out))
        return out

    def whole_log() -> Any:
        raise AssertionError("a round read the whole audit log")

    monkeypatch.setattr(ws.metadata, "subject_events", counted)
    monkeypatch.setattr(ws.metadata, "list_audit_events", whole_log)
    sent = Recorder()
    new = alarm(start=now)
    res = watch_once("churn@production", notify_only(), lambda: [old, new], workspace=ws,
                     holder="w", now=now, actions=LoopActions(notify=sent))
    # the month-old alarm is still known (found by its id), the new one is acted on: the
    # month-old notifies hold nothing back (long past the cooldown)
    assert res.new_alarms == [new.id] and [a["outcome"] for a in res.actions] == ["succeeded"]
    assert len(sent.calls) == 1
    assert sum(fetched) <= 6, fetched  # not the 241 events of other subjects and old ones
    monkeypatch.undo()
    assert len(loop_events(ws, "churn@production")) == 41 + 3
