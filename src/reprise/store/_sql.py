"""Metadata store on SQLAlchemy Core: SQLite (embedded default) and PostgreSQL."""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import math
import os
import random
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, OperationalError

from reprise.core._types import (
    ArtifactRecord,
    DatasetRecord,
    MetricPoint,
    RunRecord,
    RunStatus,
)
from reprise.core._urls import redact_url
from reprise.core.errors import (
    AmbiguousIdError,
    ArtifactNotFoundError,
    ConfigError,
    EnvironmentNotFoundError,
    RunNotFoundError,
    SchemaVersionError,
    StoreError,
)
from reprise.store import _schema as s
from reprise.store._journal import JournalBatch
from reprise.store._metadata_base import BaseMetadataStore, RunFilter
from reprise.store._rows import artifact_record as _artifact_record
from reprise.store._rows import dataset_record as _dataset_record
from reprise.store._rows import latest_metrics_sql, latest_point
from reprise.store._rows import run_record as _record
from reprise.store._sql_monitor import SqlMonitorMixin
from reprise.store._sql_registry import SqlRegistryMixin
from reprise.store._sql_reqlog import SqlRequestLogMixin
from reprise.store._sql_rollouts import SqlRolloutMixin
from reprise.store._sql_search import SqlSearchMixin

__all__ = ["SqlMetadataStore", "normalise_url", "upgrade_database"]

_logger = logging.getLogger(__name__)
T = TypeVar("T")
_RETRIES = 50


def normalise_url(url: str) -> str:
    """Map user-facing URLs onto SQLAlchemy URLs (``postgresql://`` uses psycopg 3)."""
    if url.startswith("postgres://"):
        url = "postgresql://" + url[len("postgres://"):]
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url[len("postgresql://"):]
    return url


def _make_engine(url: str) -> Engine:
    try:
        sa_url = sa.engine.make_url(normalise_url(url))
    except (ArgumentError, ValueError) as exc:  # ValueError: a port that is not a number
        raise ConfigError(
            f"store URL {redact_url(url)!r} is not a database URL; use sqlite:///path/to/file.db or "
            "postgresql://user@host:5432/dbname."
        ) from exc
    if sa_url.get_backend_name() == "sqlite":
        return _sqlite_engine(sa_url)
    try:
        # READ COMMITTED whatever the server's default_transaction_isolation: the store's
        # writes are ordered by advisory locks, SELECT ... FOR UPDATE and offset checks,
        # which need each statement to see what committed before it, including while
        # the transaction waited for a lock. Under a server default of REPEATABLE READ
        # or SERIALIZABLE the snapshot taken by the lock statement is stale once the
        # lock is granted, and concurrent registrations fail with serialization errors
        # (tests/store/test_load.py runs the load on such a database).
        return sa.create_engine(sa_url, pool_pre_ping=True, future=True,
                                isolation_level="READ COMMITTED")
    except NoSuchModuleError as exc:
        raise ConfigError(f"store URL {redact_url(url)!r}: unsupported database ({exc}).") from exc
    except ImportError as exc:
        raise ConfigError(
            f"store URL {redact_url(url)!r} needs a driver that is not installed ({exc}); "
            "for PostgreSQL run: pip install 'reprise-ml[postgres]'."
        ) from exc


def _sqlite_engine(sa_url: sa.engine.URL) -> Engine:
    if sa_url.database and sa_url.database != ":memory:":
        Path(sa_url.database).parent.mkdir(parents=True, exist_ok=True)
    engine = sa.create_engine(sa_url, connect_args={"timeout": 60}, future=True)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy, not pysqlite, decide where transactions begin, so that
        # writers can take the lock up front with BEGIN IMMEDIATE (a deferred
        # transaction that later upgrades to a write lock fails with "database is
        # locked" without waiting for the busy handler).
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA busy_timeout=60000")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.info.get("write") else "BEGIN")

    return engine


# PostgreSQL errors after which the whole transaction may simply be run again:
# serialization_failure (also what a hot standby's recovery conflict raises),
# deadlock_detected, lock_not_available (a lock_timeout set by the DBA).
_RETRYABLE_SQLSTATES = frozenset({"40001", "40P01", "55P03"})


def _is_lock_error(exc: OperationalError) -> bool:
    """Whether ``exc`` is contention that a retry of the transaction resolves."""
    if getattr(exc.orig, "sqlstate", None) in _RETRYABLE_SQLSTATES:
        return True
    text = str(exc.orig).lower() if exc.orig is not None else str(exc).lower()
    return ("locked" in text or "busy" in text or "deadlock" in text
            or "could not serialize" in text)


class SqlMetadataStore(SqlSearchMixin, SqlMonitorMixin, SqlRequestLogMixin, SqlRolloutMixin,
                       SqlRegistryMixin, BaseMetadataStore):
    """:class:`BaseMetadataStore` on any SQLAlchemy database (tested: SQLite, PostgreSQL).

    Example:
        >>> store = SqlMetadataStore("sqlite://")   # in memory
        >>> store.list_runs()
        []
    """

    def __init__(self, url: str, *, migrate: bool = True) -> None:
        self.url = url
        self.engine = _make_engine(url)
        self.dialect = self.engine.dialect.name
        self._upserts: dict[tuple[str, tuple[str, ...], tuple[str, ...]], Any] = {}
        try:
            current = self._current_revision()
        except OperationalError as exc:
            raise ConfigError(f"cannot open the metadata store at {redact_url(url)!r}: "
                              f"{exc.orig}") from exc
        if current != s.HEAD_REVISION:
            if not migrate:
                raise SchemaVersionError(f"database at {redact_url(url)!r} is at revision {current}.")
            upgrade_database(self.engine)

    # -- plumbing --------------------------------------------------------------------
    def _current_revision(self) -> str | None:
        with self.engine.connect() as conn:
            if not sa.inspect(conn).has_table("alembic_version"):
                return None
            rev = conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar()
            return None if rev is None else str(rev)

    @contextlib.contextmanager
    def _write(self) -> Iterator[Connection]:
        with self.engine.connect() as conn:
            conn.info["write"] = True
            try:
                with conn.begin():
                    yield conn
            finally:
                conn.info.pop("write", None)

    def _retry(self, fn: Callable[[], T]) -> T:
        """Run the transaction ``fn`` again after contention (see :func:`_is_lock_error`),
        with exponential back-off and jitter; ``fn`` must hold the whole transaction."""
        delay = 0.01
        for attempt in range(_RETRIES):
            try:
                return fn()
            except OperationalError as exc:
                if not _is_lock_error(exc) or attempt == _RETRIES - 1:
                    raise
                time.sleep(delay * (1 + random.random()))
                delay = min(delay * 2, 0.5)
        raise AssertionError("unreachable")

    def close(self) -> None:
        self.engine.dispose()

    # -- ingestion -------------------------------------------------------------------
    def journal_offset(self, run_id: str) -> int:
        with self.engine.connect() as conn:
            q = sa.select(s.runs.c.journal_offset).where(s.runs.c.id == run_id)
            return int(conn.execute(q).scalar() or 0)

    def ingest(self, run_id: str, start_offset: int, batch: JournalBatch) -> bool:
        return self._retry(lambda: self._ingest_once(run_id, start_offset, batch))

    def ingest_many(self, items: list[tuple[str, int, JournalBatch]]) -> list[bool]:
        def once() -> list[bool]:
            with self._write() as conn:
                return [self._ingest_on(conn, *item) for item in items]

        return self._retry(once)

    def _ingest_once(self, run_id: str, start_offset: int, batch: JournalBatch) -> bool:
        with self._write() as conn:
            return self._ingest_on(conn, run_id, start_offset, batch)

    def _ingest_on(self, conn: Connection, run_id: str, start_offset: int,
                   batch: JournalBatch) -> bool:
        """Apply one batch inside the caller's transaction (of ingest or ingest_many)."""
        if self.dialect == "postgresql":
            # several processes may ingest one journal (its writer, a reader catching
            # up); serialise them per run so the offset check below is exact
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(hashtext(:k))"),
                         {"k": f"reprise-ingest:{run_id}"})
        row = conn.execute(
            sa.select(s.runs.c.journal_offset).where(s.runs.c.id == run_id)
        ).first()
        stored = 0 if row is None else int(row[0])
        if stored != start_offset:
            return False
        for env in batch.environments:
            self._insert_ignore(conn, s.environments, [{
                "hash": env["hash"], "fingerprint": json.dumps(env["fingerprint"]),
                "created_at": time.time()}], ["hash"])
        if batch.header is not None and row is None:
            conn.execute(s.runs.insert().values(**_run_row(batch.header)))
        elif row is None:
            raise StoreError(f"journal of run {run_id} has no header; it cannot be ingested.")
        self._apply_body(conn, run_id, batch)
        conn.execute(s.runs.update().where(s.runs.c.id == run_id)
                     .values(journal_offset=batch.end_offset))
        return True

    def _apply_body(self, conn: Connection, run_id: str, batch: JournalBatch) -> None:
        if batch.params:
            self._upsert(conn, s.params, [
                {"run_id": run_id, "key": k, "value": json.dumps(v)}
                for k, v in batch.params.items()], ["run_id", "key"])
        if batch.tags:
            self._upsert(conn, s.tags, [
                {"run_id": run_id, "key": k, "value": str(v)} for k, v in batch.tags.items()],
                ["run_id", "key"])
        for art in batch.artifacts:
            self._insert_ignore(conn, s.artifacts, [_artifact_row(art)], ["hash"])
            self._upsert(conn, s.run_artifacts, [
                {"run_id": run_id, "name": art["name"], "artifact_hash": art["hash"]}],
                ["run_id", "name"])
        if batch.metrics:
            if self.dialect == "postgresql":
                _copy_metrics(conn, run_id, batch.metrics)
            else:
                conn.execute(s.metrics.insert(), [
                    {"run_id": run_id, "key": k, "step": st,
                     "value": None if v != v else v, "timestamp": ts}
                    for k, st, v, ts in batch.metrics])
        for step in batch.steps:
            self._ingest_step(conn, run_id, step)
        if batch.end is not None:
            end = batch.end
            conn.execute(
                s.runs.update()
                .where(s.runs.c.id == run_id, s.runs.c.status == RunStatus.RUNNING.value)
                .values(status=end["status"], ended_at=end["ended_at"], error=end.get("error"),
                        energy_joules=end.get("energy_joules"),
                        energy_source=end.get("energy_source")))

    def _ingest_step(self, conn: Connection, run_id: str, step: dict[str, Any]) -> None:
        """One pipeline step run and its lineage edges (inputs and outputs)."""
        arts = [a for a in (*step.get("inputs", ()), *step.get("outputs", ())) if "size" in a]
        if arts:
            self._insert_ignore(conn, s.artifacts, [_artifact_row(a) for a in arts], ["hash"])
        cols = ("step_name", "cache_key", "status", "reused_from", "started_at", "ended_at",
                "duration", "energy_joules", "error", "seed", "code_hash")
        row = {"id": step["id"], "run_id": run_id, **{c: step.get(c) for c in cols},
               "details": json.dumps(step.get("details") or {})}
        self._upsert(conn, s.step_runs, [row], ["id"])
        if step.get("inputs"):
            self._upsert(conn, s.step_inputs, [
                {"step_run_id": step["id"], "name": a["name"], "artifact_hash": a["hash"],
                 "source": a.get("source")} for a in step["inputs"]],
                ["step_run_id", "name"])
        if step.get("outputs"):
            self._upsert(conn, s.step_outputs, [
                {"step_run_id": step["id"], "name": a["name"], "artifact_hash": a["hash"]}
                for a in step["outputs"]], ["step_run_id", "name"])

    def _upsert(self, conn: Connection, table: sa.Table, rows: list[dict[str, Any]],
                keys: list[str]) -> None:
        # the statement built once per table, key and columns: building ``excluded``'s
        # column collection cost more than the SQL itself (~0.3 ms a call; a server's
        # rollout controller upserts its outcome buckets every second)
        cache_key = (table.name, tuple(keys), tuple(rows[0]))
        upsert = self._upserts.get(cache_key)
        if upsert is None:
            stmt = self._dialect_insert(table)
            update = {c: getattr(stmt.excluded, c) for c in rows[0] if c not in keys}
            upsert = self._upserts[cache_key] = stmt.on_conflict_do_update(
                index_elements=keys, set_=update)
        conn.execute(upsert, rows)

    def _insert_ignore(self, conn: Connection, table: sa.Table, rows: list[dict[str, Any]],
                       keys: list[str]) -> None:
        conn.execute(self._dialect_insert(table).on_conflict_do_nothing(index_elements=keys),
                     rows)

    def _dialect_insert(self, table: sa.Table) -> Any:
        if self.dialect == "sqlite":
            from sqlalchemy.dialects import sqlite

            return sqlite.insert(table)
        if self.dialect == "postgresql":
            from sqlalchemy.dialects import postgresql

            return postgresql.insert(table)
        else:  # pragma: no cover - only the two tested backends are supported
            raise StoreError(f"unsupported database dialect {self.dialect!r}")

    # -- runs ------------------------------------------------------------------------
    def get_run(self, run_id: str) -> RunRecord:
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(s.runs).where(s.runs.c.id.like(f"{_escape_like(run_id)}%",
                                                         escape="\\")).limit(2)
            ).mappings().all()
            if not rows:
                raise RunNotFoundError(
                    f"no run with id {run_id!r}; `reprise runs list` shows the runs."
                )
            exact = [r for r in rows if r["id"] == run_id]
            if len(rows) > 1 and not exact:
                raise AmbiguousIdError(
                    f"run id {run_id!r} matches several runs; give more characters."
                )
            record = _record(exact[0] if exact else rows[0])
            self._attach_params_tags(conn, [record])
            return record

    def list_runs(self, flt: RunFilter | None = None) -> list[RunRecord]:
        f = flt or RunFilter()
        q = sa.select(s.runs)
        if f.name is not None:
            q = q.where(s.runs.c.name == f.name)
        if f.status is not None:
            q = q.where(s.runs.c.status == RunStatus(f.status).value)
        if f.parent_id is not None:
            q = q.where(s.runs.c.parent_id == f.parent_id)
        if f.top_level:
            q = q.where(s.runs.c.parent_id.is_(None))
        for key, value in f.tags.items():
            q = q.where(sa.exists().where(s.tags.c.run_id == s.runs.c.id, s.tags.c.key == key,
                                          s.tags.c.value == value))
        if f.order_by_metric:
            q = self._order_by_metric(q, f.order_by_metric, f.ascending)
        else:
            q = q.order_by(s.runs.c.id.asc() if f.ascending else s.runs.c.id.desc())
        if f.limit:
            q = q.limit(f.limit)
        with self.engine.connect() as conn:
            records = [_record(r) for r in conn.execute(q).mappings()]
            self._attach_params_tags(conn, records)
        return records

    def _order_by_metric(self, q: Any, key: str, ascending: bool) -> Any:
        m, last = s.metrics.alias("m_value"), s.metrics.alias("m_last")
        last_step = (sa.select(sa.func.max(last.c.step))
                     .where(last.c.run_id == s.runs.c.id, last.c.key == key)
                     .correlate(s.runs).scalar_subquery())
        value = (sa.select(m.c.value)
                 .where(m.c.run_id == s.runs.c.id, m.c.key == key, m.c.step == last_step)
                 .order_by(m.c.id.desc()).limit(1).correlate(s.runs).scalar_subquery())
        order = value.asc() if ascending else value.desc()
        return q.where(value.is_not(None)).order_by(order, s.runs.c.id.desc())

    def _attach_params_tags(self, conn: Connection, records: list[RunRecord]) -> None:
        if not records:
            return
        by_id = {r.id: r for r in records}
        for chunk in _chunks(list(by_id), 500):
            for row in conn.execute(sa.select(s.params).where(s.params.c.run_id.in_(chunk))):
                by_id[row.run_id].params[row.key] = json.loads(row.value)
            for row in conn.execute(sa.select(s.tags).where(s.tags.c.run_id.in_(chunk))):
                by_id[row.run_id].tags[row.key] = row.value

    def run_ids_around(self, first: str, last: str) -> list[str]:
        col = s.runs.c.id
        with self.engine.connect() as conn:
            inside = [r[0] for r in conn.execute(
                sa.select(col).where(col >= first, col <= last).order_by(col))]
            below = conn.execute(sa.select(col).where(col < first)
                                 .order_by(col.desc()).limit(1)).scalar()
            above = conn.execute(sa.select(col).where(col > last)
                                 .order_by(col).limit(1)).scalar()
        return ([below] if below else []) + inside + ([above] if above else [])

    def running_run_ids(self) -> list[str]:
        with self.engine.connect() as conn:
            q = sa.select(s.runs.c.id).where(s.runs.c.status == RunStatus.RUNNING.value)
            return [r[0] for r in conn.execute(q)]

    def mark_run_ended(self, run_id: str, status: RunStatus, ended_at: float,
                       error: str | None = None) -> None:
        def go() -> None:
            with self._write() as conn:
                conn.execute(
                    s.runs.update()
                    .where(s.runs.c.id == run_id, s.runs.c.status == RunStatus.RUNNING.value)
                    .values(status=RunStatus(status).value, ended_at=ended_at, error=error))
        self._retry(go)

    # -- metrics ---------------------------------------------------------------------
    def get_metrics(self, run_id: str, key: str | None = None) -> list[MetricPoint]:
        m = s.metrics
        q = sa.select(m.c.key, m.c.step, m.c.value, m.c.timestamp).where(m.c.run_id == run_id)
        if key is not None:
            q = q.where(m.c.key == key)
        q = q.order_by(m.c.key, m.c.step, m.c.id)
        with self.engine.connect() as conn:
            return [MetricPoint(k, int(st), math.nan if v is None else float(v), float(ts))
                    for k, st, v, ts in conn.execute(q)]

    def metric_key_stats(self, run_id: str) -> dict[str, tuple[int, int, int]]:
        m = s.metrics
        q = (sa.select(m.c.key, sa.func.count(), sa.func.min(m.c.step), sa.func.max(m.c.step))
             .where(m.c.run_id == run_id).group_by(m.c.key))
        with self.engine.connect() as conn:
            return {k: (int(n), int(lo), int(hi)) for k, n, lo, hi in conn.execute(q)}

    def latest_metrics(self, run_ids: Sequence[str]) -> dict[str, dict[str, MetricPoint]]:
        out: dict[str, dict[str, MetricPoint]] = {rid: {} for rid in run_ids}
        with self.engine.connect() as conn:
            for chunk in _chunks(list(out), 500):
                q = sa.text(latest_metrics_sql(len(chunk),
                                                  lateral=self.dialect == "postgresql"))
                for row in conn.execute(q, {f"r{i}": rid for i, rid in enumerate(chunk)}):
                    out[row[0]][row[1]] = latest_point(row)
        return out

    # -- environments and artifacts --------------------------------------------------
    def get_environment(self, env_hash: str) -> dict[str, Any]:
        with self.engine.connect() as conn:
            q = sa.select(s.environments.c.fingerprint).where(s.environments.c.hash == env_hash)
            text = conn.execute(q).scalar()
        if text is None:
            raise EnvironmentNotFoundError(f"no environment with hash {env_hash[:12]}...")
        result: dict[str, Any] = json.loads(text)
        return result

    def put_artifact(self, record: ArtifactRecord) -> None:
        row = _artifact_row({"hash": record.hash, "size": record.size, "kind": record.kind,
                             "materializer": record.materializer, "meta": record.meta,
                             "created": record.created})

        def go() -> None:
            with self._write() as conn:
                self._insert_ignore(conn, s.artifacts, [row], ["hash"])
        self._retry(go)

    def get_artifact(self, artifact_hash: str) -> ArtifactRecord:
        with self.engine.connect() as conn:
            q = sa.select(s.artifacts).where(s.artifacts.c.hash == artifact_hash)
            row = conn.execute(q).mappings().first()
        if row is None:
            raise ArtifactNotFoundError(f"no artifact recorded with hash {artifact_hash!r}.")
        return _artifact_record(row)

    def list_artifacts(self) -> list[ArtifactRecord]:
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(s.artifacts).order_by(s.artifacts.c.hash)).mappings()
            return [_artifact_record(r) for r in rows]

    def delete_artifacts(self, hashes: Sequence[str]) -> None:
        def go() -> None:
            with self._write() as conn:
                for chunk in _chunks(list(hashes), 500):
                    conn.execute(s.artifacts.delete().where(s.artifacts.c.hash.in_(chunk)))
        self._retry(go)

    def run_artifacts(self, run_id: str) -> dict[str, ArtifactRecord]:
        ra, a = s.run_artifacts, s.artifacts
        q = (sa.select(ra.c.name, a).join(a, a.c.hash == ra.c.artifact_hash)
             .where(ra.c.run_id == run_id).order_by(ra.c.name))
        with self.engine.connect() as conn:
            return {r["name"]: _artifact_record(r) for r in conn.execute(q).mappings()}

    def referenced_artifact_hashes(self) -> set[str]:
        refs = [s.run_artifacts.c.artifact_hash, s.step_inputs.c.artifact_hash,
                s.step_outputs.c.artifact_hash, s.datasets.c.artifact_hash,
                s.model_versions.c.package_hash, s.request_log.c.artifact_hash,
                s.monitor_references.c.artifact_hash]
        out: set[str] = set()
        with self.engine.connect() as conn:
            for col in refs:
                out.update(r[0] for r in conn.execute(sa.select(col).distinct()))
        return out


    # -- datasets --------------------------------------------------------------------
    def add_dataset_version(self, record: DatasetRecord) -> tuple[DatasetRecord, bool]:
        d = s.datasets

        def go() -> tuple[DatasetRecord, bool]:
            with self._write() as conn:
                if self.dialect == "postgresql":  # SQLite's BEGIN IMMEDIATE already serialises
                    conn.execute(sa.text("SELECT pg_advisory_xact_lock(hashtext(:k))"),
                                 {"k": "reprise-dataset:" + record.name})
                q = (sa.select(d).where(d.c.name == record.name)
                     .order_by(d.c.version.desc()).limit(1))
                newest = conn.execute(q).mappings().first()
                if newest is not None and newest["artifact_hash"] == record.artifact_hash:
                    return _dataset_record(newest), False
                version = 1 if newest is None else int(newest["version"]) + 1
                row = {"name": record.name, "version": version,
                       "artifact_hash": record.artifact_hash, "format": record.format,
                       "rows": record.rows,
                       "schema": None if record.schema is None else json.dumps(record.schema),
                       "profile": None if record.profile is None
                       else json.dumps(record.profile, allow_nan=False),
                       "meta": json.dumps(record.meta, sort_keys=True),
                       "created_at": record.created_at or time.time()}
                conn.execute(d.insert().values(**row))
                return _dataset_record(row), True
        return self._retry(go)

    def get_dataset_version(self, name: str, version: int | None = None) -> DatasetRecord | None:
        d = s.datasets
        q = sa.select(d).where(d.c.name == name)
        q = (q.order_by(d.c.version.desc()).limit(1) if version is None
             else q.where(d.c.version == version))
        with self.engine.connect() as conn:
            row = conn.execute(q).mappings().first()
        return None if row is None else _dataset_record(row)

    def list_dataset_versions(self, name: str | None = None) -> list[DatasetRecord]:
        d = s.datasets
        q = sa.select(d).order_by(d.c.name, d.c.version)
        if name is not None:
            q = q.where(d.c.name == name)
        with self.engine.connect() as conn:
            return [_dataset_record(r) for r in conn.execute(q).mappings()]

    def set_dataset_schema(self, name: str, spec: str | None, source: str | None) -> None:
        row = {"name": name, "spec": spec, "source": source, "updated_at": time.time()}

        def go() -> None:
            with self._write() as conn:
                self._upsert(conn, s.dataset_schemas, [row], ["name"])
        self._retry(go)

    def get_dataset_schema(self, name: str) -> tuple[str | None, str | None] | None:
        ds = s.dataset_schemas
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(ds).where(ds.c.name == name)).mappings().first()
        return None if row is None else (row["spec"], row["source"])

    def get_step_runs(self, run_id: str) -> list[dict[str, Any]]:
        run_id = self.get_run(run_id).id
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(s.step_runs).where(s.step_runs.c.run_id == run_id)
                                .order_by(s.step_runs.c.started_at, s.step_runs.c.id)).mappings()
            steps = [_step_dict(r) for r in rows]
            self._attach_edges(conn, steps)
        return steps

    def producers_of(self, artifact_hash: str) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            q = (sa.select(s.step_runs).join(s.step_outputs,
                                             s.step_outputs.c.step_run_id == s.step_runs.c.id)
                 .where(s.step_outputs.c.artifact_hash == artifact_hash)
                 .order_by(sa.case((s.step_runs.c.status == "executed", 0), else_=1),
                           s.step_runs.c.started_at.desc()))
            steps = [_step_dict(r) for r in conn.execute(q).mappings()]
            self._attach_edges(conn, steps)
        return steps

    def _attach_edges(self, conn: Connection, steps: list[dict[str, Any]]) -> None:
        if not steps:
            return
        ids = [st["id"] for st in steps]
        by_id = {st["id"]: st for st in steps}
        for st in steps:
            st["inputs"], st["outputs"] = [], []
        for table, key in ((s.step_inputs, "inputs"), (s.step_outputs, "outputs")):
            for r in conn.execute(sa.select(table).where(table.c.step_run_id.in_(ids))
                                  .order_by(table.c.name)).mappings():
                edge = {"name": r["name"], "hash": r["artifact_hash"]}
                if key == "inputs":
                    edge["source"] = r["source"]
                by_id[r["step_run_id"]][key].append(edge)


def _copy_metrics(conn: Connection, run_id: str,
                  points: Sequence[tuple[str, int, float, float]]) -> None:
    """Insert metric points with PostgreSQL's COPY (psycopg 3's ``Cursor.copy``), inside
    the caller's transaction: several times the rate of an executemany of INSERTs, the
    bulk of ingestion (bench/bench_pg_ingest.py). NaN is stored as NULL, as elsewhere."""
    cols = ", ".join(f'"{c}"' for c in ("run_id", "key", "step", "value", "timestamp"))
    raw = conn.connection.driver_connection
    assert raw is not None  # an open connection in a transaction
    with raw.cursor() as cur, cur.copy(f"COPY metrics ({cols}) FROM STDIN") as copy:
        for key, step, value, ts in points:
            copy.write_row((run_id, key, step, None if value != value else value, ts))


def _step_dict(r: Any) -> dict[str, Any]:
    d = dict(r)
    d["details"] = json.loads(d.get("details") or "{}")
    return d


def upgrade_database(engine: Engine, revision: str = "head") -> None:
    """Run the Alembic migrations up to ``revision``, serialised across processes."""
    from alembic import command
    from alembic.config import Config as AlembicConfig

    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(Path(__file__).parent / "migrations"))
    with _migration_lock(engine), engine.connect() as conn:
        cfg.attributes["connection"] = conn
        try:
            command.upgrade(cfg, revision)
        except Exception as exc:  # alembic raises CommandError for unknown revisions
            if "Can't locate revision" in str(exc):
                raise SchemaVersionError(
                    f"the database was written by a newer Reprise ({exc}); upgrade Reprise."
                ) from exc
            raise
        conn.commit()


@contextlib.contextmanager
def _migration_lock(engine: Engine) -> Iterator[None]:
    if engine.dialect.name == "postgresql":
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT pg_advisory_lock(727372)")
            try:
                yield
            finally:
                conn.exec_driver_sql("SELECT pg_advisory_unlock(727372)")
                conn.commit()
        return
    database = engine.url.database
    if not database or database == ":memory:":
        yield
        return
    fd = os.open(f"{database}.migrate.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _chunks(items: list[str], size: int) -> Iterator[list[str]]:
    for i in range(0, len(items), size):
        yield items[i:i + size]


def _run_row(h: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": h["id"], "parent_id": h.get("parent_id"), "kind": h.get("kind", "run"),
        "name": h["name"], "status": RunStatus.RUNNING.value, "started_at": h["started_at"],
        "seed": h.get("seed"), "env_hash": h.get("env_hash"), "code_hash": h.get("code_hash"),
        "git_commit": h.get("git_commit"), "git_dirty": h.get("git_dirty"),
        "host": h.get("host"), "user": h.get("user"), "pid": h.get("pid"),
        "journal_offset": 0,
    }


def _artifact_row(a: dict[str, Any]) -> dict[str, Any]:
    return {"hash": a["hash"], "size": a["size"], "kind": a["kind"],
            "materializer": a["materializer"], "meta": json.dumps(a.get("meta") or {}),
            "created_at": a.get("created") or time.time()}
