"""Read-only queries on the embedded SQLite database with the standard library's
``sqlite3``, for commands that only list and show (``reprise runs list``, ...).

Opening :class:`SqlMetadataStore` costs the SQLAlchemy import (about 0.15-0.3 s,
more than the query itself even on 10,000 runs). :func:`open_reader` gives a
:class:`SqliteReader` instead when that is safe, and None otherwise (the caller
then uses the full store, which migrates the schema and ingests journals):

- the store URL is a plain ``sqlite:///FILE`` whose file exists;
- the database is at the schema revision this Reprise reads (``HEAD_REVISION``);
- no journal waits to be ingested: every journal in ``journals/`` has a live
  writer (its lock is held) and the database already holds all of its complete
  lines (the run's ``journal_offset`` equals the file's size). A journal of a dead
  run, or one with new lines, sends the caller to the full store, whose opening
  recovers and ingests it, exactly as before.

Rows become records through the same functions as the SQLAlchemy store's
(``_rows``), and the latest-metric query is the same SQL text.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from reprise.core._types import (
    ArtifactRecord,
    DatasetRecord,
    MetricPoint,
    ModelVersionRecord,
    RunRecord,
    RunStatus,
)
from reprise.core.errors import AmbiguousIdError, RunNotFoundError
from reprise.store import _rows
from reprise.store._journal import SUFFIX, try_lock
from reprise.store._metadata_base import RunFilter

__all__ = ["SqliteReader", "open_reader"]

_CHUNK = 500


def _dict_row(cursor: sqlite3.Cursor, row: tuple[Any, ...]) -> dict[str, Any]:
    return {d[0]: v for d, v in zip(cursor.description, row, strict=True)}


def open_reader(store_url: str, journals_dir: Path) -> SqliteReader | None:
    """A reader on ``store_url``, or None when the full store must be opened instead."""
    path = _sqlite_path(store_url)
    if path is None or not os.path.isfile(path):
        return None
    conn = sqlite3.connect(path, timeout=60, check_same_thread=False)  # a lock guards it
    conn.row_factory = _dict_row
    try:
        rev = conn.execute("SELECT version_num FROM alembic_version").fetchone()
    except sqlite3.Error:  # not migrated yet, or not a database: the full store says
        conn.close()
        return None
    reader = SqliteReader(conn)
    if rev is None or rev["version_num"] != _rows.HEAD_REVISION or reader.journals_pending(
            journals_dir):
        reader.close()
        return None
    return reader


def _sqlite_path(url: str) -> str | None:
    """The file of a ``sqlite:///FILE`` URL (as SQLAlchemy reads it); None for any
    other URL, an in-memory database or one with query options."""
    prefix = "sqlite:///"
    if not url.startswith(prefix) or "?" in url:
        return None
    path = url[len(prefix):]
    return None if path in ("", ":memory:") else path


class SqliteReader:
    """The read methods of :class:`BaseMetadataStore` that listing commands use, with
    the same results. Thread-safe (queries take turns on one connection); never writes."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self._lock = threading.Lock()

    def _all(self, sql: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._conn.execute(sql, params or {}))

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def journals_pending(self, journals_dir: Path) -> bool:
        """Whether some journal holds lines the database lacks, or belongs to a dead run."""
        if not journals_dir.is_dir():
            return False
        for path in journals_dir.glob(f"*{SUFFIX}"):
            with try_lock(path) as fd:
                if fd is not None:  # no live writer: recovery must run
                    return True
            row = self._all("SELECT journal_offset FROM runs WHERE id = :id",
                            {"id": path.name[: -len(SUFFIX)]})
            try:
                size = path.stat().st_size
            except FileNotFoundError:  # archived meanwhile: fully ingested
                continue
            if not row or int(row[0]["journal_offset"]) != size:
                return True
        return False

    # -- runs ------------------------------------------------------------------------
    def get_run(self, run_id: str) -> RunRecord:
        escaped = run_id.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        rows = self._all("SELECT * FROM runs WHERE id LIKE :p ESCAPE '\\' LIMIT 2",
                         {"p": escaped + "%"})
        if not rows:
            raise RunNotFoundError(f"no run with id {run_id!r}; `reprise runs list` shows the "
                                   "runs.")
        exact = [r for r in rows if r["id"] == run_id]
        if len(rows) > 1 and not exact:
            raise AmbiguousIdError(f"run id {run_id!r} matches several runs; give more "
                                   "characters.")
        record = _rows.run_record(exact[0] if exact else rows[0])
        self._attach_params_tags([record])
        return record

    def list_runs(self, flt: RunFilter | None = None) -> list[RunRecord]:
        f = flt or RunFilter()
        where, params = _run_conditions(f)
        order = "runs.id ASC" if f.ascending else "runs.id DESC"
        if f.order_by_metric:
            value = _metric_value_sql()
            params["sort_key"] = f.order_by_metric
            where.append(f"{value} IS NOT NULL")
            order = f"{value} {'ASC' if f.ascending else 'DESC'}, runs.id DESC"
        sql = "SELECT * FROM runs" + (" WHERE " + " AND ".join(where) if where else "")
        sql += f" ORDER BY {order}" + (f" LIMIT {int(f.limit)}" if f.limit else "")
        records = [_rows.run_record(r) for r in self._all(sql, params)]
        self._attach_params_tags(records)
        return records

    def run_ids_around(self, first: str, last: str) -> list[str]:
        """As :meth:`BaseMetadataStore.run_ids_around`: the ids from ``first`` to ``last``
        and the nearest one on each side, by the primary key's index."""
        p = {"first": first, "last": last}
        inside = [r["id"] for r in self._all(
            "SELECT id FROM runs WHERE id >= :first AND id <= :last ORDER BY id", p)]
        below = self._all("SELECT id FROM runs WHERE id < :first ORDER BY id DESC LIMIT 1", p)
        above = self._all("SELECT id FROM runs WHERE id > :last ORDER BY id LIMIT 1", p)
        return [r["id"] for r in below] + inside + [r["id"] for r in above]

    def _attach_params_tags(self, records: list[RunRecord]) -> None:
        import json

        by_id = {r.id: r for r in records}
        ids = list(by_id)
        for i in range(0, len(ids), _CHUNK):
            marks, params = _rows.in_list("r", ids[i:i + _CHUNK])
            for row in self._all(f"SELECT * FROM params WHERE run_id IN ({marks})", params):
                by_id[row["run_id"]].params[row["key"]] = json.loads(row["value"])
            for row in self._all(f"SELECT * FROM tags WHERE run_id IN ({marks})", params):
                by_id[row["run_id"]].tags[row["key"]] = row["value"]

    def latest_metrics(self, run_ids: Sequence[str]) -> dict[str, dict[str, MetricPoint]]:
        out: dict[str, dict[str, MetricPoint]] = {rid: {} for rid in run_ids}
        ids = list(out)
        for i in range(0, len(ids), _CHUNK):
            chunk = ids[i:i + _CHUNK]
            params = {f"r{j}": rid for j, rid in enumerate(chunk)}
            for row in self._all(_rows.latest_metrics_sql(len(chunk)), params):
                values = tuple(row.values())
                out[values[0]][values[1]] = _rows.latest_point(values)
        return out

    def run_artifacts(self, run_id: str) -> dict[str, ArtifactRecord]:
        rows = self._all("SELECT ra.name AS name, a.* FROM run_artifacts ra JOIN artifacts a "
                         "ON a.hash = ra.artifact_hash WHERE ra.run_id = :id ORDER BY ra.name",
                         {"id": run_id})
        return {r["name"]: _rows.artifact_record(r) for r in rows}

    def get_step_runs(self, run_id: str) -> list[dict[str, Any]]:
        """As :meth:`BaseMetadataStore.get_step_runs`: the run's step runs in order, each
        with its ``details`` decoded and its ``inputs``/``outputs`` edges."""
        import json

        run_id = self.get_run(run_id).id
        steps = self._all("SELECT * FROM step_runs WHERE run_id = :id ORDER BY started_at, id",
                          {"id": run_id})
        by_id = {}
        for st in steps:
            st["details"] = json.loads(st.get("details") or "{}")
            st["inputs"], st["outputs"] = [], []
            by_id[st["id"]] = st
        ids = list(by_id)
        for i in range(0, len(ids), _CHUNK):
            marks, params = _rows.in_list("s", ids[i:i + _CHUNK])
            for table, key in (("step_inputs", "inputs"), ("step_outputs", "outputs")):
                for r in self._all(f"SELECT * FROM {table} WHERE step_run_id IN ({marks}) "
                                   "ORDER BY name", params):
                    edge = {"name": r["name"], "hash": r["artifact_hash"]}
                    if key == "inputs":
                        edge["source"] = r["source"]
                    by_id[r["step_run_id"]][key].append(edge)
        return steps

    # -- datasets and models ---------------------------------------------------------
    def list_dataset_versions(self, name: str | None = None) -> list[DatasetRecord]:
        where = "" if name is None else " WHERE name = :name"
        rows = self._all(f"SELECT * FROM datasets{where} ORDER BY name, version",
                         {"name": name})
        return [_rows.dataset_record(r) for r in rows]

    def list_model_versions(self, name: str | None = None) -> list[ModelVersionRecord]:
        where = "" if name is None else " WHERE name = :name"
        rows = self._all(f"SELECT * FROM model_versions{where} ORDER BY name, version",
                         {"name": name})
        return [_rows.version_record(r) for r in rows]

    def get_aliases(self, name: str) -> dict[str, int]:
        rows = self._all("SELECT alias, version FROM aliases WHERE name = :name ORDER BY alias",
                         {"name": name})
        return {str(r["alias"]): int(r["version"]) for r in rows}


def _run_conditions(f: RunFilter) -> tuple[list[str], dict[str, Any]]:
    where: list[str] = []
    params: dict[str, Any] = {}
    for column, value in (("name", f.name), ("parent_id", f.parent_id),
                          ("status", None if f.status is None else RunStatus(f.status).value)):
        if value is not None:
            where.append(f"runs.{column} = :{column}")
            params[column] = value
    if f.top_level:
        where.append("runs.parent_id IS NULL")
    for i, (key, value) in enumerate(f.tags.items()):
        where.append(f"EXISTS (SELECT 1 FROM tags WHERE tags.run_id = runs.id AND "
                     f"tags.key = :tk{i} AND tags.value = :tv{i})")
        params[f"tk{i}"], params[f"tv{i}"] = key, value
    return where, params


def _metric_value_sql() -> str:
    """The final value of metric ``:sort_key`` of each run (as the SQLAlchemy store's
    ``_order_by_metric``: the last point written at the highest step)."""
    return ("(SELECT m.value FROM metrics m WHERE m.run_id = runs.id AND m.key = :sort_key "
            "AND m.step = (SELECT MAX(l.step) FROM metrics l WHERE l.run_id = runs.id AND "
            "l.key = :sort_key) ORDER BY m.id DESC LIMIT 1)")
