"""Materializers for paths: a file (stored as its bytes) and a directory (a deterministic tar).

Loading gives a path to a fresh copy, never the stored blob itself, so a step cannot
change what the store holds.
"""

from __future__ import annotations

import os
import stat
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from reprise.core.errors import MaterializerError
from reprise.store._artifacts import BaseArtifactStore
from reprise.store._materializer import Materializer, _as_path, _dest_folder, _verified_file

# Imported here, not at the top: _ml subclasses Materializer and uses the helpers above.


class FileMaterializer(Materializer):
    """A path to a regular file (symlinks followed).

    Loading copies the file (hash-checked) into ``dest``, or into a fresh
    temporary folder, under its original name, and returns that ``Path``: the
    caller may change or delete the copy without touching the store.
    """

    name, kind = "file", "file"

    def handles(self, obj: Any) -> bool:
        path = _as_path(obj)
        return path is not None and not path.is_dir()

    def handles_type(self, tp: type) -> bool:
        return issubclass(tp, os.PathLike)

    def save(self, obj: Any, store: BaseArtifactStore) -> tuple[str, int, dict[str, Any]]:
        path = _as_path(obj)
        if path is None or not path.is_file():
            raise MaterializerError(
                f"cannot store {obj!r}: it does not exist or is not a regular file. Write the "
                "file first and return its pathlib.Path.")
        h, size = store.put_file(path)
        return h, size, {"name": path.name}

    def load(self, store: BaseArtifactStore, h: str, meta: dict[str, Any],
             dest: Path | None = None) -> Any:
        name = Path(str(meta.get("name") or "")).name or h  # never a path from the database
        # a caller's ``dest`` may be kept (a checkout): durable; without one, a fresh temp
        # folder of this process's load (a step's input), forgotten after a power loss, so
        # no fsync. Never a link: the step gets the path and may write to the file.
        return store.copy_to(h, _dest_folder(dest) / name, verify=True,
                             durable=dest is not None)


class DirMaterializer(Materializer):
    """A path to a directory, as an uncompressed tar whose bytes depend only on the tree.

    Entries are sorted, with mtime 0, owner 0/"" and modes 0o755 (directories,
    executable files) or 0o644, so equal trees have equal hashes whatever their
    timestamps. Symlinks are kept as relative links if they stay inside the
    directory; one pointing outside it, or nowhere, is an error. Loading extracts
    into ``dest`` (or a fresh temporary folder) with tarfile's ``data`` filter
    and returns the folder.
    """

    name, kind = "dir", "dir"

    def handles(self, obj: Any) -> bool:
        path = _as_path(obj)
        return path is not None and path.is_dir()

    def handles_type(self, tp: type) -> bool:
        return issubclass(tp, os.PathLike)

    def save(self, obj: Any, store: BaseArtifactStore) -> tuple[str, int, dict[str, Any]]:
        root = Path(os.fspath(obj))
        members = list(_tar_members(root))  # all checks pass before anything is written
        files, total = 0, 0
        with tempfile.TemporaryDirectory(prefix="reprise-") as tmp:
            tar_path = Path(tmp) / "dir.tar"
            with tarfile.open(tar_path, mode="w", format=tarfile.PAX_FORMAT) as tar:
                for info, full in members:
                    if not info.isreg():
                        tar.addfile(info)
                        continue
                    with open(full, "rb") as f:
                        if os.fstat(f.fileno()).st_size != info.size:
                            raise MaterializerError(
                                f"{full} changed while {root} was being stored; store it again "
                                "once nothing writes to it.")
                        tar.addfile(info, f)
                    files, total = files + 1, total + info.size
            h, size = store.put_file(tar_path)
        return h, size, {"files": files, "bytes": total}

    def load(self, store: BaseArtifactStore, h: str, meta: dict[str, Any],
             dest: Path | None = None) -> Any:
        folder = _dest_folder(dest)
        with _verified_file(store, h) as path, tarfile.open(path, mode="r:") as tar:
            tar.extractall(folder, filter="data")  # refuses absolute paths, '..', devices
        return folder


def _tar_members(root: Path) -> Iterator[tuple[tarfile.TarInfo, Path]]:
    """Normalised tar headers for everything below ``root``, in sorted order."""

    def fail(exc: OSError) -> None:
        raise MaterializerError(f"cannot read {exc.filename} while storing {root}: {exc}")

    real_root = root.resolve()
    entries: list[tuple[str, Path]] = []
    for dirpath, dirnames, filenames in os.walk(root, onerror=fail):  # never follows links
        for name in (*dirnames, *filenames):
            full = Path(dirpath) / name
            entries.append((full.relative_to(root).as_posix(), full))
    for rel, full in sorted(entries):
        yield _tar_info(rel, full, real_root), full


def _tar_info(rel: str, full: Path, real_root: Path) -> tarfile.TarInfo:
    st = full.lstat()
    info = tarfile.TarInfo(rel)
    info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
    if stat.S_ISLNK(st.st_mode):
        try:
            target = full.resolve(strict=True)
        except (OSError, RuntimeError):
            raise MaterializerError(
                f"{full} is a broken or looping symlink; fix or remove it before storing "
                "the directory.") from None
        if not target.is_relative_to(real_root):
            raise MaterializerError(
                f"{full} is a symlink to {target}, outside the directory being stored "
                f"({real_root}); copy the target in or remove the link.")
        info.type, info.mode = tarfile.SYMTYPE, 0o777
        info.linkname = os.path.relpath(target, full.parent.resolve())
    elif stat.S_ISDIR(st.st_mode):
        info.type, info.mode = tarfile.DIRTYPE, 0o755
    elif stat.S_ISREG(st.st_mode):
        info.size = st.st_size
        info.mode = 0o755 if st.st_mode & 0o111 else 0o644
    else:
        raise MaterializerError(
            f"{full} is not a regular file, directory or symlink (a socket, FIFO or device); "
            "remove it before storing the directory.")
    return info
