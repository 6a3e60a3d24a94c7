"""Registry tests' shared fixture: a fresh workspace on each metadata backend."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import reprise


@pytest.fixture
def ws(tmp_path: Path, store_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A workspace on ``store_url`` (SQLite and PostgreSQL), acting as ``tester``."""
    monkeypatch.setenv("REPRISE_STORE_URL", store_url)
    monkeypatch.setenv("REPRISE_ACTOR", "tester")
    monkeypatch.chdir(tmp_path)
    w = reprise.init(tmp_path)
    yield w
    w.close()
