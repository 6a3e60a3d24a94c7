"""Workspace discovery and configuration.

A workspace is a folder holding ``.reprise/`` (found from the current
directory upwards, like git). Its ``config.toml`` may point the metadata store
and the artifact store elsewhere; the environment variables
``REPRISE_STORE_URL`` and ``REPRISE_ARTIFACTS_URL`` override the file, and
``REPRISE_WORKSPACE`` names the workspace folder explicitly.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reprise.core._atomic import atomic_write_bytes
from reprise.core._units import parse_size
from reprise.core.errors import ConfigError, WorkspaceExistsError, WorkspaceNotFoundError

__all__ = [
    "WORKSPACE_DIR",
    "Config",
    "create_workspace",
    "find_workspace",
    "load_config",
]

WORKSPACE_DIR = ".reprise"
CONFIG_FILE = "config.toml"
DB_FILE = "reprise.db"
ARTIFACTS_DIR = "artifacts"
JOURNALS_DIR = "journals"

_CONFIG_TEMPLATE = """\
# Reprise workspace configuration.
# Environment variables override these: REPRISE_STORE_URL, REPRISE_ARTIFACTS_URL.

[store]
# Metadata database. Empty means the embedded SQLite file .reprise/reprise.db.
# Example: url = "postgresql+psycopg://user@host:5432/dbname"
url = ""

[artifacts]
# Content-addressed artifact store. Empty means the local folder .reprise/artifacts.
# Any fsspec URL works, e.g. "s3://bucket/prefix" (needs the matching fsspec backend).
# On S3, credentials and the endpoint come from the standard AWS chain (AWS_PROFILE,
# ~/.aws/, AWS_ENDPOINT_URL_S3 for an S3-compatible server), never from this file.
url = ""
# Local read-through cache of blobs read from a remote store ("" = ~/.cache/reprise/blobs),
# and its size limit ("5GB", "512MiB" or bytes; 0 turns it off).
# cache_dir = ""
# cache_size = "5GB"

[tracking]
# Seconds between system-metric samples (CPU %, memory, GPU); 0 turns sampling off.
system_metrics_interval = 10.0
# Seconds between background ingestions of the metric journal into the database.
flush_interval = 2.0

[pipeline]
# Watch the files and environment variables each step reads beyond its declared inputs:
# they are checked before a cached result is reused (REPRISE_WATCH_READS=0 turns it off).
watch_reads = true
# Paths (absolute, ~/..., or relative to this project) and variable names not to watch.
ignore_reads = []
ignore_env = []

[executor]
# Where `reprise run` executes steps and `reprise tune` its trials: "local" (processes
# on this machine) or "ray".
# The command line's --executor and --ray-address override these.
kind = "local"
# The Ray cluster: "auto" (the one `ray start` began here), "HOST:PORT" (the head),
# "ray://HOST:PORT" (Ray Client); empty starts a Ray instance on this machine per run.
address = ""
"""


@dataclass(frozen=True)
class Config:
    """Resolved configuration of one workspace."""

    root: Path
    """The folder that contains ``.reprise/``."""
    store_url: str
    artifacts_url: str
    system_metrics_interval: float = 10.0
    flush_interval: float = 2.0
    watch_reads: bool = True
    """Record what steps read beyond their inputs and check it before reuse."""
    ignore_reads: tuple[str, ...] = ()
    ignore_env: tuple[str, ...] = ()
    artifacts_cache_dir: str = ""
    """Read-through cache of remote blobs ("" = the store's default)."""
    artifacts_cache_size: int | None = None
    """Its limit in bytes (None = the store's default, 0 = no cache)."""
    executor: str = "local"
    """Where steps run: ``local`` or ``ray`` ([executor] kind)."""
    executor_address: str = ""
    """The Ray cluster's address ([executor] address); empty: a local Ray instance."""
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def artifacts_options(self) -> dict[str, Any]:
        """Keyword arguments for ``open_artifact_store`` besides the URL."""
        return {"cache_dir": self.artifacts_cache_dir or None,
                "cache_size": self.artifacts_cache_size}

    @property
    def workspace_dir(self) -> Path:
        return self.root / WORKSPACE_DIR

    @property
    def journals_dir(self) -> Path:
        return self.workspace_dir / JOURNALS_DIR


def find_workspace(start: str | os.PathLike[str] | None = None) -> Path:
    """Return the folder containing ``.reprise/``, searching ``start`` and its parents.

    Raises:
        WorkspaceNotFoundError: no workspace up to the filesystem root.
    """
    explicit = os.environ.get("REPRISE_WORKSPACE")
    if explicit and start is None:
        root = Path(explicit).expanduser().resolve()
        if root.name == WORKSPACE_DIR:
            root = root.parent
        if not (root / WORKSPACE_DIR).is_dir():
            raise WorkspaceNotFoundError(
                f"REPRISE_WORKSPACE={explicit} has no {WORKSPACE_DIR}/ folder; "
                f"run `reprise init {explicit}` or unset the variable."
            )
        return root
    here = Path(start if start is not None else os.getcwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / WORKSPACE_DIR).is_dir():
            return candidate
    raise WorkspaceNotFoundError(
        f"No Reprise workspace in {here} or any parent; run `reprise init` to create one here."
    )


def create_workspace(root: str | os.PathLike[str] | None = None) -> Path:
    """Create ``.reprise/`` with its config file and folders; return the root.

    Raises:
        WorkspaceExistsError: the folder already holds a workspace.
    """
    base = Path(root if root is not None else os.getcwd()).resolve()
    ws = base / WORKSPACE_DIR
    if (ws / CONFIG_FILE).exists():
        raise WorkspaceExistsError(
            f"{ws} already exists; use it as it is, or remove it first to start over."
        )
    (ws / JOURNALS_DIR / "done").mkdir(parents=True, exist_ok=True)
    (ws / ARTIFACTS_DIR).mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(ws / CONFIG_FILE, _CONFIG_TEMPLATE.encode())
    return base


def load_config(root: str | os.PathLike[str] | None = None) -> Config:
    """Load the configuration of the workspace at ``root`` (found upwards when None)."""
    base = Path(root).resolve() if root is not None else find_workspace()
    path = base / WORKSPACE_DIR / CONFIG_FILE
    raw: dict[str, Any] = {}
    if path.exists():
        try:
            raw = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path} is not valid TOML ({exc}); fix or recreate it.") from exc
    store = _section(raw, "store", path)
    arts = _section(raw, "artifacts", path)
    tracking = _section(raw, "tracking", path)
    pipeline = _section(raw, "pipeline", path)
    executor = _section(raw, "executor", path)
    store_url = os.environ.get("REPRISE_STORE_URL") or str(store.get("url") or "")
    artifacts_url = os.environ.get("REPRISE_ARTIFACTS_URL") or str(arts.get("url") or "")
    if not store_url:
        store_url = f"sqlite:///{base / WORKSPACE_DIR / DB_FILE}"
    if not artifacts_url:
        artifacts_url = str(base / WORKSPACE_DIR / ARTIFACTS_DIR)
    return Config(
        root=base,
        store_url=store_url,
        artifacts_url=artifacts_url,
        system_metrics_interval=_number(tracking, "system_metrics_interval", 10.0, path),
        flush_interval=_number(tracking, "flush_interval", 2.0, path),
        watch_reads=_watch_reads(pipeline, path),
        ignore_reads=_strings(pipeline, "ignore_reads", path),
        ignore_env=_strings(pipeline, "ignore_env", path),
        artifacts_cache_dir=_cache_dir(arts, base, path),
        artifacts_cache_size=_cache_size(arts, path),
        executor=_executor_kind(executor, path),
        executor_address=_text(executor, "address", path),
        raw=raw,
    )


def _section(raw: dict[str, Any], name: str, path: Path) -> dict[str, Any]:
    value = raw.get(name, {})
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: [{name}] must be a table, got {type(value).__name__}.")
    return value


def _number(section: dict[str, Any], key: str, default: float, path: Path) -> float:
    value = section.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ConfigError(f"{path}: {key} must be a number >= 0, got {value!r}.")
    return float(value)


_SWITCH = {"1": True, "true": True, "on": True, "yes": True,
           "0": False, "false": False, "off": False, "no": False}


def _watch_reads(section: dict[str, Any], path: Path) -> bool:
    env = os.environ.get("REPRISE_WATCH_READS")
    if env is not None and env.strip() != "":
        if env.strip().lower() not in _SWITCH:
            raise ConfigError(f"REPRISE_WATCH_READS must be 1 or 0 (on/off), got {env!r}.")
        return _SWITCH[env.strip().lower()]
    value = section.get("watch_reads", True)
    if not isinstance(value, bool):
        raise ConfigError(f"{path}: [pipeline] watch_reads must be true or false, "
                          f"got {value!r}.")
    return value


def _strings(section: dict[str, Any], key: str, path: Path) -> tuple[str, ...]:
    value = section.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"{path}: [pipeline] {key} must be a list of non-empty strings, "
                          f"got {value!r}.")
    return tuple(value)


def _cache_dir(section: dict[str, Any], base: Path, path: Path) -> str:
    value = os.environ.get("REPRISE_ARTIFACTS_CACHE_DIR") or section.get("cache_dir") or ""
    if not isinstance(value, str):
        raise ConfigError(f"{path}: [artifacts] cache_dir must be a folder path, "
                          f"got {value!r}.")
    if not value:
        return ""
    folder = Path(value).expanduser()
    return str(folder if folder.is_absolute() else base / folder)


def _cache_size(section: dict[str, Any], path: Path) -> int | None:
    env = os.environ.get("REPRISE_ARTIFACTS_CACHE_SIZE")
    if env:
        return parse_size(env, "REPRISE_ARTIFACTS_CACHE_SIZE")
    if "cache_size" not in section:
        return None
    return parse_size(section["cache_size"], f"{path}: [artifacts] cache_size")


def _executor_kind(section: dict[str, Any], path: Path) -> str:
    value = section.get("kind", "local")
    if value not in ("local", "ray"):
        raise ConfigError(f'{path}: [executor] kind must be "local" or "ray", got {value!r}.')
    return str(value)


def _text(section: dict[str, Any], key: str, path: Path) -> str:
    value = section.get(key, "")
    if not isinstance(value, str):
        raise ConfigError(f"{path}: [executor] {key} must be a string, got {value!r}.")
    return value.strip()
