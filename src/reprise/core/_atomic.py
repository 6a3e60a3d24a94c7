"""Atomic file writes: temp file in the same directory, fsync, rename, fsync dir.

A reader sees either the old file or the whole new one, never a prefix, even
when the writer is killed with SIGKILL halfway (Metaflow's and DVC's habit).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

__all__ = ["atomic_write", "atomic_write_bytes", "fsync_dir", "fsync_path", "TMP_PREFIX"]

# Temp files carry this prefix so fsck and gc can recognise (and sweep) leftovers.
TMP_PREFIX = ".tmp-"


def _read_umask() -> int:
    # Read once, at import (single-threaded then): os.umask can only be read by setting it.
    old = os.umask(0o022)
    os.umask(old)
    return old


# mkstemp creates files 0600; a finished file gets the mode a plain open() would give it.
_FILE_MODE = 0o666 & ~_read_umask()


def fsync_path(path: str | os.PathLike[str]) -> None:
    """fsync a file (its bytes are on disk) or a directory (a rename inside it is durable)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


fsync_dir = fsync_path


def sync_filesystem(path: str | os.PathLike[str]) -> None:
    """Flush every written byte of the filesystem holding ``path`` to disk: one flush
    for a batch of files instead of an fsync each (Linux ``syncfs``; ``sync`` elsewhere)."""
    import ctypes

    fd = os.open(path, os.O_RDONLY)
    try:
        syncfs = getattr(ctypes.CDLL(None, use_errno=True), "syncfs", None)
        if syncfs is None or syncfs(fd) != 0:
            os.sync()
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_write(
    path: str | os.PathLike[str],
    *,
    mode: str = "wb",
    sync_dir: bool = True,
    fsync: bool = True,
) -> Iterator[IO[bytes]]:
    """Open a temp file beside ``path``; on clean exit fsync it and rename onto ``path``.

    On an exception the temp file is removed and ``path`` is untouched. The folder is
    fsynced after the rename (the new name survives a power loss) unless ``sync_dir`` is
    false: for a copy of something kept elsewhere, where losing the rename on a power
    loss only leaves ``path`` as it was before (the file itself is fsynced before the
    rename either way, so ``path`` is never seen partial). With ``fsync`` false nothing is
    fsynced (``sync_dir`` is then ignored): the rename still hides a partial file from
    other processes and from a killed writer, but not from a power loss; for a file that
    does not outlive the process's work (a temp copy deleted once loaded).

    Example:
        >>> import tempfile, pathlib
        >>> d = pathlib.Path(tempfile.mkdtemp())
        >>> with atomic_write(d / "x.txt", mode="w") as f:
        ...     _ = f.write("hello")
        >>> (d / "x.txt").read_text()
        'hello'
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX, dir=target.parent)
    try:
        os.fchmod(fd, _FILE_MODE)
        with os.fdopen(fd, mode) as f:
            yield f
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    if sync_dir and fsync:
        fsync_dir(target.parent)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""
    with atomic_write(path) as f:
        f.write(data)
