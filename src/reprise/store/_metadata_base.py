"""The metadata-store contract."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any

from reprise.core._types import ArtifactRecord, DatasetRecord, MetricPoint, RunRecord, RunStatus
from reprise.store._journal import JournalBatch

__all__ = ["BaseMetadataStore", "RunFilter"]


class RunFilter:
    """Criteria for :meth:`BaseMetadataStore.list_runs`."""

    def __init__(
        self,
        *,
        name: str | None = None,
        status: RunStatus | None = None,
        tags: dict[str, str] | None = None,
        parent_id: str | None = None,
        top_level: bool = False,
        order_by_metric: str | None = None,
        ascending: bool = False,
        limit: int | None = None,
    ) -> None:
        self.name = name
        self.status = status
        self.tags = tags or {}
        self.parent_id = parent_id
        self.top_level = top_level
        self.order_by_metric = order_by_metric
        self.ascending = ascending
        self.limit = limit


class BaseMetadataStore(abc.ABC):
    """Where runs, metrics, artifacts records and environments are indexed.

    Contract:

    * **Thread and process safety.** Every method may be called from several
      threads and several processes on the same database at once. Writers that
      meet a locked database wait and retry; "database is locked" never reaches
      the caller.
    * **Ingestion is idempotent.** :meth:`ingest` applies a journal batch and
      advances the run's journal offset in the same transaction, so a batch
      applied twice (after a crash between the two) cannot duplicate points:
      a batch whose start offset is behind the stored offset is ignored.
    * **Finished runs are immutable.** Status moves from ``running`` to one
      terminal status once; later end events are ignored.
    * **Errors.** Lookups of unknown ids raise ``RunNotFoundError`` /
      ``ArtifactNotFoundError`` / ``EnvironmentNotFoundError``; a shortened id
      matching several runs raises ``AmbiguousIdError``.
    """

    url: str

    # -- ingestion -------------------------------------------------------------------
    @abc.abstractmethod
    def journal_offset(self, run_id: str) -> int:
        """Bytes of the run's journal already ingested (0 for an unknown run)."""

    @abc.abstractmethod
    def ingest(self, run_id: str, start_offset: int, batch: JournalBatch) -> bool:
        """Apply ``batch`` (read from ``start_offset``); False when it was already applied."""

    def ingest_many(self, items: list[tuple[str, int, JournalBatch]]) -> list[bool]:
        """:meth:`ingest` each ``(run_id, start_offset, batch)``, in order; a backend may
        apply them in one transaction (one commit for many small finished runs)."""
        return [self.ingest(run_id, start, batch) for run_id, start, batch in items]

    # -- runs ------------------------------------------------------------------------
    @abc.abstractmethod
    def get_run(self, run_id: str) -> RunRecord:
        """The run with this id or unambiguous id prefix, with params and tags."""

    @abc.abstractmethod
    def list_runs(self, flt: RunFilter | None = None) -> list[RunRecord]:
        """Runs matching ``flt``, newest first unless ordered by a metric."""

    @abc.abstractmethod
    def running_run_ids(self) -> list[str]:
        """Ids of runs whose status is still ``running``."""

    @abc.abstractmethod
    def mark_run_ended(self, run_id: str, status: RunStatus, ended_at: float,
                       error: str | None = None) -> None:
        """Set a terminal status if the run is still running."""

    # -- metrics ---------------------------------------------------------------------
    @abc.abstractmethod
    def get_metrics(self, run_id: str, key: str | None = None) -> list[MetricPoint]:
        """All points of a run (of one key), ordered by key then step."""

    @abc.abstractmethod
    def latest_metrics(self, run_ids: Sequence[str]) -> dict[str, dict[str, MetricPoint]]:
        """For each run, each key's point with the highest step."""

    # -- environments and artifacts --------------------------------------------------
    @abc.abstractmethod
    def get_environment(self, env_hash: str) -> dict[str, Any]:
        """The full fingerprint stored under ``env_hash``."""

    @abc.abstractmethod
    def put_artifact(self, record: ArtifactRecord) -> None:
        """Record a blob (no-op when already recorded)."""

    @abc.abstractmethod
    def get_artifact(self, artifact_hash: str) -> ArtifactRecord:
        """The record of one blob."""

    @abc.abstractmethod
    def list_artifacts(self) -> list[ArtifactRecord]:
        """Every recorded blob."""

    @abc.abstractmethod
    def delete_artifacts(self, hashes: Sequence[str]) -> None:
        """Forget these records (the caller deletes the blobs)."""

    @abc.abstractmethod
    def run_artifacts(self, run_id: str) -> dict[str, ArtifactRecord]:
        """Artifacts logged by a run, by logical name."""

    @abc.abstractmethod
    def referenced_artifact_hashes(self) -> set[str]:
        """Hashes something refers to (runs, steps, datasets, model versions)."""

    @abc.abstractmethod
    def get_step_runs(self, run_id: str) -> list[dict[str, Any]]:
        """The step runs of a pipeline run, in order, each with ``inputs`` and
        ``outputs`` lists of ``{"name", "hash", "source"}``."""

    @abc.abstractmethod
    def producers_of(self, artifact_hash: str) -> list[dict[str, Any]]:
        """Step runs that output ``artifact_hash`` (executed ones first, newest first),
        each with ``run_id`` and ``inputs``."""

    # -- datasets --------------------------------------------------------------------
    @abc.abstractmethod
    def add_dataset_version(self, record: DatasetRecord) -> tuple[DatasetRecord, bool]:
        """Register ``record`` as the next version of its name (``record.version`` is
        ignored) and return ``(stored, True)``; if the newest version already holds the
        same bytes, return ``(newest, False)`` and change nothing. Atomic against
        concurrent adds of the same name."""

    @abc.abstractmethod
    def get_dataset_version(self, name: str, version: int | None = None) -> DatasetRecord | None:
        """``name@version`` (the newest when ``version`` is None), or None."""

    @abc.abstractmethod
    def list_dataset_versions(self, name: str | None = None) -> list[DatasetRecord]:
        """Every version of ``name`` (or of every dataset), by name then version."""

    @abc.abstractmethod
    def set_dataset_schema(self, name: str, spec: str | None, source: str | None) -> None:
        """Attach a validation schema to a dataset name (replacing any earlier one)."""

    @abc.abstractmethod
    def get_dataset_schema(self, name: str) -> tuple[str | None, str | None] | None:
        """``(spec, source)`` of the schema attached to ``name``, or None."""

    def close(self) -> None:
        """Release connections."""
