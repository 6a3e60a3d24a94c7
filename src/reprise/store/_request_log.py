"""Chunks of the request log in a workspace: write one (Parquet blob, then its index
row), read one back, and prune by age and size.

A chunk's blob is complete before its row exists (the artifact store renames a fsynced
temp file into place; the row is written after), so every indexed chunk reads whole.
Pruning removes rows first and blobs after, the order ``gc`` uses, so a prune killed
midway leaves unrecorded blobs for ``reprise gc``, never rows without their files.
"""

from __future__ import annotations

import io
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from reprise.core import new_id
from reprise.core._reqlog_types import RequestChunk
from reprise.core._types import ArtifactRecord

if TYPE_CHECKING:
    import pyarrow as pa

    from reprise.store._workspace import Workspace

__all__ = ["PruneReport", "prune_request_log", "read_request_chunk", "write_request_chunk"]


@dataclass
class PruneReport:
    """What a prune removed: chunk ids, their rows and the bytes of their blobs."""

    chunks: list[str] = field(default_factory=list)
    rows: int = 0
    bytes_freed: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"chunks": len(self.chunks), "rows": self.rows, "bytes_freed": self.bytes_freed}


def write_request_chunk(workspace: Workspace, table: pa.Table, *, name: str, version: int,
                        server: str, first_at: float, last_at: float,
                        requests: int) -> RequestChunk:
    """Store ``table`` as a Parquet chunk (zstd) and index it; return its record."""
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd")
    data = buf.getvalue()
    h, size = workspace.artifacts.put_bytes(data)
    now = time.time()
    chunk = RequestChunk(id=new_id(), name=name, version=version, server=server,
                         first_at=first_at, last_at=last_at, requests=requests,
                         rows=table.num_rows, artifact_hash=h, size=size, created_at=now)
    # the arrow materializer's layout (a Parquet file), so `load_object` reads it too
    record = ArtifactRecord(hash=h, size=size, kind="table", materializer="arrow",
                            meta={"schema": str(table.schema), "rows": table.num_rows,
                                  "request_log": {"model": name, "version": version}},
                            created=now)
    workspace.metadata.add_request_chunk(chunk, record)
    return chunk


def read_request_chunk(workspace: Workspace, chunk: RequestChunk) -> pa.Table:
    """The rows of one chunk, as written."""
    import pyarrow.parquet as pq

    with workspace.artifacts.open(chunk.artifact_hash) as f:
        return pq.read_table(io.BytesIO(f.read()))


def prune_request_log(workspace: Workspace, *, name: str | None = None,
                      max_age_s: float | None = None, max_bytes: int | None = None,
                      now: float | None = None) -> PruneReport:
    """Remove chunks (of model ``name``, else of every model) whose last answer is older
    than ``max_age_s``, then the oldest ones until the chunks of each model take at most
    ``max_bytes``. ``None`` skips that rule.

    Example:
        >>> prune_request_log(ws, name="churn", max_age_s=30 * 86400)  # doctest: +SKIP
    """
    now = time.time() if now is None else now
    store = workspace.metadata
    chunks = store.list_request_chunks(name)
    doomed: dict[str, RequestChunk] = {}
    if max_age_s is not None:
        doomed.update((c.id, c) for c in chunks if c.last_at < now - max_age_s)
    if max_bytes is not None:
        by_model: dict[str, list[RequestChunk]] = {}
        for c in chunks:
            if c.id not in doomed:
                by_model.setdefault(c.name, []).append(c)
        for kept in by_model.values():  # oldest first (list order): drop from the front
            total = sum(c.size for c in kept)
            for c in kept:
                if total <= max_bytes:
                    break
                doomed[c.id] = c
                total -= c.size
    report = PruneReport(chunks=sorted(doomed))
    if not doomed:
        return report
    report.rows = sum(c.rows for c in doomed.values())
    freed = store.delete_request_chunks(report.chunks)
    # a blob another record names (identical bytes, however unlikely) stays
    still = store.referenced_artifact_hashes()
    gone = [h for h in freed if h not in still]
    store.delete_artifacts(gone)
    sizes = {c.artifact_hash: c.size for c in doomed.values()}
    for h in gone:
        if workspace.artifacts.delete(h):
            report.bytes_freed += sizes.get(h, 0)
    return report
