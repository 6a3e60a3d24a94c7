"""Shared fixtures: workspaces on each metadata backend, the real PostgreSQL server."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

PG_ADMIN_URL = os.environ.get("REPRISE_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")


def _pg_required() -> bool:
    return bool(os.environ.get("CI") or os.environ.get("REPRISE_REQUIRE_PG"))


@pytest.fixture(autouse=True)
def _isolate_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never see the developer's workspace or store settings."""
    for var in ("REPRISE_WORKSPACE", "REPRISE_STORE_URL", "REPRISE_ARTIFACTS_URL",
                "REPRISE_ARTIFACTS_CACHE_DIR", "REPRISE_ARTIFACTS_CACHE_SIZE"):
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

# -- a local S3 server (moto) ------------------------------------------------------------

@pytest.fixture(scope="session")
def s3_server() -> Iterator[Any]:
    """moto's S3 in a child process on 127.0.0.1 (see tests/_s3.py), for the session."""
    pytest.importorskip("s3fs", reason="the s3 extra is not installed")
    pytest.importorskip("moto.server", reason="moto[server] (dev extra) is not installed")
    from tests._s3 import S3Server

    server = S3Server().start()
    yield server
    server.stop()

@dataclass
class S3Bucket:
    """A fresh bucket on the test server; this process's AWS chain points at it."""

    server: Any
    bucket: str
    url: str
    """``s3://<bucket>/ws``: an artifact store URL."""
    env: dict[str, str]
    """Everything a subprocess needs to reach it (fake credentials, endpoint, cache)."""
    cache_dir: Path

@pytest.fixture
def s3_bucket(s3_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> S3Bucket:
    from tests._s3 import isolate_aws_env

    bucket = s3_server.new_bucket()
    cache = tmp_path / "blobcache"
    env = {**s3_server.env(), "REPRISE_ARTIFACTS_CACHE_DIR": str(cache)}
    monkeypatch.delenv("REPRISE_ARTIFACTS_CACHE_SIZE", raising=False)
    isolate_aws_env(monkeypatch.setenv, lambda k: monkeypatch.delenv(k, raising=False), env)
    return S3Bucket(server=s3_server, bucket=bucket, url=f"s3://{bucket}/ws", env=env,
                    cache_dir=cache)
