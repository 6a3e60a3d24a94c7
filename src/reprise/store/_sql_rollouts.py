"""Rollouts, their outcome buckets and leases on SQLAlchemy (a mixin of
:class:`SqlMetadataStore`, beside the registry's).

* A rollout's creation and each of its decisions are one transaction with their audit
  event, in the registry's hash chain (and under its lock: see ``_sql_registry``).
  A decision is a compare-and-set on ``decisions``: two servers that analysed the
  same window both try, exactly one applies, and the other learns it lost. A
  promotion moves the alias in that same transaction, by the rules of ``set_alias``.
* A partial unique index keeps one running rollout per alias, whatever callers
  checked first.
* Buckets add up: writing a row whose key exists adds its counts to the stored ones,
  so a server may flush one bucket in several parts.
* A lease is a row ``(key, holder, expires_at)`` (Kubernetes' leader election ``Lease``):
  taken when absent, expired or already one's own, by one conditional statement, so
  two takers never both win.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from reprise.core._rollout_types import BucketRow, RolloutRecord
from reprise.core.errors import UserError
from reprise.store import _schema as s
from reprise.store._sql_registry import Event

__all__ = ["SqlRolloutMixin"]

T = TypeVar("T")
_JSON_FIELDS = ("steps", "policy", "key")
_FIXED = ("id", "name", "alias", "stable", "candidate", "created_at", "decisions")


class SqlRolloutMixin:
    """Rollout methods; the host class provides ``_tx``, ``_append``, ``_move_alias``,
    ``_write``, ``_retry``, ``_upsert``, ``_dialect_insert``, ``engine`` and ``dialect``."""

    engine: Any
    dialect: str
    _tx: Callable[..., Any]
    _append: Callable[..., Any]
    _move_alias: Callable[..., Any]
    _write: Callable[[], Any]
    _retry: Callable[[Callable[[], T]], T]
    _upsert: Callable[..., None]
    _dialect_insert: Callable[[sa.Table], Any]

    # -- rollouts ---------------------------------------------------------------------
    def create_rollout(self, rec: RolloutRecord, event: Event) -> RolloutRecord:
        r, al = s.rollouts, s.aliases

        def go(conn: Connection) -> RolloutRecord:
            running = conn.execute(sa.select(r.c.id, r.c.candidate, r.c.strategy).where(
                r.c.name == rec.name, r.c.alias == rec.alias, r.c.state == "running")
            ).first()
            if running is not None:
                raise UserError(
                    f"{rec.ref} already has a running rollout {running[0]} (to version "
                    f"{running[1]}, {running[2]}); one rollout per alias at a time. Finish it "
                    f"with `reprise rollout promote {rec.name} --alias {rec.alias}` or "
                    f"`reprise rollout abort {rec.name} --alias {rec.alias}`")
            now = conn.execute(sa.select(al.c.version).where(
                al.c.name == rec.name, al.c.alias == rec.alias)).scalar()
            if now is None or int(now) != rec.stable:
                raise UserError(f"{rec.ref} moved to version {now} while the rollout from "
                                f"{rec.stable} was being prepared; start it again")
            conn.execute(r.insert().values(**_row(rec)))
            self._append(conn, event, rollout=rec.id)
            return rec
        return self._tx(go)  # type: ignore[no-any-return]

    def get_rollout(self, rollout_id: str) -> RolloutRecord | None:
        r = s.rollouts
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(r).where(r.c.id == rollout_id)).mappings().first()
        return None if row is None else _record(row)

    def find_rollout(self, name: str, alias: str | None = None, *,
                     running_only: bool = False) -> RolloutRecord | None:
        found = self.list_rollouts(name, alias=alias, running_only=running_only)
        return found[0] if found else None

    def list_rollouts(self, name: str | None = None, *, alias: str | None = None,
                      running_only: bool = False) -> list[RolloutRecord]:
        r = s.rollouts
        q = sa.select(r).order_by(r.c.created_at.desc(), r.c.id.desc())
        if name is not None:
            q = q.where(r.c.name == name)
        if alias is not None:
            q = q.where(r.c.alias == alias)
        if running_only:
            q = q.where(r.c.state == "running")
        with self.engine.connect() as conn:
            return [_record(row) for row in conn.execute(q).mappings()]

    def apply_rollout_decision(self, rollout_id: str, expected_decisions: int,
                               changes: dict[str, Any], event: Event, *,
                               move_alias_to: int | None = None,
                               package_hash: str | None = None) -> bool:
        fields = set(RolloutRecord.__dataclass_fields__)
        bad = sorted((set(changes) & set(_FIXED)) | (set(changes) - fields))
        if bad:
            raise ValueError(f"a decision cannot change {bad}")
        r = s.rollouts
        values = {k: json.dumps(v, sort_keys=True) if k in _JSON_FIELDS else v
                  for k, v in changes.items()}

        def go(conn: Connection) -> bool:
            done = conn.execute(r.update().where(
                r.c.id == rollout_id, r.c.decisions == expected_decisions,
                r.c.state == "running").values(decisions=expected_decisions + 1, **values))
            if done.rowcount != 1:
                return False  # someone else decided first (or the rollout ended)
            self._append(conn, event, rollout=rollout_id, decision=expected_decisions + 1)
            if move_alias_to is not None:
                name, alias = conn.execute(sa.select(r.c.name, r.c.alias)
                                           .where(r.c.id == rollout_id)).one()
                promote = (event[0], "promote", f"{name}@{alias}",
                           {"alias": alias, "version": move_alias_to, "rollout": rollout_id})
                self._move_alias(conn, name, alias, move_alias_to, promote, package_hash)
            return True
        return self._tx(go)  # type: ignore[no-any-return]

    # -- buckets ----------------------------------------------------------------------
    def add_buckets(self, rows: Sequence[BucketRow]) -> None:
        if not rows:
            return
        merged: dict[tuple[str, int, int, str], BucketRow] = {}
        for row in rows:
            merged[row.key] = merged[row.key].merge(row) if row.key in merged else row
        b = s.rollout_buckets

        def go() -> None:
            with self._write() as conn:
                if self.dialect == "postgresql":  # SQLite's BEGIN IMMEDIATE already serialises
                    # per (rollout, server): a row's key holds its server, so only flushes
                    # of one server can meet on a row; one lock per rollout queued every
                    # replica's flush behind the others' (bench/bench_scale.py, serving)
                    for rid, server in sorted({(k[0], k[3]) for k in merged}):
                        conn.execute(sa.text("SELECT pg_advisory_xact_lock(hashtext(:k))"),
                                     {"k": f"reprise-buckets:{rid}:{server}"})
                out = []
                for key, row in merged.items():
                    rid, version, bucket, server = key
                    old = conn.execute(sa.select(b).where(
                        b.c.rollout_id == rid, b.c.version == version, b.c.bucket == bucket,
                        b.c.server == server)).mappings().first()
                    out.append(_bucket_row(row if old is None else _bucket(old).merge(row)))
                self._upsert(conn, b, out, ["rollout_id", "version", "bucket", "server"])
        self._retry(go)

    def window_buckets(self, rollout_id: str, first_bucket: int, last_bucket: int,
                       versions: Sequence[int] | None = None) -> list[BucketRow]:
        b = s.rollout_buckets
        q = sa.select(b).where(b.c.rollout_id == rollout_id, b.c.bucket >= first_bucket,
                               b.c.bucket <= last_bucket)
        if versions is not None:  # the key (rollout_id, version, bucket, server): a range
            q = q.where(b.c.version.in_(sorted(set(versions))))
        q = q.order_by(b.c.bucket, b.c.version, b.c.server)
        with self.engine.connect() as conn:
            return [_bucket(row) for row in conn.execute(q).mappings()]

    # -- leases -----------------------------------------------------------------------
    def acquire_lease(self, key: str, holder: str, ttl_s: float, now: float) -> bool:
        lz = s.leases

        def go() -> bool:
            with self._write() as conn:
                got = conn.execute(self._dialect_insert(lz).on_conflict_do_nothing(
                    index_elements=["key"]).values(key=key, holder=holder,
                                                   expires_at=now + ttl_s))
                if got.rowcount == 1:
                    return True
                # one statement decides: free (expired) or already ours -> ours until now+ttl
                done = conn.execute(lz.update().where(
                    lz.c.key == key, sa.or_(lz.c.holder == holder, lz.c.expires_at <= now))
                    .values(holder=holder, expires_at=now + ttl_s))
                return bool(done.rowcount == 1)
        return self._retry(go)

    def release_lease(self, key: str, holder: str) -> None:
        lz = s.leases

        def go() -> None:
            with self._write() as conn:
                conn.execute(lz.delete().where(lz.c.key == key, lz.c.holder == holder))
        self._retry(go)

    def lease_holder(self, key: str, now: float) -> str | None:
        """Who holds ``key`` at ``now`` (None when free or expired)."""
        lz = s.leases
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(lz.c.holder, lz.c.expires_at)
                               .where(lz.c.key == key)).first()
        return None if row is None or float(row[1]) <= now else str(row[0])


def _row(rec: RolloutRecord) -> dict[str, Any]:
    d = rec.to_dict()
    for k in _JSON_FIELDS:
        d[k] = json.dumps(d[k], sort_keys=True)
    return d


def _record(row: Any) -> RolloutRecord:
    d = dict(row)
    for k in _JSON_FIELDS:
        d[k] = json.loads(d[k])
    for k in ("stable", "candidate", "step", "failures", "decisions"):
        d[k] = int(d[k])
    return RolloutRecord(**d)


def _bucket_row(b: BucketRow) -> dict[str, Any]:
    d = b.to_dict()
    d["latency"] = json.dumps(d["latency"])
    d["outputs"] = json.dumps(d["outputs"], sort_keys=True)
    return d


def _bucket(row: Any) -> BucketRow:
    return BucketRow(rollout_id=row["rollout_id"], version=int(row["version"]),
                     bucket=int(row["bucket"]), server=row["server"],
                     requests=int(row["requests"]), errors=int(row["errors"]),
                     latency=[int(n) for n in json.loads(row["latency"])],
                     outputs={str(k): int(v) for k, v in json.loads(row["outputs"]).items()},
                     shadow_compared=int(row["shadow_compared"]),
                     shadow_agreed=int(row["shadow_agreed"]),
                     shadow_dropped=int(row["shadow_dropped"]))
