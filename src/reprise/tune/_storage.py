"""Where studies live: Optuna's own storages, chosen by the workspace's configuration.

* Embedded workspace (SQLite metadata): one ``JournalStorage`` file,
  ``.reprise/studies/optuna.journal``. Optuna's journal is an append-only log
  with a file lock, so several processes on this machine share a study safely.
* PostgreSQL metadata store: Optuna's ``RDBStorage`` on the same database, in a
  schema of its own (``optuna``) — both Optuna and Reprise keep an Alembic
  ``alembic_version`` table, which would collide in one schema — so workers on
  several machines can share a study through the database.

``REPRISE_TUNE_STORAGE`` overrides both with any Optuna storage URL.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from reprise.core._urls import redact_url
from reprise.core.errors import ConfigError, UserError

__all__ = ["STORAGE_ENV", "ask_lock", "open_storage", "storage_url"]

STORAGE_ENV = "REPRISE_TUNE_STORAGE"
_SCHEMA = "optuna"
_LOCK_KEY = 0x7265707269736501  # "reprise" + 1: the advisory lock of the study schema
_cache: dict[str, tuple[Any, tuple[int, int] | None]] = {}


def storage_url(ws: Any) -> str:
    """The storage URL of the workspace's studies (``journal:///path`` for the journal)."""
    override = os.environ.get(STORAGE_ENV)
    if override:
        return override
    url = str(ws.config.store_url)
    if url.startswith(("postgresql", "postgres")):
        return _postgres_url(url)
    return "journal://" + str(ws.config.workspace_dir / "studies" / "optuna.journal")


def _postgres_url(url: str) -> str:
    from reprise.store._sql import normalise_url

    full = normalise_url(url)
    sep = "&" if "?" in full else "?"
    return f"{full}{sep}options=-csearch_path%3D{_SCHEMA}"


def open_storage(url: str) -> Any:
    """The Optuna storage at ``url``, one object per URL in this process (a journal file
    that was removed or replaced since, with its workspace, is opened afresh)."""
    cached = _cache.get(url)
    if cached is not None and cached[1] == _file_identity(url):
        return cached[0]
    if url.startswith("journal://"):
        from optuna.storages import JournalStorage
        from optuna.storages.journal import JournalFileBackend

        path = Path(url.removeprefix("journal://"))
        path.parent.mkdir(parents=True, exist_ok=True)
        storage: Any = JournalStorage(JournalFileBackend(str(path)))
    else:
        storage = _rdb(url)
    _cache[url] = (storage, _file_identity(url))
    return storage


@contextlib.contextmanager
def ask_lock(url: str, study: str) -> Iterator[None]:
    """Held while a tuner counts the study's trials and asks the next one, so that tuners
    sharing the study (processes here, machines through PostgreSQL) never ask more than
    ``n_trials`` between them: a file lock beside the journal, a transaction-scoped
    PostgreSQL advisory lock keyed by the study's name; none for other storages."""
    if url.startswith("journal://"):
        import fcntl

        path = Path(url.removeprefix("journal://")).with_suffix(".asklock")
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "ab") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)
        return
    if "search_path" not in url:
        yield
        return
    import sqlalchemy as sa

    engine = _lock_engines.get(url)
    if engine is None:
        base = url.split("?options=")[0].split("&options=")[0]
        engine = _lock_engines[url] = sa.create_engine(base, pool_size=1, pool_pre_ping=True)
    key = int.from_bytes(hashlib.blake2b(study.encode(), digest_size=8).digest(), "big",
                         signed=True)
    with engine.begin() as conn:
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": key})
        yield


_lock_engines: dict[str, Any] = {}


def _file_identity(url: str) -> tuple[int, int] | None:
    if not url.startswith("journal://"):
        return None
    try:
        st = os.stat(url.removeprefix("journal://"))
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _rdb(url: str) -> Any:
    import sqlalchemy as sa

    if "search_path" not in url:
        return _open_rdb(url)
    # Tuners on several machines may open a new study database at the same moment: Optuna
    # creates its tables (CREATE TYPE, CREATE TABLE) unguarded, and the second creator
    # fails on a duplicate type. A PostgreSQL advisory lock makes the creation one at a
    # time (the second finds the tables made); it is released with its connection.
    base = url.split("?options=")[0].split("&options=")[0]
    try:
        engine = sa.create_engine(base, poolclass=sa.pool.NullPool)
        with engine.connect() as lock:
            lock.execute(sa.text("SELECT pg_advisory_lock(:key)"), {"key": _LOCK_KEY})
            lock.commit()
            with engine.begin() as conn:
                conn.execute(sa.text(f'CREATE SCHEMA IF NOT EXISTS "{_SCHEMA}"'))
            storage = _open_rdb(url)
            lock.execute(sa.text("SELECT pg_advisory_unlock(:key)"), {"key": _LOCK_KEY})
            lock.commit()
        engine.dispose()
    except (sa.exc.SQLAlchemyError, ValueError) as exc:  # ValueError: a port not a number
        raise ConfigError(f"cannot prepare the study schema in {redact_url(base)!r}: "
                          f"{exc}") from None
    return storage


def _open_rdb(url: str) -> Any:
    from optuna.storages import RDBStorage

    try:
        return RDBStorage(url, engine_kwargs={"pool_pre_ping": True})
    except Exception as exc:  # noqa: BLE001 - Optuna wraps driver errors in many types
        raise UserError(f"cannot open the study storage {redact_url(url)!r}: {exc}") from None
