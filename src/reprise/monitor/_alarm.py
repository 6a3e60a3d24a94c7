"""An alarm: what the monitor found wrong with one window of a served model's traffic.

The detector (``reprise.monitor._live``) raises alarms; the trigger loop
(``reprise.monitor._loop``) maps them to actions (rollback, retrain, notify) and records
each in the audit log. An alarm is plain, JSON-able data so that it travels into audit
events, webhook bodies and the tags of a retraining run, and its ``id`` is a content hash
of what it says (model, version, kind, window), so the same finding raised twice — by
two watchers, or by one watcher before and after a restart — is recognisably the same.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from reprise.core._hashing import hash_value
from reprise.core.errors import UserError

__all__ = ["ALARM_KINDS", "Alarm", "MonitorWindow"]

#: ``input_drift``: the window's inputs drift from the reference (dataset verdict after
#: the multiple-testing correction); ``prediction_drift``: the outputs drift from the
#: model's predictions on its reference data; ``performance``: with labels, a metric's
#: interval lies wholly below the reference's (a real degradation, not a harmless shift).
ALARM_KINDS = ("input_drift", "prediction_drift", "performance")


@dataclass(frozen=True)
class MonitorWindow:
    """The slice of logged traffic a verdict was computed on."""

    start: float  # unix seconds of the first request in the window
    end: float  # unix seconds of the last one
    rows: int
    labelled: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Alarm:
    model: str
    version: int
    kind: str  # one of ALARM_KINDS
    window: MonitorWindow
    message: str  # one line a person reads: what drifted, by how much, under which test
    alias: str | None = None
    evidence: dict[str, Any] = field(default_factory=dict)  # statistics, p-values, metrics
    raised_at: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in ALARM_KINDS:
            raise UserError(f"alarm kind must be one of {', '.join(ALARM_KINDS)}, "
                            f"not {self.kind!r}.")

    @property
    def id(self) -> str:
        """Stable over re-detection: the model, version, kind and window, not the time it
        was raised nor the wording."""
        return "alarm-" + hash_value({"model": self.model, "version": self.version,
                                     "kind": self.kind, "window": self.window.to_dict()})[:16]

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "model": self.model, "version": self.version,
                "alias": self.alias, "kind": self.kind, "window": self.window.to_dict(),
                "message": self.message, "evidence": self.evidence,
                "raised_at": self.raised_at}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Alarm:
        return cls(model=d["model"], version=int(d["version"]), kind=d["kind"],
                   window=MonitorWindow(**d["window"]), message=d["message"],
                   alias=d.get("alias"), evidence=dict(d.get("evidence") or {}),
                   raised_at=float(d.get("raised_at") or 0.0))
