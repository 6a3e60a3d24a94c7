"""The metadata-store contract."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any, Protocol

from reprise.core._monitor_types import MonitorReferenceRecord, WindowRecord
from reprise.core._reqlog_types import RequestChunk
from reprise.core._rollout_types import BucketRow, RolloutRecord
from reprise.core._types import (
    ArtifactRecord,
    AuditEvent,
    DatasetRecord,
    MetricPoint,
    ModelVersionRecord,
    RunRecord,
    RunStatus,
)
from reprise.store._journal import JournalBatch
from reprise.store._run_search import MetricSeries, RunPage, RunSearch

__all__ = ["BaseMetadataStore", "MetadataReader", "RunFilter"]


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


class MetadataReader(Protocol):
    """The read methods that listing commands use (``Workspace.reader``): every
    :class:`BaseMetadataStore` has them, and so has the read-only SQLite reader
    (``_sqlite_read``). Same meaning and errors as the store's methods."""

    def get_run(self, run_id: str) -> RunRecord: ...

    def list_runs(self, flt: RunFilter | None = None) -> list[RunRecord]: ...

    def run_ids_around(self, first: str, last: str) -> list[str]: ...

    def latest_metrics(self, run_ids: Sequence[str]) -> dict[str, dict[str, MetricPoint]]: ...

    def run_artifacts(self, run_id: str) -> dict[str, ArtifactRecord]: ...

    def get_step_runs(self, run_id: str) -> list[dict[str, Any]]: ...

    def list_dataset_versions(self, name: str | None = None) -> list[DatasetRecord]: ...

    def list_model_versions(self, name: str | None = None) -> list[ModelVersionRecord]: ...

    def get_aliases(self, name: str) -> dict[str, int]: ...


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
    def run_ids_around(self, first: str, last: str) -> list[str]:
        """Sorted ids of all runs (nested ones too) from ``first`` to ``last``, plus the
        nearest id on each side: all that decides which prefixes of the ids in that
        range are unique (ids sort by creation time, so neighbours share prefixes)."""

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

    def metric_key_stats(self, run_id: str) -> dict[str, tuple[int, int, int]]:
        """For each metric key of a run: (how many points, first step, last step). SQL
        stores count in the database; this default reads every point."""
        out: dict[str, tuple[int, int, int]] = {}
        for p in self.get_metrics(run_id):
            n, lo, hi = out.get(p.key, (0, p.step, p.step))
            out[p.key] = (n + 1, min(lo, p.step), max(hi, p.step))
        return out

    def search_runs(self, search: RunSearch) -> RunPage | None:
        """A page of the runs matching ``search`` (filter, sort, count and page done by
        the store; see :mod:`reprise.store._run_search`), or None where this store cannot
        do it: the caller then filters :meth:`list_runs` itself."""
        return None

    def metric_series(self, run_id: str, key: str, *, x: str = "step",
                      start: float | None = None, end: float | None = None,
                      max_points: int = 2000) -> MetricSeries | None:
        """One metric's finite points along x (``step`` or ``time``) in [start, end],
        at most ``max_points``, each bucket's extremes kept (done by the store), or None
        where this store cannot: the caller then reduces :meth:`get_metrics` itself."""
        return None

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

    # -- model registry --------------------------------------------------------------
    # Every write below appends its audit event (``event`` = ``(actor, action, subject,
    # payload)``) in the same transaction as the change it records, chained by hash to
    # the previous event (:func:`reprise.core._types.audit_hash`): the log and the
    # registry never disagree, and appends are serialised across processes.

    @abc.abstractmethod
    def add_model_version(self, record: ModelVersionRecord,
                          event: tuple[str, str, str, dict[str, Any]]
                          ) -> tuple[ModelVersionRecord, bool]:
        """Register ``record`` as the next version of its name (``record.version`` is
        ignored; the model name is created if new; a number is never given twice, even
        after its version was deleted) and return ``(stored, True)``. If a
        version of that name already holds the same package, return ``(it, False)``,
        change nothing and log nothing. The event's payload gets ``version``."""

    @abc.abstractmethod
    def get_model_version(self, name: str, version: int) -> ModelVersionRecord | None:
        """``name:version``, or None."""

    @abc.abstractmethod
    def list_model_versions(self, name: str | None = None) -> list[ModelVersionRecord]:
        """Versions of ``name`` (or of every model), by name then version."""

    @abc.abstractmethod
    def set_model_version_status(self, name: str, version: int, status: str,
                                 event: tuple[str, str, str, dict[str, Any]]) -> None:
        """Set a version's status (``ready`` / ``archived``); the same status again changes
        and logs nothing. NotFoundError if the version is gone; UserError (and nothing
        changes) when archiving a version an alias holds, checked in the transaction."""

    @abc.abstractmethod
    def delete_model_version(self, name: str, version: int,
                             event: tuple[str, str, str, dict[str, Any]]) -> None:
        """Remove a version (and its alias history). NotFoundError if it is gone;
        UserError (and nothing changes) if an alias holds it, checked in the transaction."""

    @abc.abstractmethod
    def get_aliases(self, name: str) -> dict[str, int]:
        """``{alias: version}`` of model ``name``."""

    @abc.abstractmethod
    def set_alias(self, name: str, alias: str, version: int,
                  event: tuple[str, str, str, dict[str, Any]], *,
                  package_hash: str | None = None) -> int | None:
        """Point ``alias`` at ``version`` and push it on the alias's history; return the
        version it pointed at before (None if new). The payload gets ``previous``.
        In the same transaction: NotFoundError if the version is gone, UserError if it
        is not ready or (``package_hash`` given) holds another package. If the alias
        already points there, nothing changes (no history entry, no event)."""

    @abc.abstractmethod
    def rollback_alias(self, name: str, alias: str,
                       event: tuple[str, str, str, dict[str, Any]]) -> tuple[int, int] | None:
        """Pop the alias's newest promotion and point it at the one before; return
        ``(from, to)``, or None (nothing changed) when there is no earlier promotion;
        UserError (nothing changed) if the one before is archived.
        The payload gets ``from`` and ``to``."""

    @abc.abstractmethod
    def alias_history(self, name: str, alias: str) -> list[int]:
        """The versions the alias was promoted to that a rollback can return to, oldest
        first (the last is the current one)."""

    @abc.abstractmethod
    def append_audit(self, actor: str, action: str, subject: str,
                     payload: dict[str, Any]) -> AuditEvent:
        """Append an event that records no registry change of its own (a deployment)."""

    @abc.abstractmethod
    def list_audit_events(self) -> list[AuditEvent]:
        """The whole audit log, by sequence number (as stored: verification is the
        registry's, see :mod:`reprise.registry._audit`)."""

    @abc.abstractmethod
    def rollout_events(self, rollout_id: str, subject: str) -> list[AuditEvent]:
        """The audit events of one rollout (``subject``: its ``NAME@ALIAS``; actions
        ``rollout.*`` whose payload's ``rollout`` is ``rollout_id``), by sequence number,
        found by the database rather than by reading the whole log."""

    @abc.abstractmethod
    def subject_events(self, subject: str, action_prefix: str, *, since: float | None = None,
                       payload_in: tuple[str, Sequence[str]] | None = None
                       ) -> list[AuditEvent]:
        """The audit events on ``subject`` whose action starts with ``action_prefix``
        (appended at or after ``since``, by the events' own time; with ``payload_in``
        ``(KEY, VALUES)``, only those whose payload's KEY is one of VALUES), by sequence
        number, found by the database rather than by reading the whole log."""

    # -- rollouts (deployments) -------------------------------------------------------
    # A rollout's creation and its decisions append their audit events to the same chain,
    # in the transaction that makes the change.

    @abc.abstractmethod
    def create_rollout(self, rec: RolloutRecord,
                       event: tuple[str, str, str, dict[str, Any]]) -> RolloutRecord:
        """Store a new rollout. In the same transaction: UserError (nothing written) if
        ``rec.name@rec.alias`` has a running rollout (the message names it) or no longer
        points at ``rec.stable``. The event's payload gets ``rollout``."""

    @abc.abstractmethod
    def get_rollout(self, rollout_id: str) -> RolloutRecord | None:
        """The rollout with this id, or None."""

    @abc.abstractmethod
    def find_rollout(self, name: str, alias: str | None = None, *,
                     running_only: bool = False) -> RolloutRecord | None:
        """The newest rollout of ``name`` (of ``alias``; only a running one), or None."""

    @abc.abstractmethod
    def list_rollouts(self, name: str | None = None, *, alias: str | None = None,
                      running_only: bool = False) -> list[RolloutRecord]:
        """Rollouts, newest first."""

    @abc.abstractmethod
    def apply_rollout_decision(self, rollout_id: str, expected_decisions: int,
                               changes: dict[str, Any],
                               event: tuple[str, str, str, dict[str, Any]], *,
                               move_alias_to: int | None = None,
                               package_hash: str | None = None) -> bool:
        """Compare-and-set: if the rollout is running and has applied exactly
        ``expected_decisions`` decisions, set ``changes`` (record fields), count the
        decision, append ``event`` (its payload gets ``rollout`` and ``decision``, the
        count) and, with ``move_alias_to``, point the alias at that version as
        :meth:`set_alias` does (its own ``promote`` event, its rules, ``package_hash``)
        — all in one transaction — and return True. Else change nothing and return
        False: another caller decided first, or the rollout ended."""

    @abc.abstractmethod
    def add_buckets(self, rows: Sequence[BucketRow]) -> None:
        """Add ``rows`` to the stored buckets: a row whose key (rollout, version, bucket,
        server) is stored already adds its counts to it. Safe from many processes."""

    @abc.abstractmethod
    def window_buckets(self, rollout_id: str, first_bucket: int, last_bucket: int,
                       versions: Sequence[int] | None = None) -> list[BucketRow]:
        """The rollout's rows with ``first_bucket <= bucket <= last_bucket`` (of
        ``versions`` only: then a range of the rows' key, read without a scan)."""

    @abc.abstractmethod
    def acquire_lease(self, key: str, holder: str, ttl_s: float, now: float) -> bool:
        """Take ``key`` for ``holder`` until ``now + ttl_s`` if it is free, expired at
        ``now`` or already ``holder``'s (then renew it); True if ``holder`` has it now.
        Of two callers racing for a free lease exactly one gets it."""

    @abc.abstractmethod
    def release_lease(self, key: str, holder: str) -> None:
        """Give ``key`` up if ``holder`` has it (so another may take it at once)."""

    @abc.abstractmethod
    def lease_holder(self, key: str, now: float) -> str | None:
        """Who holds ``key`` at ``now`` (None when it is free or expired)."""

    # -- request log and feedback -----------------------------------------------------
    # A chunk row is written only after its Parquet blob is complete in the artifact
    # store, in the transaction that records the blob, so an indexed chunk is whole.

    @abc.abstractmethod
    def add_request_chunk(self, chunk: RequestChunk, artifact: ArtifactRecord) -> None:
        """Record ``artifact`` (a complete blob; kept if recorded already) and index
        ``chunk`` (a new, unique id) in one transaction."""

    @abc.abstractmethod
    def list_request_chunks(self, name: str | None = None, *, version: int | None = None,
                            start: float | None = None, end: float | None = None,
                            ) -> list[RequestChunk]:
        """Chunks (of ``name``, ``version``) holding answers in ``[start, end]`` (a chunk
        overlaps the range), oldest first."""

    @abc.abstractmethod
    def delete_request_chunks(self, chunk_ids: Sequence[str]) -> list[str]:
        """Remove these chunk rows; return the blob hashes no remaining chunk names (the
        caller deletes the blobs, after the rows, as ``gc`` does)."""

    @abc.abstractmethod
    def add_feedback(self, name: str, items: Sequence[tuple[str, str]],
                     received_at: float) -> int:
        """Store ``(request id, label as JSON)`` pairs of model ``name``; a label sent again
        for the same request id replaces the stored one. Returns how many were stored."""

    @abc.abstractmethod
    def get_feedback(self, name: str, request_ids: Sequence[str] | None = None,
                     ) -> dict[str, tuple[str, float]]:
        """``request id -> (label as JSON, received at)`` of model ``name`` (only
        ``request_ids`` when given)."""

    # -- monitoring -------------------------------------------------------------------

    @abc.abstractmethod
    def put_monitor_reference(self, record: MonitorReferenceRecord,
                              artifact: ArtifactRecord) -> None:
        """Record ``artifact`` (the fitted reference, a complete blob) and which reference
        ``record`` says a model version is judged against, in one transaction (the same
        model, version and dataset again: replaced)."""

    @abc.abstractmethod
    def get_monitor_reference(self, name: str, version: int, dataset: str | None = None,
                              ) -> MonitorReferenceRecord | None:
        """The newest reference recorded for ``name:version`` (of ``dataset`` if given)."""

    @abc.abstractmethod
    def add_monitor_windows(self, records: Sequence[WindowRecord]) -> None:
        """Store window summaries; a window already stored (same id) is replaced."""

    @abc.abstractmethod
    def list_monitor_windows(self, name: str | None = None, *, version: int | None = None,
                             limit: int | None = None) -> list[WindowRecord]:
        """Window summaries, newest window end first."""

    @abc.abstractmethod
    def latest_monitor_windows(self) -> list[WindowRecord]:
        """The newest window summary of every (model, version)."""

    def close(self) -> None:
        """Release connections."""
