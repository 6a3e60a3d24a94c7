"""A driver that holds a Ray token turns token mode on (a cluster started where the token
is refuses a driver without it); an explicit RAY_AUTH_MODE is kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from reprise.core._ray_auth import enable_ray_token_auth_if_available


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for var in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))


def test_no_token_leaves_the_mode_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    assert enable_ray_token_auth_if_available() is False
    assert "RAY_AUTH_MODE" not in os.environ


@pytest.mark.parametrize("where", ["home", "path", "env"])
def test_a_token_turns_token_mode_on(where: str, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    if where == "home":
        (tmp_path / ".ray").mkdir()
        (tmp_path / ".ray" / "auth_token").write_text("abc123\n")
    elif where == "path":
        (tmp_path / "tok").write_text("abc123")
        monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "tok"))
    else:
        monkeypatch.setenv("RAY_AUTH_TOKEN", "abc123")
    assert enable_ray_token_auth_if_available() is True
    assert os.environ["RAY_AUTH_MODE"] == "token"


def test_an_explicit_mode_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("abc123")
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    assert enable_ray_token_auth_if_available() is False
    assert os.environ["RAY_AUTH_MODE"] == "disabled"
