"""A local read-through cache of blobs from a remote artifact store, with a size limit.

Layout under the cache folder (shared by every store and process on the machine:
a blob is named by the hash of its bytes, so one cached copy serves any bucket)::

    <first 2 hex>/<remaining 62 hex>    a verified, read-only copy of a blob
    tmp/.tmp-<pid>-<random>             a download in progress (or left by a killed one)

A blob enters the cache only by an atomic rename of a temp file whose bytes were
hashed and found equal to its name, so a reader never opens a partial or wrong copy,
and two processes filling the same blob at once both succeed (same bytes either way).
Entries are not fsynced: each is a copy of a blob the remote store keeps, and an
fsync would cost every fill a journal commit. A power loss can leave an entry empty or
short; the S3 store's verified reads (``copy_to`` / ``get_bytes`` with ``verify``)
hash an entry before using it and fetch the blob again when it does not match.
Eviction is least-recently-used by mtime (a hit refreshes it; atime is unreliable on
``relatime``/``noatime`` mounts) once the total passes the limit; unlinking a file a
reader has open is harmless on POSIX, and a reader whose file vanished between
lookup and open fills it again.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from collections.abc import Callable
from pathlib import Path

from reprise.core._atomic import TMP_PREFIX
from reprise.core._hashing import is_hash
from reprise.core.errors import IntegrityError

__all__ = ["DEFAULT_CACHE_SIZE", "BlobCache", "default_cache_dir"]

DEFAULT_CACHE_SIZE = 5 << 30
_STALE_TMP = 3600.0
_RELIST = 60.0


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/reprise/blobs`` (``~/.cache/reprise/blobs``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "reprise" / "blobs"


class BlobCache:
    """Verified copies of remote blobs in ``root``, at most ``limit`` bytes in all."""

    def __init__(self, root: str | os.PathLike[str], limit: int) -> None:
        self.root = Path(root).expanduser().absolute()
        self.limit = int(limit)
        self._estimate = 0  # bytes in the cache as of the last listing, plus fills since
        self._listed = -float("inf")

    def path(self, h: str) -> Path:
        return self.root / h[:2] / h[2:]

    def lookup(self, h: str) -> Path | None:
        """The cached copy's path, its mtime refreshed (a use, for LRU); None if absent."""
        path = self.path(h)
        try:
            os.utime(path)
        except FileNotFoundError:
            return None
        except OSError:  # e.g. a cache folder shared read-only: still a hit
            if not path.is_file():
                return None
        return path

    def temp_path(self) -> Path:
        tmp = self.root / "tmp"
        if not tmp.is_dir():  # one stat on a fill, not a failing mkdir and a stat
            tmp.mkdir(parents=True, exist_ok=True)
        return tmp / f"{TMP_PREFIX}{os.getpid()}-{secrets.token_hex(8)}"

    def fill(self, h: str, download: Callable[[Path], tuple[int, str] | None]
             ) -> Path | None:
        """Fill blob ``h``: ``download(temp_path)`` writes the bytes and returns their
        ``(size, hash)``, or None for a blob over the limit (then nothing is cached and
        None returned). ``IntegrityError``, and nothing cached, when the hash is not ``h``.
        """
        tmp = self.temp_path()
        try:
            got = download(tmp)
            if got is None:
                return None
            size, digest = got
            if digest != h:
                raise IntegrityError(
                    f"Blob {h} downloaded into the cache {self.root} is corrupt: its "
                    f"{size} bytes do not hash to its name. Run `reprise fsck` on the "
                    "artifact store to find corrupt blobs.")
            return self.adopt(h, tmp, size)
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()

    def adopt(self, h: str, tmp: Path, size: int) -> Path:
        """Move a verified file made by :meth:`temp_path` into the cache as blob ``h``."""
        target = self.path(h)
        os.chmod(tmp, 0o444)
        try:
            os.replace(tmp, target)  # atomic; a racing filler renames the same bytes
        except FileNotFoundError:  # the first blob under this prefix (tmp is there)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(tmp, target)
        # The folder is listed (to evict) only when this process's running estimate of
        # the total passes the limit, or a minute after the last listing (other processes
        # fill it too), not on every fill: a cache of 100,000 blobs takes a while to list.
        self._estimate += size
        if self._estimate > self.limit or time.monotonic() - self._listed > _RELIST:
            self.evict(keep=h)
        return target

    def discard(self, h: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path(h).unlink()

    def entries(self) -> list[tuple[float, int, Path]]:
        """(mtime, size, path) of every cached blob."""
        out: list[tuple[float, int, Path]] = []
        if not self.root.is_dir():
            return out
        for prefix in os.scandir(self.root):
            if len(prefix.name) != 2 or not prefix.is_dir():
                continue
            for entry in os.scandir(prefix.path):
                if len(entry.name) == 62 and is_hash(prefix.name + entry.name):
                    with contextlib.suppress(FileNotFoundError):
                        st = entry.stat()
                        out.append((st.st_mtime, st.st_size, Path(entry.path)))
        return out

    def evict(self, keep: str | None = None) -> int:
        """Remove least-recently-used blobs until the total is within the limit (the blob
        ``keep``, just added, stays); also sweep downloads abandoned over an hour ago.
        Return the bytes freed."""
        self._sweep_tmp()
        entries = self.entries()
        total = sum(size for _, size, _ in entries)
        self._listed = time.monotonic()
        freed = 0
        keep_path = self.path(keep) if keep else None
        for _, size, path in sorted(entries, key=lambda e: e[0]):
            if total <= self.limit:
                break
            if path == keep_path:
                continue
            with contextlib.suppress(FileNotFoundError):  # another process evicted it
                path.unlink()
                freed += size
            total -= size
        self._estimate = total
        return freed

    def _sweep_tmp(self) -> None:
        tmp = self.root / "tmp"
        if not tmp.is_dir():
            return
        cutoff = time.time() - _STALE_TMP
        for entry in os.scandir(tmp):
            with contextlib.suppress(FileNotFoundError):
                if entry.name.startswith(TMP_PREFIX) and entry.stat().st_mtime < cutoff:
                    os.unlink(entry.path)
