"""The request log's chunk index and feedback on SQLAlchemy (a mixin of
:class:`SqlMetadataStore`, beside the registry's and the rollouts').

* A chunk row names a complete blob: the server writes the Parquet file into the
  artifact store first (atomically: temp file, fsync, rename), then records the blob
  and indexes the chunk here in one transaction. A server killed in between leaves an
  unrecorded blob for ``reprise gc``, never an index row without its file.
* Chunk ids are new ULID-style ids and blobs are named by their content, so any number
  of servers write into one workspace without a name to agree on.
* Feedback is keyed by (model name, request id): sending a label again replaces it
  (an upsert, one statement per batch on SQLite and PostgreSQL alike).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import sqlalchemy as sa

from reprise.core._reqlog_types import RequestChunk
from reprise.core._types import ArtifactRecord
from reprise.store import _schema as s

__all__ = ["SqlRequestLogMixin"]

T = TypeVar("T")
_IN_CHUNK = 500  # ids per IN (...) list: well under SQLite's bound on parameters


class SqlRequestLogMixin:
    """Request-log methods; the host class provides ``engine``, ``_write``, ``_retry``,
    ``_upsert``, ``_insert_ignore`` and ``_artifact_row``."""

    engine: Any
    _write: Callable[[], Any]
    _retry: Callable[[Callable[[], T]], T]
    _upsert: Callable[..., None]
    _insert_ignore: Callable[..., None]

    def add_request_chunk(self, chunk: RequestChunk, artifact: ArtifactRecord) -> None:
        from reprise.store._sql import _artifact_row

        art = _artifact_row({"hash": artifact.hash, "size": artifact.size,
                             "kind": artifact.kind, "materializer": artifact.materializer,
                             "meta": artifact.meta, "created": artifact.created})

        def go() -> None:
            with self._write() as conn:
                self._insert_ignore(conn, s.artifacts, [art], ["hash"])
                conn.execute(s.request_log.insert().values(**chunk.to_dict()))
        self._retry(go)

    def list_request_chunks(self, name: str | None = None, *, version: int | None = None,
                            start: float | None = None, end: float | None = None,
                            ) -> list[RequestChunk]:
        r = s.request_log
        q = sa.select(r).order_by(r.c.first_at, r.c.id)
        if name is not None:
            q = q.where(r.c.name == name)
        if version is not None:
            q = q.where(r.c.version == version)
        if start is not None:
            q = q.where(r.c.last_at >= start)
        if end is not None:
            q = q.where(r.c.first_at <= end)
        with self.engine.connect() as conn:
            return [_chunk(row) for row in conn.execute(q).mappings()]

    def delete_request_chunks(self, chunk_ids: Sequence[str]) -> list[str]:
        r = s.request_log
        ids = list(chunk_ids)

        def go() -> list[str]:
            with self._write() as conn:
                hashes: set[str] = set()
                for part in _parts(ids):
                    hashes.update(row[0] for row in conn.execute(
                        sa.select(r.c.artifact_hash).where(r.c.id.in_(part))))
                    conn.execute(r.delete().where(r.c.id.in_(part)))
                still: set[str] = set()
                for part in _parts(sorted(hashes)):
                    still.update(row[0] for row in conn.execute(
                        sa.select(r.c.artifact_hash).where(r.c.artifact_hash.in_(part))))
                return sorted(hashes - still)
        return self._retry(go)

    def add_feedback(self, name: str, items: Sequence[tuple[str, str]],
                     received_at: float) -> int:
        rows = {rid: {"name": name, "request_id": rid, "label": label,
                      "received_at": received_at} for rid, label in items}
        if not rows:
            return 0

        def go() -> None:
            with self._write() as conn:
                values = list(rows.values())
                for i in range(0, len(values), _IN_CHUNK):
                    self._upsert(conn, s.feedback, values[i:i + _IN_CHUNK],
                                 ["name", "request_id"])
        self._retry(go)
        return len(rows)

    def get_feedback(self, name: str, request_ids: Sequence[str] | None = None,
                     ) -> dict[str, tuple[str, float]]:
        f = s.feedback
        q = sa.select(f.c.request_id, f.c.label, f.c.received_at).where(f.c.name == name)
        out: dict[str, tuple[str, float]] = {}
        with self.engine.connect() as conn:
            if request_ids is None:
                out.update((r[0], (r[1], float(r[2]))) for r in conn.execute(q))
                return out
            for part in _parts(sorted(set(request_ids))):
                out.update((r[0], (r[1], float(r[2])))
                           for r in conn.execute(q.where(f.c.request_id.in_(part))))
        return out


def _parts(items: list[str]) -> Iterator[list[str]]:
    for i in range(0, len(items), _IN_CHUNK):
        yield items[i:i + _IN_CHUNK]


def _chunk(row: Any) -> RequestChunk:
    return RequestChunk(id=row["id"], name=row["name"], version=int(row["version"]),
                        server=row["server"], first_at=float(row["first_at"]),
                        last_at=float(row["last_at"]), requests=int(row["requests"]),
                        rows=int(row["rows"]), artifact_hash=row["artifact_hash"],
                        size=int(row["size"]), created_at=float(row["created_at"]))
