"""Records the stores persist. They live in ``core`` so that the store layer never
imports upward (the cycle Optuna's ``study`` and ``storages`` have)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "GENESIS_HASH",
    "ArtifactRecord",
    "AuditEvent",
    "DatasetRecord",
    "MetricPoint",
    "ModelVersionRecord",
    "RunKind",
    "RunRecord",
    "RunStatus",
    "audit_hash",
]


class RunStatus(str, enum.Enum):
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    KILLED = "killed"

    @property
    def is_terminal(self) -> bool:
        return self is not RunStatus.RUNNING


class RunKind(str, enum.Enum):
    RUN = "run"
    PIPELINE = "pipeline"
    STEP = "step"
    TRIAL = "trial"
    TRAINING = "training"
    TUNING = "tuning"


@dataclass(frozen=True)
class MetricPoint:
    key: str
    step: int
    value: float
    timestamp: float


@dataclass(frozen=True)
class ArtifactRecord:
    """Metadata of one content-addressed blob."""

    hash: str
    size: int
    kind: str
    """What the bytes are: ``numpy``, ``parquet``, ``json``, ``bytes``, ``file``, ``dir``..."""
    materializer: str
    """Name of the materializer that reads them back."""
    meta: dict[str, Any] = field(default_factory=dict)
    """Materializer-specific metadata (dtype and shape, schema, file name...)."""
    created: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """The fields journals and cache entries carry (``created`` is theirs to set)."""
        return {"hash": self.hash, "size": self.size, "kind": self.kind,
                "materializer": self.materializer, "meta": dict(self.meta)}


@dataclass
class DatasetRecord:
    """One immutable dataset version, ``name@version``."""

    name: str
    version: int
    artifact_hash: str
    """The registered bytes (the source file, or the clean rows after quarantine)."""
    format: str
    """``csv``, ``parquet``, ``jsonl``, ``files`` (a directory) or ``file`` (opaque bytes)."""
    rows: int | None
    schema: dict[str, Any] | None
    """Column name -> Arrow type string, in column order (None for non-tabular data)."""
    profile: dict[str, Any] | None
    meta: dict[str, Any] = field(default_factory=dict)
    """Source path, size, validation summary, quarantine artifact, run id."""
    created_at: float = 0.0

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version}"


@dataclass
class RunRecord:
    id: str
    name: str
    kind: RunKind
    status: RunStatus
    started_at: float
    ended_at: float | None = None
    parent_id: str | None = None
    seed: int | None = None
    env_hash: str | None = None
    code_hash: str | None = None
    git_commit: str | None = None
    git_dirty: bool | None = None
    host: str | None = None
    user: str | None = None
    pid: int | None = None
    error: str | None = None
    energy_joules: float | None = None
    energy_source: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)

    @property
    def duration(self) -> float | None:
        return None if self.ended_at is None else self.ended_at - self.started_at


@dataclass(frozen=True)
class ModelVersionRecord:
    """One immutable registered model version, ``name:version``."""

    name: str
    version: int
    package_hash: str
    """The model package artifact (model, preprocessing, signature, card)."""
    run_id: str | None
    """The run that produced the package (lineage starts here)."""
    status: str
    """``ready`` or ``archived``."""
    signature: dict[str, Any] | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    """Headline metrics with intervals and the gates' outcome, from the package's card."""
    meta: dict[str, Any] = field(default_factory=dict)
    """Flavor, the producing step, promotion overrides, ..."""
    created_at: float = 0.0

    @property
    def ref(self) -> str:
        return f"{self.name}:{self.version}"


GENESIS_HASH = "0" * 64
"""The ``prev_hash`` of the first audit event."""


@dataclass(frozen=True)
class AuditEvent:
    """One entry of the hash-chained audit log (see :func:`audit_hash`)."""

    seq: int
    time: float
    actor: str
    action: str
    subject: str
    payload: dict[str, Any]
    prev_hash: str
    hash: str

    def to_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "time": self.time, "actor": self.actor, "action": self.action,
                "subject": self.subject, "payload": self.payload, "prev_hash": self.prev_hash,
                "hash": self.hash}


def audit_hash(seq: int, time: float, actor: str, action: str, subject: str,
               payload: dict[str, Any], prev_hash: str) -> str:
    """The hash of an audit event: every field and the previous event's hash, so an
    edited, deleted, inserted or reordered event breaks the chain from there on."""
    from reprise.core._hashing import hash_value

    return hash_value({"seq": seq, "time": repr(float(time)), "actor": actor,
                       "action": action, "subject": subject, "payload": payload,
                       "prev": prev_hash})
