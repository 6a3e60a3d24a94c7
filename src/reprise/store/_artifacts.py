"""The content-addressed artifact store: blobs named by the BLAKE3 hash of their bytes.

Layout under the store's root::

    blobs/<first 2 hex>/<remaining 62 hex>   one immutable file per distinct content
    tmp/.tmp-*                               writes in progress (or left by killed writers)

A blob only ever appears under ``blobs/`` by a rename of a complete, fsynced
temp file, so a reader never sees a prefix. The local backend uses plain ``os``
calls (``import fsspec`` alone costs 0.2 s); any other URL goes through fsspec.
"""

from __future__ import annotations

import abc
import contextlib
import errno
import itertools
import os
import secrets
import shutil
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, BinaryIO, cast
from urllib.parse import unquote, urlsplit

from reprise.core._atomic import (
    TMP_PREFIX,
    atomic_write,
    fsync_dir,
    fsync_path,
    sync_filesystem,
)
from reprise.core._hashing import hash_bytes, hash_file, is_hash, new_hasher
from reprise.core.errors import (
    ArtifactNotFoundError,
    ConfigError,
    IntegrityError,
    InvalidNameError,
    StoreError,
    WorkspaceWriteError,
)
from reprise.store import _leases

__all__ = [
    "BaseArtifactStore",
    "FsspecArtifactStore",
    "LocalArtifactStore",
    "open_artifact_store",
    "validate_artifact_name",
]

_CHUNK = 1 << 20
_SMALL = 1 << 20  # put_files reads files up to this size into memory once, not three times
_MAX_NAME = 255
_NAME_RULES = (
    "use a relative POSIX path such as 'model/weights.npy': '/'-separated parts, no '.' or "
    "'..' parts, no leading '/', no backslashes or control characters, at most 255 characters"
)


def validate_artifact_name(name: str) -> str:
    """Return ``name`` if it is a safe logical artifact name, else raise ``InvalidNameError``.

    Example:
        >>> validate_artifact_name("model/weights.npy")
        'model/weights.npy'
    """
    reason = _name_problem(name)
    if reason:
        raise InvalidNameError(f"Artifact name {name!r} is not allowed: {reason}; {_NAME_RULES}.")
    return name


def _name_problem(name: object) -> str | None:
    if not isinstance(name, str):
        return f"it is a {type(name).__name__}, not a str"
    if not name:
        return "it is empty"
    if len(name) > _MAX_NAME:
        return f"it is {len(name)} characters long"
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        return "it contains a NUL or control character"
    if "\\" in name:
        return "it contains a backslash"
    if name.startswith("/"):
        return "it is an absolute path"
    parts = name.split("/")
    if ".." in parts or "." in parts:
        return "it has a '.' or '..' part"
    if "" in parts:
        return "it has an empty part ('//' or a trailing '/')"
    return None


_UNWRITABLE = frozenset({errno.EROFS, errno.ENOSPC, errno.EACCES, errno.EPERM,
                         errno.EDQUOT})


def _inside(path: str | bytes | os.PathLike[str], root: Path) -> bool:
    try:
        return Path(os.fsdecode(path)).absolute().is_relative_to(root)
    except (TypeError, ValueError):
        return False


def _check_hash(h: object) -> str:
    # The path-traversal defence: only 64 lowercase hex characters ever become a path.
    # (len() too, because HASH_RE's '$' also matches before a trailing newline.)
    if not isinstance(h, str) or len(h) != 64 or not is_hash(h):
        raise InvalidNameError(
            f"{h!r} is not a content hash: expected 64 lowercase hex characters (BLAKE3). "
            "Pass the full hash from an artifact record, not a name or a path."
        )
    return h


def _check_copy_flags(durable: bool, link: bool) -> None:
    if link and durable:
        raise ValueError("copy_to(link=True) needs durable=False: a hard link to a cached "
                         "copy is not fsynced.")


class BaseArtifactStore(abc.ABC):
    """Where artifact bytes live, addressed by the BLAKE3 hash of their content.

    Contract:

    * **Thread and process safety.** Every method may be called from several
      threads and processes at once. Concurrent puts of the same content are
      safe: each writes its own temp file and the renames are atomic, so the
      blob is complete whichever wins.
    * **Atomic, deduplicated writes.** A put writes a temp file, fsyncs it and
      renames it to its hash; a killed writer leaves only a temp file under
      ``tmp/``, which :meth:`sweep_temp` removes. Content already present is
      not written again.
    * **Immutable blobs.** Once put, a blob's bytes never change; the only
      mutation is :meth:`delete` (for gc, which uses :meth:`mtime` for its
      grace period).
    * **Errors.** Every method taking a hash raises ``InvalidNameError`` for
      anything but 64 lowercase hex characters (so no hash can name a path
      outside the store); reads of an absent blob raise
      ``ArtifactNotFoundError``; bytes that do not match the expected size or
      (when asked to verify) the hash raise ``IntegrityError``.
    """

    url: str

    @abc.abstractmethod
    def put_bytes(self, data: bytes) -> tuple[str, int]:
        """Store ``data``; return ``(hash, size)``. No rewrite if already present."""

    @abc.abstractmethod
    def put_file(self, path: str | os.PathLike[str]) -> tuple[str, int]:
        """Store a local file's bytes in constant memory; return ``(hash, size)``."""

    @abc.abstractmethod
    def put_stream(self, chunks: Iterable[bytes]) -> tuple[str, int]:
        """Store the concatenation of ``chunks``, hashing while writing; return ``(hash, size)``."""

    def link_file(self, path: str | os.PathLike[str]) -> tuple[str, int]:
        """Like :meth:`put_file`, but a local store may hard-link the file instead of
        copying it (see :meth:`LocalArtifactStore.link_file`); others copy."""
        return self.put_file(path)

    def put_files(self, paths: Sequence[str | os.PathLike[str]], *, link: bool = False,
                  workers: int = 8) -> list[tuple[str, int]]:
        """Store many local files (hard-linked where :meth:`link_file` would); return
        their ``(hash, size)`` in order. A store may batch the work (see
        :meth:`LocalArtifactStore.put_files`); the guarantees are :meth:`put_file`'s."""
        put = self.link_file if link else self.put_file
        return [put(p) for p in paths]

    @abc.abstractmethod
    def exists(self, h: str) -> bool:
        """True when the blob is present."""

    @abc.abstractmethod
    def size(self, h: str) -> int:
        """Size of the blob in bytes; ``ArtifactNotFoundError`` if absent."""

    @abc.abstractmethod
    def mtime(self, h: str) -> float:
        """Last put of the blob (POSIX time), for gc grace periods."""

    @abc.abstractmethod
    def open(self, h: str) -> BinaryIO:
        """Open the blob for binary reading; the caller closes it."""

    @abc.abstractmethod
    def delete(self, h: str) -> bool:
        """Remove the blob; True if it was there."""

    @abc.abstractmethod
    def iter_hashes(self) -> Iterator[str]:
        """Yield the hash of every blob in the store, in sorted order."""

    @abc.abstractmethod
    def sweep_temp(self, older_than: float = 3600.0) -> int:
        """Remove temp files older than ``older_than`` seconds; return how many."""

    def local_path(self, h: str) -> Path | None:
        """The blob's path on the local disk, for read-only use; None for remote stores."""
        _check_hash(h)
        return None

    def pin(self, hashes: Iterable[str]) -> None:
        """Tell gc that this live process needs these blobs (see ``_leases``); stores that
        cannot track live processes rely on gc's grace period instead."""
        for h in hashes:
            _check_hash(h)

    def live_pins(self) -> set[str]:
        """Hashes pinned by live processes (empty where the store cannot tell)."""
        return set()

    @contextlib.contextmanager
    def gc_lock(self) -> Iterator[None]:
        """Held by gc while it deletes; a no-op where the store cannot lock."""
        yield

    def get_bytes(
        self, h: str, *, verify: bool = False, expected_size: int | None = None
    ) -> bytes:
        """Read a whole blob, checking its size (and hash when ``verify``).

        Example:
            >>> import tempfile
            >>> store = open_artifact_store(tempfile.mkdtemp())
            >>> h, _ = store.put_bytes(b"hello")
            >>> store.get_bytes(h, verify=True, expected_size=5)
            b'hello'
        """
        with self.open(h) as f:
            data = f.read()
        if expected_size is not None and len(data) != expected_size:
            raise self._corrupt(h, f"expected {expected_size} bytes, found {len(data)}")
        if verify and hash_bytes(data) != h:
            raise self._corrupt(h, "its bytes do not hash to its name")
        return data

    def copy_to(self, h: str, dest: str | os.PathLike[str], *, verify: bool = False,
                durable: bool = True, link: bool = False) -> Path:
        """Copy the blob to the file ``dest`` atomically; return ``dest`` as a Path.

        With ``verify``, the hash is checked while copying and ``dest`` is left
        untouched if it does not match.

        ``durable`` (the default): ``dest`` is fsynced before it is renamed into place (and
        here its folder after), so it is never seen partial even after a power loss. Pass
        ``durable=False`` for a destination that does not outlive the caller's work (a temp
        copy loaded then deleted): the same temp file and rename, no fsync.

        ``link`` (only with ``durable=False``): the caller only reads ``dest`` and never
        changes it or its mode, so a store with a local read-only copy of the blob (the S3
        store's cache) may make ``dest`` a hard link to it instead of a copy; other stores
        copy.
        """
        _check_copy_flags(durable, link)
        size = self.size(h)
        hasher, copied = new_hasher(), 0
        with self.open(h) as src, atomic_write(dest, fsync=durable) as out:
            while chunk := src.read(_CHUNK):
                out.write(chunk)
                copied += len(chunk)
                if verify:
                    hasher.update(chunk)
            if copied != size:
                raise self._corrupt(h, f"expected {size} bytes, read {copied}")
            if verify and hasher.hexdigest() != h:
                raise self._corrupt(h, "its bytes do not hash to its name")
        return Path(dest)

    def verify(self, h: str) -> bool:
        """Recompute the blob's hash; True when it matches. ``ArtifactNotFoundError`` if absent."""
        hasher = new_hasher()
        with self.open(h) as f:
            while chunk := f.read(_CHUNK):
                hasher.update(chunk)
        return bool(hasher.hexdigest() == h)

    def _corrupt(self, h: str, what: str) -> IntegrityError:
        return IntegrityError(
            f"Blob {h} in artifact store {self.url} is corrupt: {what}. "
            "Run `reprise fsck` to find and remove corrupt blobs, then re-run what produced it."
        )

    def _missing(self, h: str) -> ArtifactNotFoundError:
        return ArtifactNotFoundError(
            f"No blob {h} in artifact store {self.url}; it may have been garbage-collected "
            "or the store URL may point elsewhere. Check REPRISE_ARTIFACTS_URL or re-run the step."
        )


class LocalArtifactStore(BaseArtifactStore):
    """Artifact store in a local folder, with plain ``os`` calls.

    Blobs are made read-only (0o444); a put of content already present
    refreshes the blob's mtime so gc's grace period covers it.

    Example:
        >>> import tempfile
        >>> store = LocalArtifactStore(tempfile.mkdtemp())
        >>> store.put_bytes(b"x") == store.put_bytes(b"x")
        True
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).expanduser().absolute()
        self.url = str(self.root)

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """A read-only, full or forbidden store folder becomes one clear error."""
        try:
            yield
        except OSError as exc:
            if exc.errno not in _UNWRITABLE or isinstance(exc, WorkspaceWriteError):
                raise
            paths = [p for p in (exc.filename, exc.filename2) if p is not None]
            if paths and not any(_inside(p, self.root) for p in paths):
                raise  # e.g. a source file the user cannot read: not the store's problem
            raise WorkspaceWriteError(
                f"cannot write to the artifact folder {self.root}: "
                f"{exc.strerror or os.strerror(exc.errno or 0)}. Make it writable, free space "
                "on its disk, or point REPRISE_ARTIFACTS_URL at another folder."
            ) from exc

    def _lease(self) -> _leases.Lease:
        return _leases.lease_for(self.root)

    def _claim(self, h: str, size: int) -> bool:
        """Pin ``h`` for this process, then say whether its blob is present: under gc's
        shared lock, so a blob found present is not deleted by a gc running meanwhile."""
        with _leases.gc_lock(self.root, exclusive=False):
            self._lease().pin([h])
            return self._present(self._blob(h), size)

    def pin(self, hashes: Iterable[str]) -> None:
        checked = [_check_hash(h) for h in hashes]
        with self._writing(), _leases.gc_lock(self.root, exclusive=False):
            self._lease().pin(checked)

    def live_pins(self) -> set[str]:
        return _leases.live_pins(self.root)

    @contextlib.contextmanager
    def gc_lock(self) -> Iterator[None]:
        with _leases.gc_lock(self.root, exclusive=True):
            yield

    def _blob(self, h: str) -> Path:
        _check_hash(h)
        return self.root / "blobs" / h[:2] / h[2:]

    def _present(self, path: Path, size: int) -> bool:
        try:
            st = path.stat()
        except FileNotFoundError:
            return False
        if st.st_size != size:  # a truncated blob is replaced by the good bytes we hold
            return False
        with contextlib.suppress(OSError):
            os.utime(path)
        return True

    @contextlib.contextmanager
    def _temp(self) -> Iterator[tuple[BinaryIO, str]]:
        tmp_dir = self.root / "tmp"
        tmp_dir.mkdir(parents=True, exist_ok=True)
        tmp = str(tmp_dir / self._lease().temp_name(secrets.token_hex(8)))
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            with os.fdopen(fd, "wb") as f:
                yield f, tmp
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)  # gone already after a successful commit

    def _commit(self, tmp: str, h: str) -> None:
        target = self._blob(h)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(tmp, 0o444)
        os.replace(tmp, target)  # same content either way, so racing writers are harmless
        fsync_dir(target.parent)

    def put_bytes(self, data: bytes) -> tuple[str, int]:
        h, size = hash_bytes(data), len(data)
        with self._writing():
            return self.put_stream([data]) if not self._claim(h, size) else (h, size)

    def put_file(self, path: str | os.PathLike[str]) -> tuple[str, int]:
        with self._writing():
            return self._put_file(Path(path))

    def _put_file(self, src: Path) -> tuple[str, int]:
        before = src.stat()
        h = hash_file(src)  # memory map + threads: far faster than hashing while copying
        if self._claim(h, before.st_size):
            return h, before.st_size
        with self._temp() as (f, tmp):
            f.close()
            shutil.copyfile(src, tmp)  # sendfile on Linux
            after = src.stat()
            if (after.st_size, after.st_mtime_ns) != (before.st_size, before.st_mtime_ns):
                raise StoreError(f"{src} changed while it was being stored; store it again.")
            fsync_path(tmp)
            self._commit(tmp, h)
        return h, before.st_size

    def link_file(self, path: str | os.PathLike[str]) -> tuple[str, int]:
        """Store a file by hard-linking it into the store: no copy, so adding a large file
        costs its hashing only. The file and the blob then share one inode, which is made
        read-only (0o444) so that the file cannot be edited in place behind the store's
        back; editors and exports that write a new file and rename it are unaffected.
        Falls back to a copy across filesystems or where links are not allowed.
        """
        with self._writing():
            return self._link_file(Path(path))

    def _link_file(self, src: Path) -> tuple[str, int]:
        before = src.stat()
        h = hash_file(src)
        if self._claim(h, before.st_size):
            return h, before.st_size
        tmp_dir = self.root / "tmp"
        tmp_dir.mkdir(parents=True, exist_ok=True)
        tmp = str(tmp_dir / self._lease().temp_name(f"link-{h[:16]}-{secrets.token_hex(4)}"))
        try:
            os.link(src, tmp)
        except OSError as exc:  # another filesystem (EXDEV), or links not permitted
            if exc.errno in _UNWRITABLE and exc.errno != errno.EPERM:
                raise
            return self._put_file(src)
        try:
            after = os.stat(tmp)
            if (after.st_size, after.st_mtime_ns) != (before.st_size, before.st_mtime_ns):
                raise StoreError(f"{src} changed while it was being stored; store it again.")
            fsync_path(tmp)
            self._commit(tmp, h)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        return h, before.st_size

    def put_files(self, paths: Sequence[str | os.PathLike[str]], *, link: bool = False,
                  workers: int = 8) -> list[tuple[str, int]]:
        """Store many files at once: each is hashed and copied (or hard-linked) to a temp
        file by a pool of threads, then one ``syncfs`` makes all the copies durable
        before any is renamed to its hash, and each blob folder is fsynced once. A
        folder of 20,000 small files costs a few disk flushes instead of two per file;
        a blob still only appears complete and durable under its name."""
        made: list[str] = []
        needs_chmod: set[str] = set()  # copies and links; small files are staged read-only
        names = itertools.count()
        lease = self._lease()
        # temp names gc traces to this live process, unique without a syscall per file
        prefix = str(self.root / "tmp" / lease.temp_name(f"{uuid.uuid4().hex[:12]}-"))

        def stage(path: str | os.PathLike[str]) -> tuple[str, int, str | None]:
            tmp = f"{prefix}{next(names)}"
            if not link:
                small = self._stage_small(path, tmp, made)
                if small is not None:
                    return small
            src = Path(path)
            before = src.stat()
            h = hash_file(src)
            if self._present(self._blob(h), before.st_size):
                return h, before.st_size, None
            made.append(tmp)
            needs_chmod.add(tmp)
            try:
                if not link:
                    raise OSError
                os.link(src, tmp)
            except OSError:  # copying, or links not possible here (another filesystem)
                shutil.copyfile(src, tmp)
            after = src.stat()
            if (after.st_size, after.st_mtime_ns) != (before.st_size, before.st_mtime_ns):
                raise StoreError(f"{src} changed while it was being stored; store it again.")
            return h, before.st_size, tmp

        (self.root / "tmp").mkdir(parents=True, exist_ok=True)
        try:  # under gc's shared lock for the whole batch, as _claim is for one blob
            with self._writing(), _leases.gc_lock(self.root, exclusive=False):
                if workers > 1 and len(paths) > 1:
                    # a few chunks per thread rather than a future per file
                    step = max(1, len(paths) // (workers * 4))
                    chunks = [paths[i:i + step] for i in range(0, len(paths), step)]
                    with ThreadPoolExecutor(max_workers=workers) as pool:
                        staged = [item for part in pool.map(
                            lambda chunk: [stage(p) for p in chunk], chunks) for item in part]
                else:
                    staged = [stage(p) for p in paths]
                # Pinned once for the batch, still under gc's shared lock: no gc can delete
                # between a blob found present above and this pin (its deleting phase takes
                # the lock exclusively and reads the pins again)
                lease.pin(h for h, _, _ in staged)
                self._commit_many([(h, tmp) for h, _, tmp in staged if tmp is not None],
                                  needs_chmod)
        finally:
            for tmp in made:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
        return [(h, size) for h, size, _ in staged]

    def _stage_small(self, src: str | os.PathLike[str], tmp: str, made: list[str]
                     ) -> tuple[str, int, str | None] | None:
        """A small file read once: hashed from memory and written to a read-only temp
        (None for a file too large for that)."""
        with open(src, "rb", buffering=0) as f:
            before = os.fstat(f.fileno())
            if before.st_size > _SMALL:
                return None
            data = f.read(before.st_size + 1)
            after = os.fstat(f.fileno())
        if len(data) != before.st_size or after.st_mtime_ns != before.st_mtime_ns:
            raise StoreError(f"{src} changed while it was being stored; store it again.")
        h = hash_bytes(data)
        if self._present(self._blob(h), len(data)):
            return h, len(data), None
        made.append(tmp)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
        try:
            os.fchmod(fd, 0o444)  # whatever the umask, as _commit_many's chmod would
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        return h, len(data), tmp

    def _commit_many(self, staged: list[tuple[str, str]], needs_chmod: set[str]) -> None:
        if not staged:
            return
        sync_filesystem(self.root / "tmp")
        folders: set[Path] = set()
        for h, tmp in staged:
            target = self._blob(h)
            if target.parent not in folders:
                target.parent.mkdir(parents=True, exist_ok=True)
                folders.add(target.parent)
            if tmp in needs_chmod:
                os.chmod(tmp, 0o444)
            os.replace(tmp, target)
        for folder in sorted(folders):
            fsync_dir(folder)
        fsync_dir(self.root / "blobs")

    def put_stream(self, chunks: Iterable[bytes]) -> tuple[str, int]:
        hasher, size = new_hasher(), 0
        with self._writing(), self._temp() as (f, tmp):
            for chunk in chunks:
                f.write(chunk)
                hasher.update(chunk)
                size += len(chunk)
            f.flush()
            os.fsync(f.fileno())
            f.close()
            h = str(hasher.hexdigest())
            if not self._claim(h, size):
                self._commit(tmp, h)
        return h, size

    def _stat(self, h: str) -> os.stat_result:
        try:
            return self._blob(h).stat()
        except FileNotFoundError:
            raise self._missing(h) from None

    def exists(self, h: str) -> bool:
        return self._blob(h).is_file()

    def size(self, h: str) -> int:
        return self._stat(h).st_size

    def mtime(self, h: str) -> float:
        return self._stat(h).st_mtime

    def open(self, h: str) -> BinaryIO:
        try:
            return open(self._blob(h), "rb")
        except FileNotFoundError:
            raise self._missing(h) from None

    def local_path(self, h: str) -> Path | None:
        """The blob's path, for read-only use; ``ArtifactNotFoundError`` if absent."""
        self._stat(h)
        return self._blob(h)

    def verify(self, h: str) -> bool:
        self._stat(h)
        return hash_file(self._blob(h)) == h

    def delete(self, h: str) -> bool:
        try:
            self._blob(h).unlink()
        except FileNotFoundError:
            return False
        return True

    def iter_hashes(self) -> Iterator[str]:
        blobs = self.root / "blobs"
        if not blobs.is_dir():
            return
        for prefix in sorted(os.listdir(blobs)):
            if len(prefix) == 2 and (blobs / prefix).is_dir():
                for rest in sorted(os.listdir(blobs / prefix)):
                    if is_hash(prefix + rest) and len(rest) == 62:
                        yield prefix + rest

    def sweep_temp(self, older_than: float = 3600.0) -> int:
        """Remove temp files older than ``older_than`` seconds, except those of live
        processes (their lease is locked), whatever their age."""
        tmp_dir, cutoff, removed = self.root / "tmp", time.time() - older_than, 0
        if not tmp_dir.is_dir():
            return 0
        for entry in os.scandir(tmp_dir):
            with contextlib.suppress(FileNotFoundError):  # another sweeper was faster
                if (entry.name.startswith(TMP_PREFIX) and entry.stat().st_mtime <= cutoff
                        and not _leases.temp_owner_alive(self.root, entry.name)):
                    os.unlink(entry.path)
                    removed += 1
        return removed


class FsspecArtifactStore(BaseArtifactStore):
    """Artifact store on any fsspec filesystem (``memory://``, ``s3://``, ``gs://``...).

    Writes go to ``tmp/`` and are then moved to their hash; on object stores
    the move is a copy whose object appears whole. ``mtime`` is the blob's
    creation time (fsspec cannot refresh it portably).

    Example:
        >>> store = FsspecArtifactStore("memory://reprise-doctest")
        >>> h, size = store.put_bytes(b"hi")
        >>> store.get_bytes(h)
        b'hi'
    """

    def __init__(self, url: str, **storage_options: Any) -> None:
        import fsspec  # lazily: it is slow to import and local stores never need it

        self.url = url
        self.fs, root = fsspec.core.url_to_fs(url, **storage_options)
        self.root = str(root).rstrip("/")

    def _blob(self, h: str) -> str:
        _check_hash(h)
        return f"{self.root}/blobs/{h[:2]}/{h[2:]}"

    def _new_temp(self) -> str:
        self.fs.makedirs(f"{self.root}/tmp", exist_ok=True)
        return f"{self.root}/tmp/{TMP_PREFIX}{uuid.uuid4().hex}"

    def _commit(self, tmp: str, h: str, size: int) -> tuple[str, int]:
        target = self._blob(h)
        try:
            if self.fs.exists(target) and self.fs.size(target) == size:
                return h, size
            self.fs.makedirs(target.rsplit("/", 1)[0], exist_ok=True)
            self.fs.mv(tmp, target)
        finally:
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm_file(tmp)
        return h, size

    def put_bytes(self, data: bytes) -> tuple[str, int]:
        h, size = hash_bytes(data), len(data)
        if self.fs.exists(self._blob(h)) and self.fs.size(self._blob(h)) == size:
            return h, size
        tmp = self._new_temp()
        self.fs.pipe_file(tmp, bytes(data))
        return self._commit(tmp, h, size)

    def put_file(self, path: str | os.PathLike[str]) -> tuple[str, int]:
        h, size = hash_file(path), os.path.getsize(path)
        if self.fs.exists(self._blob(h)) and self.fs.size(self._blob(h)) == size:
            return h, size
        tmp = self._new_temp()
        self.fs.put_file(os.fspath(path), tmp)
        return self._commit(tmp, h, size)

    def put_stream(self, chunks: Iterable[bytes]) -> tuple[str, int]:
        hasher, size, tmp = new_hasher(), 0, self._new_temp()
        try:
            with self.fs.open(tmp, "wb") as f:
                for chunk in chunks:
                    f.write(chunk)
                    hasher.update(chunk)
                    size += len(chunk)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm_file(tmp)
            raise
        return self._commit(tmp, str(hasher.hexdigest()), size)

    def _info(self, h: str) -> dict[str, Any]:
        try:
            return cast(dict[str, Any], self.fs.info(self._blob(h)))
        except FileNotFoundError:
            raise self._missing(h) from None

    def exists(self, h: str) -> bool:
        return bool(self.fs.isfile(self._blob(h)))

    def size(self, h: str) -> int:
        return int(self._info(h)["size"])

    def mtime(self, h: str) -> float:
        self._info(h)
        return float(self.fs.modified(self._blob(h)).timestamp())

    def open(self, h: str) -> BinaryIO:
        try:
            return cast(BinaryIO, self.fs.open(self._blob(h), "rb"))
        except FileNotFoundError:
            raise self._missing(h) from None

    def delete(self, h: str) -> bool:
        try:
            self.fs.rm_file(self._blob(h))
        except FileNotFoundError:
            return False
        return True

    def iter_hashes(self) -> Iterator[str]:
        found = self.fs.find(f"{self.root}/blobs") if self.fs.exists(f"{self.root}/blobs") else []
        hashes = []
        for path in found:
            prefix, rest = str(path).rstrip("/").split("/")[-2:]
            if len(prefix) == 2 and len(rest) == 62 and is_hash(prefix + rest):
                hashes.append(prefix + rest)
        yield from sorted(hashes)

    def sweep_temp(self, older_than: float = 3600.0) -> int:
        tmp_dir, cutoff, removed = f"{self.root}/tmp", time.time() - older_than, 0
        if not self.fs.exists(tmp_dir):
            return 0
        for path in self.fs.ls(tmp_dir, detail=False):
            name = str(path).rstrip("/").rsplit("/", 1)[-1]
            with contextlib.suppress(FileNotFoundError):
                if name.startswith(TMP_PREFIX) and self.fs.modified(path).timestamp() <= cutoff:
                    self.fs.rm_file(path)
                    removed += 1
        return removed


def open_artifact_store(url: str | os.PathLike[str], *,
                        cache_dir: str | os.PathLike[str] | None = None,
                        cache_size: int | None = None) -> BaseArtifactStore:
    """Open the artifact store at ``url``: a plain path or ``file://`` is local, ``s3://``
    the S3 store (with its local read-through cache, see ``_s3``), else fsspec.

    Raises ``ConfigError`` for a scheme fsspec does not know or whose package
    is not installed, naming the URL and what to install.

    Example:
        >>> import tempfile
        >>> type(open_artifact_store(tempfile.mkdtemp())).__name__
        'LocalArtifactStore'
    """
    text = os.fspath(url)
    if "://" not in text:
        return LocalArtifactStore(text)
    parts = urlsplit(text)
    if parts.scheme == "file":
        return LocalArtifactStore(unquote(parts.netloc + parts.path))
    if parts.scheme in ("s3", "s3a"):
        import importlib.util

        if importlib.util.find_spec("s3fs") is None:  # imported only on first use
            raise ConfigError(
                "The s3:// artifact store needs s3fs: pip install 'reprise-ml[s3]' (or "
                "s3fs), or choose another [artifacts] url / REPRISE_ARTIFACTS_URL.")
        from reprise.store._s3 import S3ArtifactStore

        return S3ArtifactStore(text, cache_dir=cache_dir, cache_size=cache_size)
    import fsspec

    try:
        fsspec.get_filesystem_class(parts.scheme)
    except ValueError:
        raise ConfigError(
            f"Artifact store URL {text!r} has an unknown scheme {parts.scheme!r}. Use a local "
            "path, file://, or an fsspec URL such as s3://bucket/prefix (pip install s3fs) or "
            "gs://bucket/prefix (pip install gcsfs)."
        ) from None
    except ImportError as exc:
        raise ConfigError(
            f"Artifact store URL {text!r} needs a package that is not installed: {exc}. "
            "Install it (e.g. pip install s3fs for s3://) or choose another URL."
        ) from None
    return FsspecArtifactStore(text)
