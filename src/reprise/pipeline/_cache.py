"""The step cache index: cache key -> recorded outputs, as one small JSON file per key.

Lookups must not need the database: a fully cached re-run then never imports
SQLAlchemy (0.26 s on a 2-core machine, half the budget of a no-op re-run). The
entries are written atomically; the database still gets the full record through
the run's journal. An entry is only a hit while every output blob it names is in
the artifact store (``reprise gc`` may have removed them) and every distribution
its outputs declared they depend on is installed at the recorded version
(``requires``, see :mod:`._scope`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from reprise.core._atomic import atomic_write_bytes
from reprise.core._hashing import is_hash
from reprise.pipeline._scope import changed_requirements

__all__ = ["CACHE_FORMAT_VERSION", "StepCache"]

#: Part of every cache key; bump it when the meaning of a key or an entry changes.
CACHE_FORMAT_VERSION = 1


class StepCache:
    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def _path(self, key: str) -> Path:
        if not is_hash(key):
            raise ValueError(f"not a cache key: {key!r}")
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str, store: Any) -> dict[str, Any] | None:
        """The entry for ``key`` if present, readable and all its blobs exist."""
        try:
            entry = json.loads(self._path(key).read_bytes())
        except (OSError, ValueError):
            return None
        if entry.get("key") != key or entry.get("version") != CACHE_FORMAT_VERSION:
            return None
        hashes = [o["hash"] for o in entry.get("outputs", ())]
        store.pin(hashes)  # before checking: a gc running now then spares them
        if not all(store.exists(h) for h in hashes):
            return None
        if entry.get("requires") and changed_requirements(entry["requires"]):
            return None  # its outputs depend on a distribution that was since upgraded
        return dict(entry)

    def put(self, key: str, entry: dict[str, Any]) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        doc = {**entry, "key": key, "version": CACHE_FORMAT_VERSION}
        atomic_write_bytes(path, json.dumps(doc, sort_keys=True).encode())

    def delete(self, key: str) -> None:
        try:
            self._path(key).unlink()
        except FileNotFoundError:
            pass
