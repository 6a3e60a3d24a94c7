"""The model registry's tables on SQLAlchemy (a mixin of :class:`SqlMetadataStore`).

Every change is one transaction that also appends its audit event. Appends are
serialised: SQLite's ``BEGIN IMMEDIATE`` already takes the write lock; on
PostgreSQL a transaction-scoped advisory lock orders them, so two registrations
can never both chain onto the same previous event.

The rules that guard a change are checked inside the transaction that makes it, on
the version row read ``FOR UPDATE`` (PostgreSQL), so no other process can slip in
between check and change: a promotion finds its version still there, still ready and
still the package whose gates were checked; archiving or deleting finds no alias on
the version; and a foreign key from aliases to versions backs the rule. Version
numbers come from ``models.last_version``, which deletes never lower: a number,
once given, names one package forever.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from reprise.core._types import GENESIS_HASH, AuditEvent, ModelVersionRecord, audit_hash
from reprise.core.errors import NotFoundError, UserError
from reprise.store import _schema as s
from reprise.store._rows import loads as _loads
from reprise.store._rows import version_record as _version

__all__ = ["Event", "SqlRegistryMixin"]

T = TypeVar("T")
Event = tuple[str, str, str, dict[str, Any]]
_AUDIT_LOCK = 727373  # advisory lock id of the audit chain (the migration lock is 727372)


class SqlRegistryMixin:
    """Registry methods; the host class provides ``_write``, ``_retry``, ``engine``,
    ``dialect`` and ``_upsert``."""

    engine: Any
    dialect: str
    _write: Callable[[], Any]
    _retry: Callable[[Callable[[], T]], T]
    _upsert: Callable[..., None]

    def _tx(self, fn: Callable[[Connection], T]) -> T:
        def go() -> T:
            with self._write() as conn:
                if self.dialect == "postgresql":
                    conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _AUDIT_LOCK})
                return fn(conn)
        return self._retry(go)

    # -- audit ------------------------------------------------------------------------
    def _append(self, conn: Connection, event: Event, **extra: Any) -> AuditEvent:
        actor, action, subject, payload = event
        payload = {**payload, **extra}
        a = s.audit_events
        last = conn.execute(sa.select(a.c.seq, a.c.hash).order_by(a.c.seq.desc()).limit(1)
                            ).first()
        seq = 1 if last is None else int(last[0]) + 1
        prev = GENESIS_HASH if last is None else str(last[1])
        now = time.time()
        h = audit_hash(seq, now, actor, action, subject, payload, prev)
        conn.execute(a.insert().values(seq=seq, time=now, actor=actor, action=action,
                                       subject=subject, payload=json.dumps(payload,
                                                                           sort_keys=True),
                                       prev_hash=prev, hash=h))
        return AuditEvent(seq, now, actor, action, subject, payload, prev, h)

    def append_audit(self, actor: str, action: str, subject: str,
                     payload: dict[str, Any]) -> AuditEvent:
        return self._tx(lambda conn: self._append(conn, (actor, action, subject, payload)))

    def list_audit_events(self) -> list[AuditEvent]:
        a = s.audit_events
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(a).order_by(a.c.seq)).mappings().all()
        return [AuditEvent(int(r["seq"]), float(r["time"]), r["actor"], r["action"],
                           r["subject"], _loads(r["payload"]), r["prev_hash"], r["hash"])
                for r in rows]

    def rollout_events(self, rollout_id: str, subject: str) -> list[AuditEvent]:
        return self.subject_events(subject, "rollout.", payload_in=("rollout", [rollout_id]))

    def subject_events(self, subject: str, action_prefix: str, *, since: float | None = None,
                       payload_in: tuple[str, Sequence[str]] | None = None
                       ) -> list[AuditEvent]:
        a = s.audit_events
        conds = [a.c.subject == subject,
                 a.c.action.like(_like_escape(action_prefix) + "%", escape="\\")]
        if since is not None:
            conds.append(a.c.time >= since)
        if payload_in is not None:
            key, values = payload_in[0], list(dict.fromkeys(payload_in[1]))
            if not values:
                return []
            # payloads are stored by json.dumps(sort_keys=True): a value appears as below;
            # the LIKE narrows in the database, the payload check below makes it exact
            conds.append(sa.or_(*(a.c.payload.like(
                "%" + _like_escape(json.dumps({key: v})[1:-1]) + "%", escape="\\")
                for v in values)))
        q = sa.select(a).where(*conds).order_by(a.c.seq)
        with self.engine.connect() as conn:
            rows = conn.execute(q).mappings().all()
        events = [AuditEvent(int(r["seq"]), float(r["time"]), r["actor"], r["action"],
                             r["subject"], _loads(r["payload"]), r["prev_hash"], r["hash"])
                  for r in rows]
        return [e for e in events if e.action.startswith(action_prefix) and (
            payload_in is None or e.payload.get(payload_in[0]) in payload_in[1])]

    # -- versions ---------------------------------------------------------------------
    def add_model_version(self, record: ModelVersionRecord,
                          event: Event) -> tuple[ModelVersionRecord, bool]:
        mv = s.model_versions

        def go(conn: Connection) -> tuple[ModelVersionRecord, bool]:
            same = conn.execute(sa.select(mv).where(
                mv.c.name == record.name, mv.c.package_hash == record.package_hash)
                .order_by(mv.c.version).limit(1)).mappings().first()
            if same is not None:
                return _version(same), False
            version = _next_version(conn, record.name)
            row = {"name": record.name, "version": version, "run_id": record.run_id,
                   "package_hash": record.package_hash,
                   "signature": json.dumps(record.signature) if record.signature else None,
                   "metrics": json.dumps(record.metrics, sort_keys=True),
                   "status": record.status, "meta": json.dumps(record.meta, sort_keys=True),
                   "created_at": record.created_at or time.time()}
            conn.execute(mv.insert().values(**row))
            self._append(conn, event, version=version)
            return _version(row), True
        return self._tx(go)

    def get_model_version(self, name: str, version: int) -> ModelVersionRecord | None:
        mv = s.model_versions
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(mv).where(mv.c.name == name, mv.c.version == version)
                               ).mappings().first()
        return None if row is None else _version(row)

    def list_model_versions(self, name: str | None = None) -> list[ModelVersionRecord]:
        mv = s.model_versions
        q = sa.select(mv).order_by(mv.c.name, mv.c.version)
        if name is not None:
            q = q.where(mv.c.name == name)
        with self.engine.connect() as conn:
            return [_version(r) for r in conn.execute(q).mappings()]

    def set_model_version_status(self, name: str, version: int, status: str,
                                 event: Event) -> None:
        mv = s.model_versions

        def go(conn: Connection) -> None:
            current = _locked_version(conn, name, version)
            if current["status"] == status:
                return
            if status != "ready":
                _refuse_if_held(conn, name, version, "archived")
            conn.execute(mv.update().where(mv.c.name == name, mv.c.version == version)
                         .values(status=status))
            self._append(conn, event)
        self._tx(go)

    def delete_model_version(self, name: str, version: int, event: Event) -> None:
        mv, h = s.model_versions, s.alias_history

        def go(conn: Connection) -> None:
            _locked_version(conn, name, version)
            _refuse_if_held(conn, name, version, "deleted")
            conn.execute(h.delete().where(h.c.name == name, h.c.version == version))
            conn.execute(mv.delete().where(mv.c.name == name, mv.c.version == version))
            self._append(conn, event)
        self._tx(go)

    # -- aliases ----------------------------------------------------------------------
    def get_aliases(self, name: str) -> dict[str, int]:
        al = s.aliases
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(al.c.alias, al.c.version).where(al.c.name == name)
                                .order_by(al.c.alias)).all()
        return {str(a): int(v) for a, v in rows}

    def set_alias(self, name: str, alias: str, version: int, event: Event, *,
                  package_hash: str | None = None) -> int | None:
        return self._tx(lambda conn: self._move_alias(conn, name, alias, version, event,
                                                      package_hash))

    def _move_alias(self, conn: Connection, name: str, alias: str, version: int,
                    event: Event, package_hash: str | None) -> int | None:
        """:meth:`set_alias` inside the caller's transaction (a rollout's promotion moves
        the alias in the transaction that records its decision)."""
        al = s.aliases
        row = _locked_version(conn, name, version)
        _check_promotable(row, alias, package_hash)
        before = conn.execute(sa.select(al.c.version).where(
            al.c.name == name, al.c.alias == alias)).scalar()
        if before is not None and int(before) == version:
            return version  # already there: no history entry, nothing to audit
        now = time.time()
        self._upsert(conn, al, [{"name": name, "alias": alias, "version": version,
                                 "updated_at": now}], ["name", "alias"])
        conn.execute(s.alias_history.insert().values(name=name, alias=alias,
                                                     version=version, time=now))
        previous = None if before is None else int(before)
        self._append(conn, event, previous=previous)
        return previous

    def rollback_alias(self, name: str, alias: str, event: Event) -> tuple[int, int] | None:
        al, h = s.aliases, s.alias_history

        def go(conn: Connection) -> tuple[int, int] | None:
            rows = conn.execute(sa.select(h.c.seq, h.c.version).where(
                h.c.name == name, h.c.alias == alias).order_by(h.c.seq.desc()).limit(2)).all()
            if len(rows) < 2:
                return None
            (top_seq, current), (_, target) = rows
            _check_promotable(_locked_version(conn, name, int(target)), alias, None)
            conn.execute(h.delete().where(h.c.seq == top_seq))
            conn.execute(al.update().where(al.c.name == name, al.c.alias == alias)
                         .values(version=int(target), updated_at=time.time()))
            self._append(conn, event, **{"from": int(current), "to": int(target)})
            return int(current), int(target)
        return self._tx(go)

    def alias_history(self, name: str, alias: str) -> list[int]:
        h = s.alias_history
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(h.c.version).where(h.c.name == name,
                                                             h.c.alias == alias)
                                .order_by(h.c.seq)).all()
        return [int(r[0]) for r in rows]


def _next_version(conn: Connection, name: str) -> int:
    """The next version number of ``name`` (creating the model), never one given before."""
    m, mv = s.models, s.model_versions
    last = conn.execute(sa.select(m.c.last_version).where(m.c.name == name)
                        .with_for_update()).first()
    if last is None:
        conn.execute(m.insert().values(name=name, created_at=time.time(), last_version=0))
    top = conn.execute(sa.select(sa.func.max(mv.c.version)).where(mv.c.name == name)).scalar()
    version = max(0 if last is None else int(last[0]), int(top or 0)) + 1
    conn.execute(m.update().where(m.c.name == name).values(last_version=version))
    return version


def _locked_version(conn: Connection, name: str, version: int) -> Any:
    """The row of ``name:version``, locked until the transaction ends; NotFoundError."""
    mv = s.model_versions
    row = conn.execute(sa.select(mv).where(mv.c.name == name, mv.c.version == version)
                       .with_for_update()).mappings().first()
    if row is None:
        raise NotFoundError(f"model {name!r} has no version {version} (it may have just been "
                            f"deleted); see `reprise models show {name}`")
    return row


def _check_promotable(row: Any, alias: str, package_hash: str | None) -> None:
    ref = f"{row['name']}:{row['version']}"
    if row["status"] != "ready":
        raise UserError(f"{ref} is {row['status']}; only ready versions can be promoted or "
                        f"rolled back to ({alias!r} was not moved)")
    if package_hash is not None and row["package_hash"] != package_hash:
        raise UserError(f"{ref} now holds another package than the one checked for {alias!r}; "
                        "look at it again and promote it anew")


def _refuse_if_held(conn: Connection, name: str, version: int, what: str) -> None:
    al = s.aliases
    held = sorted(str(a) for a, in conn.execute(sa.select(al.c.alias).where(
        al.c.name == name, al.c.version == version)))
    if held:
        raise UserError(f"{name}:{version} is held by alias(es) {held}; it cannot be {what}. "
                        f"Move the alias first: `reprise models promote {name} VERSION "
                        f"--alias {held[0]}` or `reprise models rollback {name} "
                        f"--alias {held[0]}`")


def _like_escape(text: str) -> str:
    """``text`` as a literal in a LIKE pattern with ``\\`` as the escape character."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
