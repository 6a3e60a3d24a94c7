"""What both metadata readers share: database rows to records, and the portable SQL
of the read queries (standard SQL that SQLite and PostgreSQL run unchanged).

Standard library only: the SQLAlchemy store (``_sql``) and the read-only SQLite
reader (``_sqlite_read``) both build their answers here, so the two cannot drift.
Parameters are named (``:name``), the style of both ``sqlite3`` and ``sqlalchemy.text``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from reprise.core._types import (
    ArtifactRecord,
    DatasetRecord,
    MetricPoint,
    ModelVersionRecord,
    RunKind,
    RunRecord,
    RunStatus,
)

__all__ = ["HEAD_REVISION", "artifact_record", "dataset_record", "in_list", "latest_metrics_sql",
           "latest_point", "loads", "run_record", "version_record"]

# Must equal the newest revision in migrations/versions. Kept here as a constant
# so that checking "is the database current?" needs no Alembic import (0.6 s)
# and no SQLAlchemy import (0.15-0.3 s).
HEAD_REVISION = "0010_list_indexes"


def run_record(r: Any) -> RunRecord:
    return RunRecord(
        id=r["id"], name=r["name"], kind=RunKind(r["kind"]), status=RunStatus(r["status"]),
        started_at=r["started_at"], ended_at=r["ended_at"], parent_id=r["parent_id"],
        seed=r["seed"], env_hash=r["env_hash"], code_hash=r["code_hash"],
        git_commit=r["git_commit"],
        git_dirty=None if r["git_dirty"] is None else bool(r["git_dirty"]),
        host=r["host"], user=r["user"], pid=r["pid"], error=r["error"],
        energy_joules=r["energy_joules"], energy_source=r["energy_source"],
    )


def dataset_record(row: Any) -> DatasetRecord:
    return DatasetRecord(
        name=row["name"], version=int(row["version"]), artifact_hash=row["artifact_hash"],
        format=row["format"] or "file", rows=None if row["rows"] is None else int(row["rows"]),
        schema=None if row["schema"] is None else json.loads(row["schema"]),
        profile=None if row["profile"] is None else json.loads(row["profile"]),
        meta=json.loads(row["meta"] or "{}"), created_at=float(row["created_at"]))


def artifact_record(r: Any) -> ArtifactRecord:
    return ArtifactRecord(hash=r["hash"], size=int(r["size"]), kind=r["kind"],
                          materializer=r["materializer"], meta=json.loads(r["meta"] or "{}"),
                          created=float(r["created_at"]))


def loads(text: str | None) -> Any:
    return json.loads(text) if text else {}


def version_record(r: Any) -> ModelVersionRecord:
    sig = r.get("signature")
    return ModelVersionRecord(name=r["name"], version=int(r["version"]),
                              package_hash=r["package_hash"], run_id=r.get("run_id"),
                              status=r["status"],
                              signature=json.loads(sig) if sig else None,
                              metrics=loads(r.get("metrics")), meta=loads(r.get("meta")),
                              created_at=float(r["created_at"]))


def in_list(prefix: str, values: Sequence[Any]) -> tuple[str, dict[str, Any]]:
    """``:p0, :p1, ...`` and their values, for ``IN (...)``."""
    names = [f"{prefix}{i}" for i in range(len(values))]
    return ", ".join(f":{n}" for n in names), dict(zip(names, values, strict=True))


def latest_metrics_sql(n_runs: int, *, lateral: bool = False) -> str:
    """The last point (highest step, then the last written) of every key of ``n_runs``
    runs (parameters ``:r0`` ...), as rows ``run_id, key, step, value, timestamp``.

    Never scans a run's points: the keys are found by a loose index scan (one seek
    per key on ``ix_metrics_run_key_step``) and each last point by one more seek, so
    the cost follows the number of keys, not the number of points.

    ``lateral`` (PostgreSQL): fetch each last point in a ``LATERAL`` subquery. There,
    the portable join on ``p.id = (SELECT ...)`` is planned as a hash join over a
    sequential scan of the whole metrics table (the correlated subquery cannot drive an
    index lookup), which made ``runs list`` grow with every point ever logged
    (bench/bench_scale.py); SQLite has no LATERAL and plans the join as a lookup.
    """
    ids = ", ".join(f":r{i}" for i in range(n_runs))
    keys = f"""
WITH RECURSIVE k(run_id, key) AS (
  SELECT r.id, (SELECT MIN(m.key) FROM metrics m WHERE m.run_id = r.id)
  FROM runs r WHERE r.id IN ({ids})
  UNION ALL
  SELECT k.run_id, (SELECT MIN(m.key) FROM metrics m WHERE m.run_id = k.run_id AND m.key > k.key)
  FROM k WHERE k.key IS NOT NULL
)"""
    if lateral:
        return keys + """
SELECT k.run_id, k.key, p.step, p.value, p.timestamp
FROM k CROSS JOIN LATERAL (
  SELECT l.step, l.value, l.timestamp FROM metrics l WHERE l.run_id = k.run_id AND l.key = k.key
  ORDER BY l.step DESC, l.id DESC LIMIT 1) p
ORDER BY k.run_id, k.key"""
    return keys + """
SELECT k.run_id, k.key, p.step, p.value, p.timestamp
FROM k JOIN metrics p ON p.id = (
  SELECT l.id FROM metrics l WHERE l.run_id = k.run_id AND l.key = k.key
  ORDER BY l.step DESC, l.id DESC LIMIT 1)
ORDER BY k.run_id, k.key"""


def latest_point(row: Sequence[Any]) -> MetricPoint:
    """A row of :func:`latest_metrics_sql` as a point (NULL stands for NaN)."""
    _, key, step, value, ts = row
    return MetricPoint(key, int(step), math.nan if value is None else float(value), float(ts))
