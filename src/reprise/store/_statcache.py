"""A stat cache: content hashes of local files, keyed by what ``lstat`` says about them.

Re-adding a folder whose files did not change should cost the walk, not the
reading. The cache remembers, per absolute path, the file's size, mtime, inode
and ctime with the hash they had; a file whose four stamps all match is not read
again (git's index does the same). Entries are only recorded for files whose
mtime is at least :data:`RACY_NS` older than the moment they were hashed, so a
file modified in the same clock tick as its hashing is never trusted (git's
"racily clean" entries).

One SQLite file, read and written in bulk (one query per folder, one
transaction per add). The cache is an optimisation and fails toward re-hashing:
an unreadable or corrupt cache file is ignored and replaced.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
from collections.abc import Iterable
from pathlib import Path

__all__ = ["RACY_NS", "StatCache", "Stamp", "stamp_of"]

_logger = logging.getLogger(__name__)

RACY_NS = 1_000_000_000
Stamp = tuple[int, int, int, int]
"""(size, mtime_ns, inode, ctime_ns)"""

_SCHEMA = ("CREATE TABLE IF NOT EXISTS stat (path TEXT PRIMARY KEY, size INTEGER NOT NULL, "
           "mtime_ns INTEGER NOT NULL, ino INTEGER NOT NULL, ctime_ns INTEGER NOT NULL, "
           "hash TEXT NOT NULL) WITHOUT ROWID")


def stamp_of(st: os.stat_result) -> Stamp:
    return st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns


class StatCache:
    """Hashes of files under a folder, remembered by stat stamp.

    Example:
        >>> import tempfile, os
        >>> d = tempfile.mkdtemp(); f = os.path.join(d, "a"); _ = open(f, "w").write("x")
        >>> os.utime(f, ns=(0, 0))
        >>> cache = StatCache(os.path.join(d, "stat.sqlite"))
        >>> cache.record([(f, stamp_of(os.lstat(f)), "ab" * 32)], hashed_at_ns=10**18)
        >>> cache.lookup(d)[f][1] == "ab" * 32
        True
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")  # a lost entry only costs a re-hash
        conn.execute(_SCHEMA)
        return conn

    def lookup(self, root: str | os.PathLike[str]) -> dict[str, tuple[Stamp, str]]:
        """Every remembered ``path -> (stamp, hash)`` below the absolute folder ``root``."""
        prefix = os.path.join(os.fspath(root), "")
        # every path starting with "root/" sorts in [prefix, prefix[:-1] + "0")
        upper = prefix[:-1] + chr(ord(os.sep) + 1)
        try:
            with contextlib.closing(self._connect()) as conn:
                rows = conn.execute("SELECT path, size, mtime_ns, ino, ctime_ns, hash FROM stat "
                                    "WHERE path >= ? AND path < ?", (prefix, upper)).fetchall()
        except sqlite3.Error as exc:
            self._reset(exc)
            return {}
        return {r[0]: ((r[1], r[2], r[3], r[4]), r[5]) for r in rows}

    def record(self, entries: Iterable[tuple[str, Stamp, str]], *, hashed_at_ns: int) -> None:
        """Remember ``(absolute path, stamp, hash)`` rows, skipping racily fresh files
        (mtime within :data:`RACY_NS` of ``hashed_at_ns``, the time hashing began)."""
        rows = [(p, *stamp, h) for p, stamp, h in entries
                if stamp[1] < hashed_at_ns - RACY_NS]
        if not rows:
            return
        try:
            with contextlib.closing(self._connect()) as conn:
                conn.execute("BEGIN IMMEDIATE")
                conn.executemany("INSERT OR REPLACE INTO stat VALUES (?, ?, ?, ?, ?, ?)", rows)
                conn.execute("COMMIT")
        except sqlite3.Error as exc:
            self._reset(exc)

    def _reset(self, exc: Exception) -> None:
        if isinstance(exc, sqlite3.OperationalError):  # locked or busy: skip it this time
            _logger.warning("stat cache %s is busy (%s); skipping it", self.path, exc)
            return
        _logger.warning("stat cache %s is unusable (%s); files will be hashed again", self.path,
                        exc)
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(OSError):
                os.unlink(f"{self.path}{suffix}")
