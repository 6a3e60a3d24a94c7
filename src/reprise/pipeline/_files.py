"""``File`` and ``Dir``: pipeline inputs that count by content, not by name.

A parameter typed ``reprise.File`` (or ``reprise.Dir``) enters the cache key as
the BLAKE3 hash of its bytes. Hashing a large file on every run would dominate a
no-op re-run, so hashes are remembered per (path, size, mtime_ns, inode, ctime_ns)
in small JSON files under ``.reprise/cache/files/``: an unchanged file is stat-ed,
not re-read. (The same trick as git's index; no library packages it.)
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from reprise.core._atomic import atomic_write_bytes
from reprise.core._hashing import hash_bytes, hash_file, hash_value
from reprise.core.errors import UserError

__all__ = ["Dir", "File", "FileHasher", "PathInput"]


class PathInput(os.PathLike[str]):
    """Base of :class:`File` and :class:`Dir`: a path whose content is the input.

    It stands in for its path wherever one is accepted: ``str()``, ``os.fspath()``,
    ``open()``, ``pd.read_csv()``, and ``/`` joins (giving a :class:`pathlib.Path`).
    """

    kind = "path"

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def __fspath__(self) -> str:
        return str(self.path)

    def __str__(self) -> str:
        return str(self.path)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.path)!r})"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.path == self.path  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.path))

    def __truediv__(self, other: str | os.PathLike[str]) -> Path:
        return self.path / other

    @property
    def name(self) -> str:
        return self.path.name

    def read_bytes(self) -> bytes:
        return self.path.read_bytes()

    def read_text(self, encoding: str = "utf-8") -> str:
        return self.path.read_text(encoding=encoding)


class File(PathInput):
    """A regular file given to a pipeline; its bytes are part of the cache key."""

    kind = "file"


class Dir(PathInput):
    """A directory given to a pipeline; every file's path and bytes are in the key."""

    kind = "dir"


class FileHasher:
    """Content hashes of files and directories with a stat-keyed cache on disk."""

    def __init__(self, cache_dir: str | os.PathLike[str] | None) -> None:
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.reads = 0  # files actually read (for tests and benchmarks)

    def hash(self, item: PathInput) -> str:
        path = item.path
        if isinstance(item, Dir):
            if not path.is_dir():
                raise UserError(f"input directory {str(path)!r} does not exist or is not a "
                                "directory; pass an existing directory.")
            return self.hash_dir(path)
        if not path.is_file():
            raise UserError(f"input file {str(path)!r} does not exist or is not a regular "
                            "file; pass an existing file.")
        return self.hash_file(path)

    def hash_file(self, path: Path) -> str:
        st = path.stat()
        stamp = [st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns]
        entry = self._entry(path)
        if entry is not None:
            try:
                cached = json.loads(entry.read_bytes())
                if cached.get("stamp") == stamp and cached.get("path") == str(path.resolve()):
                    return str(cached["hash"])
            except (OSError, ValueError, KeyError):
                pass  # a missing or torn cache entry just means: hash again
        self.reads += 1
        h = hash_file(path)
        if entry is not None:
            doc = {"path": str(path.resolve()), "stamp": stamp, "hash": h}
            try:
                entry.parent.mkdir(parents=True, exist_ok=True)
                atomic_write_bytes(entry, json.dumps(doc).encode())
            except OSError:
                pass  # the cache is an optimisation; a read-only workspace still works
        return h

    def hash_dir(self, path: Path) -> str:
        """Hash of the sorted (relative POSIX path, file hash) list; empty dirs and
        mtimes do not count, symlinks count by their target's content."""
        entries = []
        for dirpath, dirnames, filenames in os.walk(path, followlinks=False):
            dirnames.sort()
            for name in sorted(filenames):
                full = Path(dirpath) / name
                if full.is_file():
                    entries.append([full.relative_to(path).as_posix(), self.hash_file(full)])
        return hash_value({"dir": sorted(entries)})

    def _entry(self, path: Path) -> Path | None:
        if self.cache_dir is None:
            return None
        key = hash_bytes(str(path.resolve()).encode())
        return self.cache_dir / key[:2] / f"{key}.json"



def is_external(value: object) -> bool:
    """An input resolved from the workspace rather than passed by value: an object with
    ``reprise_input_key()``, ``reprise_resolve(workspace)`` (returning ``content_hash``,
    ``artifact``, ``source`` and ``rebuild`` = ``{"factory": "module:Class.method",
    "payload": {...}}``) and the ``rebuild`` factory. ``reprise.data.Dataset`` is one;
    the protocol keeps this layer from importing the data layer."""
    return (not isinstance(value, type) and callable(getattr(value, "reprise_resolve", None))
            and callable(getattr(value, "reprise_input_key", None)))
