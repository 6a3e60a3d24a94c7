"""Folder datasets (``format="files"``): images, audio, shards; one blob per file.

A folder version is a manifest of per-file blobs (see :mod:`reprise.store._tree`);
its content hash, and so the cache key of every step that reads it, is the
manifest's hash. Versions added before manifests existed are one tar (the ``dir``
materializer) and stay readable.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from reprise.core._types import ArtifactRecord, DatasetRecord
from reprise.core.errors import UserError
from reprise.store._statcache import StatCache
from reprise.store._tree import (
    FolderScan,
    diff_manifests,
    materialize_tree,
    read_manifest,
    save_tree,
    scan_folder,
)

__all__ = ["checkout_folder", "diff_folders", "folder_path", "profile_scan", "store_folder"]

# reprise.data._profile.FORMAT_VERSION, which imports pyarrow (0.5 s of a re-add's start-up);
# a test keeps the two equal
FORMAT_VERSION = 1


def stat_cache(ws: Any) -> StatCache:
    return StatCache(Path(ws.config.workspace_dir) / "cache" / "stat.sqlite")


def store_folder(ws: Any, path: Path, origin: str, *, link: bool = False
                 ) -> tuple[ArtifactRecord, dict[str, Any]]:
    """Store the folder ``path`` as a manifest; return its artifact record and profile.
    Every check (unreadable entries, bad links, an empty folder) passes before a byte
    is stored."""
    from reprise.data._formats import DataFormatError

    scan = scan_folder(path)
    if not scan.files:
        raise DataFormatError(f"{origin} holds no files; there is nothing to register.")
    h, size = save_tree(ws.artifacts, scan, cache=stat_cache(ws), link=link)
    record = ArtifactRecord(hash=h, size=size, kind="dir", materializer="tree",
                            meta={"files": len(scan.files), "bytes": scan.bytes},
                            created=time.time())
    ws.metadata.put_artifact(record)
    return record, profile_scan(scan)


def profile_scan(scan: FolderScan) -> dict[str, Any]:
    """The profile of a folder of opaque files, from its walk (the same fields as
    :func:`reprise.data._profile.profile_files`, without walking it again)."""
    sizes = [f.stamp[0] for f in scan.files]
    exts: dict[str, int] = {}
    for f in scan.files:
        ext = os.path.splitext(f.rel.rpartition("/")[2])[1].lower()
        exts[ext] = exts.get(ext, 0) + 1
    n, total = len(sizes), sum(sizes)
    size_stats = {"min": min(sizes), "max": max(sizes), "mean": total / n} if n else None
    return {"format_version": FORMAT_VERSION, "files": n, "bytes": total, "size": size_stats,
            "extensions": dict(sorted(exts.items()))}


def _is_tree(ws: Any, rec: DatasetRecord) -> bool:
    art = ws.metadata.get_artifact(rec.artifact_hash)
    return art is not None and art.materializer == "tree"


def folder_path(ws: Any, rec: DatasetRecord) -> Path:
    """A local copy of a folder version under the workspace cache, written once."""
    cache = Path(ws.config.workspace_dir) / "cache" / "datasets" / rec.artifact_hash
    if not cache.exists():
        tmp = cache.with_name(cache.name + f".tmp{os.getpid()}")
        _write(ws, rec, tmp)
        try:
            os.replace(tmp, cache)
        except OSError:  # another process finished first: theirs is the same folder
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
    return cache


def checkout_folder(ws: Any, rec: DatasetRecord, dest: Path) -> Path:
    """Write version ``rec`` to ``dest``: a folder for folder datasets (``dest`` must
    not exist or be empty), a file inside ``dest`` or at ``dest`` for the others."""
    if rec.format == "files":
        if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
            raise UserError(f"{dest} already exists and is not an empty folder; choose a new "
                            "destination or empty it first.")
        _write(ws, rec, dest)
        return dest
    name = Path(str(rec.meta.get("stored_name") or f"{rec.name}.{rec.format}")).name
    target = dest / name if dest.is_dir() else dest
    if target.exists():
        raise UserError(f"{target} already exists; choose a new destination.")
    target.parent.mkdir(parents=True, exist_ok=True)
    ws.artifacts.copy_to(rec.artifact_hash, target, verify=True)  # the user's checkout: durable
    return target


def _write(ws: Any, rec: DatasetRecord, dest: Path) -> None:
    if _is_tree(ws, rec):
        materialize_tree(ws.artifacts, rec.artifact_hash, dest)
    else:  # a version stored as one tar, before folders became manifests
        from reprise.store._materializers import load_object

        load_object(ws.artifacts, rec.artifact_hash, "dir", {}, dest=dest)


def diff_folders(ws: Any, a: DatasetRecord, b: DatasetRecord) -> dict[str, Any]:
    """Files added, removed and changed between two folder versions (empty when either
    is an old tar version, whose file list is not at hand)."""
    if not (_is_tree(ws, a) and _is_tree(ws, b)):
        return {}
    return diff_manifests(read_manifest(ws.artifacts, a.artifact_hash),
                          read_manifest(ws.artifacts, b.artifact_hash))

