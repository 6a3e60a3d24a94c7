"""The intermediate-result protocol between trained code and a tuning trial."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest

from reprise.core import _report
from reprise.core._report import TRIAL_ENV, current_reporter, report, reporting_to
from reprise.core.errors import TrialPruned, UserError


class Keep:
    def __init__(self, spec: Mapping[str, Any] | None = None, limit: int = 2) -> None:
        self.spec, self.limit, self.values = spec, limit, []  # type: ignore[var-annotated]

    def report(self, values: Any, step: int) -> None:
        self.values.append((values, step))

    def should_prune(self) -> bool:
        return len(self.values) >= self.limit


def make(spec: Mapping[str, Any]) -> Keep:  # the factory named in REPRISE_TRIAL
    return Keep(spec, limit=int(spec["limit"]))


def test_outside_a_trial_report_does_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TRIAL_ENV, raising=False)
    assert current_reporter() is None
    report({"val_loss": 1.0}, step=1)


def test_an_installed_reporter_records_then_prunes() -> None:
    keep = Keep()
    with reporting_to(keep):
        report({"val_loss": 1.0}, step=1)
        with pytest.raises(TrialPruned, match="step 2"):
            report(0.5, step=2)
    assert keep.values == [({"val_loss": 1.0}, 1), (0.5, 2)]
    assert current_reporter() is None or current_reporter() is not keep


def test_a_reporter_is_rebuilt_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = {"factory": f"{__name__}:make", "limit": 1, "trial": 7}
    monkeypatch.setattr(_report, "_from_env", None)
    monkeypatch.setenv(TRIAL_ENV, json.dumps(spec))
    rep = current_reporter()
    assert isinstance(rep, Keep) and rep.spec == spec
    assert current_reporter() is rep  # built once per value
    with pytest.raises(TrialPruned):
        report(3.0, step=0)


def test_a_garbled_environment_variable_is_a_user_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_report, "_from_env", None)
    monkeypatch.setenv(TRIAL_ENV, "{not json")
    with pytest.raises(UserError, match="unset it"):
        current_reporter()
    monkeypatch.setenv(TRIAL_ENV, json.dumps({"factory": "no.such.module:f"}))
    with pytest.raises(UserError, match="does not describe a tuning trial"):
        current_reporter()
