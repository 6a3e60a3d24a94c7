from __future__ import annotations

from pathlib import Path

import pytest

from reprise.core import create_workspace, find_workspace, load_config
from reprise.core.errors import ConfigError, WorkspaceExistsError, WorkspaceNotFoundError


def test_workspace_is_found_from_subdirectories(tmp_path: Path) -> None:
    create_workspace(tmp_path)
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    assert find_workspace(deep) == tmp_path.resolve()


def test_missing_workspace_says_how_to_create_one(tmp_path: Path) -> None:
    with pytest.raises(WorkspaceNotFoundError, match="reprise init"):
        find_workspace(tmp_path)


def test_init_twice_is_an_error(tmp_path: Path) -> None:
    create_workspace(tmp_path)
    with pytest.raises(WorkspaceExistsError):
        create_workspace(tmp_path)


def test_defaults_and_environment_overrides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    create_workspace(tmp_path)
    cfg = load_config(tmp_path)
    assert cfg.store_url == f"sqlite:///{tmp_path.resolve()}/.reprise/reprise.db"
    assert cfg.artifacts_url == f"{tmp_path.resolve()}/.reprise/artifacts"
    monkeypatch.setenv("REPRISE_STORE_URL", "postgresql://u@h/db")
    monkeypatch.setenv("REPRISE_ARTIFACTS_URL", "memory://bucket")
    cfg = load_config(tmp_path)
    assert (cfg.store_url, cfg.artifacts_url) == ("postgresql://u@h/db", "memory://bucket")


def test_config_file_values(tmp_path: Path) -> None:
    create_workspace(tmp_path)
    (tmp_path / ".reprise" / "config.toml").write_text(
        '[store]\nurl = "sqlite:///x.db"\n[tracking]\nflush_interval = 0.5\n')
    cfg = load_config(tmp_path)
    assert cfg.store_url == "sqlite:///x.db"
    assert cfg.flush_interval == 0.5


@pytest.mark.parametrize("text", ["[store\n", "store = 3\n", "[tracking]\nflush_interval = -1\n",
                                  '[tracking]\nflush_interval = "fast"\n'])
def test_bad_config_is_a_clear_error(tmp_path: Path, text: str) -> None:
    create_workspace(tmp_path)
    (tmp_path / ".reprise" / "config.toml").write_text(text)
    with pytest.raises(ConfigError, match="config.toml"):
        load_config(tmp_path)


def test_reprise_workspace_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    create_workspace(tmp_path)
    monkeypatch.setenv("REPRISE_WORKSPACE", str(tmp_path))
    monkeypatch.chdir("/")
    assert find_workspace() == tmp_path.resolve()
    monkeypatch.setenv("REPRISE_WORKSPACE", str(tmp_path / "nope"))
    with pytest.raises(WorkspaceNotFoundError):
        find_workspace()
