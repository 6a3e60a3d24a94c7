"""Code snapshots: the pipeline's own source files, stored as one artifact per run.

The snapshot holds the files of the user's modules that the steps' code
fingerprints reached (with the ``__init__`` files of their packages), plus the
pipeline's module, at their paths relative to the workspace root (files outside it,
such as a library installed with ``pip install -e``, go under ``_external/``). When
the modules were imported from other folders than the workspace root (a ``src/``
layout, an editable library), ``_reprise_paths.json`` lists those folders, as
snapshot paths in ``sys.path`` order: ``reprise verify`` puts them first on
``sys.path``, so the replay imports the snapshot's code, not what is installed now.
It is stored with the ``dir`` materializer, so ``reprise runs checkout RUN DIR`` is
a plain extraction. A small index (content of the file list -> artifact) spares
re-packing unchanged code on every run.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from reprise.core._atomic import atomic_write_bytes
from reprise.core._hashing import hash_bytes, hash_file, hash_value

__all__ = ["PATHS_FILE", "snapshot_files", "snapshot_path", "snapshot_sys_path"]

#: The snapshot's list of import folders (absent when that is only its root).
PATHS_FILE = "_reprise_paths.json"


def snapshot_path(path: Path, root: Path) -> str:
    """Where ``path`` goes inside a snapshot taken at ``root``."""
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return "_external/" + path.resolve().as_posix().lstrip("/")


def _folder_path(folder: Path, root: Path) -> str:
    rel = snapshot_path(folder, root)
    return "" if rel == "." else rel


def snapshot_sys_path(code: Path) -> list[Path]:
    """The folders of an extracted snapshot ``code`` to put first on ``sys.path``."""
    try:
        doc = json.loads((code / PATHS_FILE).read_bytes())
        folders = [str(f) for f in doc["sys_path"]]
    except (OSError, ValueError, KeyError, TypeError):
        return [code]
    out = []
    for folder in folders:
        path = (code / folder).resolve()
        if path == code.resolve() or code.resolve() in path.parents:  # never outside it
            out.append(path)
    return out or [code]


def snapshot_files(files: Sequence[str], root: Path, store: Any,
                   import_paths: Sequence[str] = ()) -> dict[str, Any]:
    """Store ``files`` as one ``dir`` artifact; returns its artifact record.
    ``import_paths``: the folders they were imported from, in ``sys.path`` order."""
    from reprise.store._materializers import save_object

    entries = sorted((snapshot_path(Path(f), root), hash_file(f)) for f in files)
    folders = list(dict.fromkeys(_folder_path(Path(p), root) for p in import_paths))
    manifest = None
    if folders and folders != [""]:
        manifest = json.dumps({"sys_path": folders}, indent=1).encode()
        entries.append((PATHS_FILE, hash_bytes(manifest)))
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
        if manifest is not None:
            (tmp / PATHS_FILE).write_bytes(manifest)
        saved = save_object(store, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    art = saved.to_dict()
    art["meta"] = {**art.get("meta", {}), "files": [e[0] for e in entries]}
    index.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(index, json.dumps(art, sort_keys=True).encode())
    return art
