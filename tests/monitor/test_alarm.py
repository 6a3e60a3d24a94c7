"""The alarm record the detector raises and the trigger loop acts on."""

from __future__ import annotations

import json

import pytest

from reprise.core.errors import UserError
from reprise.monitor._alarm import Alarm, MonitorWindow


def _alarm(**kw: object) -> Alarm:
    base: dict[str, object] = {"model": "churn", "version": 3, "kind": "input_drift",
                               "window": MonitorWindow(start=10.0, end=20.0, rows=1000),
                               "message": "input drift in age (holm at alpha 0.05)"}
    base.update(kw)
    return Alarm(**base)  # type: ignore[arg-type]


def test_id_names_the_finding_not_when_or_how_it_was_worded() -> None:
    a = _alarm(raised_at=1.0)
    assert a.id == _alarm(raised_at=99.0, message="other words", evidence={"x": 1}).id
    assert a.id != _alarm(version=4).id
    assert a.id != _alarm(kind="prediction_drift").id
    assert a.id != _alarm(window=MonitorWindow(start=10.0, end=21.0, rows=1000)).id
    assert a.id.startswith("alarm-")


def test_round_trips_through_json() -> None:
    a = _alarm(alias="production", evidence={"drifted": ["age"], "p": 1e-9}, raised_at=5.0)
    b = Alarm.from_dict(json.loads(json.dumps(a.to_dict())))
    assert b == a and b.id == a.id


def test_unknown_kind_is_refused_with_the_known_ones() -> None:
    with pytest.raises(UserError, match="input_drift, prediction_drift, performance"):
        _alarm(kind="drift")
