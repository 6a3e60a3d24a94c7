"""Monitoring records on SQLAlchemy (a mixin of :class:`SqlMetadataStore`): which drift
reference a model version is judged against, and the summaries of its live windows.

A reference row names a complete artifact (the caller stores the JSON blob first, then
records blob and row in one transaction). A window row is keyed by the content of what
it summarises (model, version, span, rows, reference), so computing a window again
replaces its row instead of adding a second.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import sqlalchemy as sa

from reprise.core._monitor_types import MonitorReferenceRecord, WindowRecord
from reprise.core._types import ArtifactRecord
from reprise.store import _schema as s

__all__ = ["SqlMonitorMixin"]

T = TypeVar("T")


class SqlMonitorMixin:
    """Monitoring methods; the host class provides ``engine``, ``_write``, ``_retry``,
    ``_upsert`` and ``_insert_ignore``."""

    engine: Any
    _write: Callable[[], Any]
    _retry: Callable[[Callable[[], T]], T]
    _upsert: Callable[..., None]
    _insert_ignore: Callable[..., None]

    def put_monitor_reference(self, record: MonitorReferenceRecord,
                              artifact: ArtifactRecord) -> None:
        from reprise.store._sql import _artifact_row

        art = _artifact_row({"hash": artifact.hash, "size": artifact.size,
                             "kind": artifact.kind, "materializer": artifact.materializer,
                             "meta": artifact.meta, "created": artifact.created})

        def go() -> None:
            with self._write() as conn:
                self._insert_ignore(conn, s.artifacts, [art], ["hash"])
                self._upsert(conn, s.monitor_references, [record.to_dict()],
                             ["name", "version", "dataset"])
        self._retry(go)

    def get_monitor_reference(self, name: str, version: int, dataset: str | None = None,
                              ) -> MonitorReferenceRecord | None:
        r = s.monitor_references
        q = (sa.select(r).where(r.c.name == name, r.c.version == version)
             .order_by(r.c.created_at.desc()))
        if dataset is not None:
            q = q.where(r.c.dataset == dataset)
        with self.engine.connect() as conn:
            row = conn.execute(q.limit(1)).mappings().first()
        if row is None:
            return None
        return MonitorReferenceRecord(
            name=row["name"], version=int(row["version"]), dataset=row["dataset"],
            artifact_hash=row["artifact_hash"], sample_rows=int(row["sample_rows"]),
            predictions=row["predictions"], created_at=float(row["created_at"]))

    def add_monitor_windows(self, records: Sequence[WindowRecord]) -> None:
        rows = [{**{k: v for k, v in r.to_dict().items() if k != "summary"},
                 "summary": json.dumps(r.summary, sort_keys=True, allow_nan=False)}
                for r in records]
        if not rows:
            return

        def go() -> None:
            with self._write() as conn:
                self._upsert(conn, s.monitor_windows, rows, ["id"])
        self._retry(go)

    def list_monitor_windows(self, name: str | None = None, *, version: int | None = None,
                             limit: int | None = None) -> list[WindowRecord]:
        """Newest (by window end) first."""
        w = s.monitor_windows
        q = sa.select(w).order_by(w.c.end.desc(), w.c.computed_at.desc())
        if name is not None:
            q = q.where(w.c.name == name)
        if version is not None:
            q = q.where(w.c.version == version)
        if limit is not None:
            q = q.limit(limit)
        with self.engine.connect() as conn:
            return [_window(row) for row in conn.execute(q).mappings()]

    def latest_monitor_windows(self) -> list[WindowRecord]:
        """The newest window of every (model, version)."""
        w = s.monitor_windows
        newest = (sa.select(w.c.name, w.c.version, sa.func.max(w.c.end).label("end"))
                  .group_by(w.c.name, w.c.version).subquery())
        q = (sa.select(w).join(newest, sa.and_(w.c.name == newest.c.name,
                                               w.c.version == newest.c.version,
                                               w.c.end == newest.c.end))
             .order_by(w.c.name, w.c.version, w.c.computed_at.desc()))
        out: dict[tuple[str, int], WindowRecord] = {}
        with self.engine.connect() as conn:
            for row in conn.execute(q).mappings():
                rec = _window(row)
                out.setdefault((rec.name, rec.version), rec)
        return list(out.values())


def _window(row: Any) -> WindowRecord:
    return WindowRecord(name=row["name"], version=int(row["version"]),
                        start=float(row["start"]), end=float(row["end"]),
                        rows=int(row["rows"]), labelled=int(row["labelled"]),
                        input_verdict=row["input_verdict"],
                        prediction_verdict=row["prediction_verdict"],
                        performance_verdict=row["performance_verdict"],
                        reference_hash=row["reference_hash"],
                        summary=json.loads(row["summary"]),
                        computed_at=float(row["computed_at"]))
