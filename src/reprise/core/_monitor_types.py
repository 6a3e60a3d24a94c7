"""What the metadata store keeps for monitoring (plain records, standard library only).

A :class:`MonitorReferenceRecord` says which drift reference a model version is judged
against: the dataset version its rows came from, how many rows were sampled for the
model's reference predictions, where those predictions came from, and the artifact (a
JSON document in the artifact store, content-addressed) holding the fitted reference.

A :class:`WindowRecord` is the summary of one live window of a version's logged
traffic: its span, the three verdicts (input drift, prediction drift, performance), and
a JSON summary (per-column statistic, p-value and effect; the alarms raised). The server
exports the newest ones as Prometheus gauges without importing ``reprise.monitor``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["WINDOW_VERDICTS", "MonitorReferenceRecord", "WindowRecord"]

#: ``drift``/``degraded`` raise an alarm; ``insufficient``: too few rows or labels for a
#: verdict; ``unknown``: nothing to compare with (no labels, no reference metric).
WINDOW_VERDICTS = ("drift", "no_drift", "degraded", "ok", "insufficient", "unknown")


@dataclass(frozen=True)
class MonitorReferenceRecord:
    name: str
    version: int
    dataset: str  # NAME@N of the reference rows
    artifact_hash: str  # the fitted reference (JSON) in the artifact store
    sample_rows: int  # rows the reference predictions were computed on
    predictions: str  # "validation" (stored at training) | "reference_sample"
    created_at: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class WindowRecord:
    name: str
    version: int
    start: float
    end: float
    rows: int
    labelled: int
    input_verdict: str
    prediction_verdict: str
    performance_verdict: str
    reference_hash: str
    summary: dict[str, Any] = field(default_factory=dict)
    computed_at: float = 0.0

    @property
    def id(self) -> str:
        """The same window of the same version against the same reference: one row."""
        key = json.dumps([self.name, self.version, self.start, self.end, self.rows,
                          self.reference_hash])
        return hashlib.blake2b(key.encode(), digest_size=16).hexdigest()

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, **asdict(self)}
