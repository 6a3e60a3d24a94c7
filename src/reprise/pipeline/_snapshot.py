"""Code snapshots: the pipeline's own source files, stored as one artifact per run.

The snapshot holds the files of the user's modules that the steps' code
fingerprints reached, plus the pipeline's module, at their paths relative to the
workspace root (files outside it go under ``_external/``). It is stored with the
``dir`` materializer, so ``reprise runs checkout RUN DIR`` is a plain extraction.
A small index (content of the file list -> artifact) spares re-packing unchanged
code on every run.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from reprise.core._atomic import atomic_write_bytes
from reprise.core._hashing import hash_file, hash_value

__all__ = ["snapshot_files", "snapshot_path"]


def snapshot_path(path: Path, root: Path) -> str:
    """Where ``path`` goes inside a snapshot taken at ``root``."""
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return "_external/" + path.resolve().as_posix().lstrip("/")


def snapshot_files(files: Sequence[str], root: Path, store: Any) -> dict[str, Any]:
    """Store ``files`` as one ``dir`` artifact; returns its artifact record."""
    from reprise.store._materializers import save_object

    entries = sorted((snapshot_path(Path(f), root), hash_file(f)) for f in files)
    list_hash = hash_value({"snapshot": entries})
    index = root / ".reprise" / "cache" / "snapshots" / f"{list_hash}.json"
    try:
        art = json.loads(index.read_bytes())
        if store.exists(art["hash"]):
            return dict(art)
    except (OSError, ValueError, KeyError):
        pass
    tmp = Path(tempfile.mkdtemp(prefix="reprise-snapshot-"))
    try:
        by_rel = {snapshot_path(Path(f), root): f for f in files}
        for rel, src in by_rel.items():
            dest = tmp / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dest)
        saved = save_object(store, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    art = saved.to_dict()
    art["meta"] = {**art.get("meta", {}), "files": [e[0] for e in entries]}
    index.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(index, json.dumps(art, sort_keys=True).encode())
    return art
