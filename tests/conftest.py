"""Shared fixtures: workspaces on each metadata backend, the real PostgreSQL server."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

PG_ADMIN_URL = os.environ.get("REPRISE_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")


def _pg_required() -> bool:
    return bool(os.environ.get("CI") or os.environ.get("REPRISE_REQUIRE_PG"))


@pytest.fixture(autouse=True)
def _isolate_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never see the developer's workspace or store settings."""
    for var in ("REPRISE_WORKSPACE", "REPRISE_STORE_URL", "REPRISE_ARTIFACTS_URL"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture(scope="session")
def pg_server() -> str:
    """The admin URL of the PostgreSQL server; fails in CI, skips elsewhere, when absent."""
    try:
        import psycopg

        with psycopg.connect(PG_ADMIN_URL, connect_timeout=5):
            pass
    except Exception as exc:  # noqa: BLE001 - any failure means no server
        msg = f"PostgreSQL at {PG_ADMIN_URL} is not reachable: {exc}"
        if _pg_required():
            pytest.fail(msg)
        pytest.skip(msg)
    return PG_ADMIN_URL


@pytest.fixture
def pg_url(pg_server: str) -> Iterator[str]:
    """A fresh PostgreSQL database for one test, dropped afterwards."""
    import psycopg

    name = f"reprise_t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base = pg_server.rsplit("/", 1)[0]
    yield f"{base}/{name}"
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A metadata-store URL for each backend (the conformance-suite parameter)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'meta.db'}"
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """A fresh workspace (embedded SQLite) with the current directory inside it."""
    import reprise

    root = tmp_path / "ws"
    root.mkdir()
    monkeypatch.chdir(root)
    ws = reprise.init(root)
    yield ws
    ws.close()


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[object]:
    """A real two-node Ray cluster on loopback (tests/_ray_cluster.py), one per test
    process, started when a test first asks for it and stopped at the session's end."""
    pytest.importorskip("ray")
    from tests._ray_cluster import ray_cluster as start

    with start() as cluster:
        yield cluster
