"""What live processes still need from a local artifact store, so that gc spares it.

Every process that writes to a store holds a *lease*: a file ``pins/<token>.pins``
that it keeps locked (``flock``) for as long as it lives. Before it commits or reuses
a blob it appends the blob's hash there, and its temp files are named after its
token (``tmp/.tmp-<token>.*``). The kernel drops the lock when the process dies,
however it dies, so gc tells live work from leftovers by trying the lock:

* a hash in a locked pin file is referenced, whatever the grace period;
* a temp file whose token's pin file is locked is never swept.

A lease file is created under a temporary name, locked, then renamed into place, so
no other process ever sees an unlocked lease of a live process. ``gc.lock`` closes
the last gap: a writer pins a hash and checks whether its blob is present under a
shared lock, and gc re-reads the pins and deletes under the exclusive lock, so a
writer that finds a blob present can rely on it staying.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from reprise.core._atomic import TMP_PREFIX
from reprise.core._hashing import is_hash

__all__ = ["Lease", "gc_lock", "lease_for", "live_pins", "temp_owner_alive"]

PIN_SUFFIX = ".pins"
_NEW_PREFIX = ".new-"


class Lease:
    """This process's locked pin file in one store (see the module docstring)."""

    def __init__(self, root: Path) -> None:
        pins = root / "pins"
        pins.mkdir(parents=True, exist_ok=True)
        self.token = f"{os.getpid()}-{secrets.token_hex(6)}"
        new = pins / f"{_NEW_PREFIX}{self.token}"
        self._fd = os.open(new, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        os.replace(new, pins / f"{self.token}{PIN_SUFFIX}")
        self._write_lock = threading.Lock()

    def temp_name(self, what: str) -> str:
        """A temp file name gc can trace back to this lease."""
        return f"{TMP_PREFIX}{self.token}.{what}"

    def pin(self, hashes: Iterable[str]) -> None:
        data = "".join(f"{h}\n" for h in hashes).encode()
        with self._write_lock:
            view = memoryview(data)
            while view:  # a short write (full disk) must not be taken for a whole one
                view = view[os.write(self._fd, view):]


_leases: dict[tuple[str, int], Lease] = {}
_leases_lock = threading.Lock()


def lease_for(root: Path) -> Lease:
    """This process's lease in the store at ``root`` (a forked child gets its own)."""
    key = (str(root), os.getpid())
    with _leases_lock:
        lease = _leases.get(key)
        if lease is None:
            lease = _leases[key] = Lease(root)
        return lease


@contextlib.contextmanager
def gc_lock(root: Path, *, exclusive: bool) -> Iterator[None]:
    """gc's lock: shared for a writer's pin-and-check, exclusive for gc's deletions."""
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root / "gc.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _held(path: Path, *, remove_dead: bool) -> bool | None:
    """True when a live process holds ``path``'s lock; None when there is no such file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        if remove_dead:  # its owner is gone; we hold the lock, so nobody else uses it
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        return False
    finally:
        os.close(fd)


def live_pins(root: Path) -> set[str]:
    """Hashes pinned by live processes; lease files of dead ones are removed."""
    pins, out = root / "pins", set[str]()
    if not pins.is_dir():
        return out
    for entry in os.scandir(pins):
        path = Path(entry.path)
        if entry.name.startswith(_NEW_PREFIX):  # a writer killed between create and rename
            if entry.stat().st_mtime < time.time() - 60:
                _held(path, remove_dead=True)
            continue
        if not entry.name.endswith(PIN_SUFFIX) or not _held(path, remove_dead=True):
            continue
        with contextlib.suppress(FileNotFoundError):
            out.update(h for h in path.read_text("ascii", "replace").split("\n") if is_hash(h)
                       and len(h) == 64)
    return out


def temp_owner_alive(root: Path, name: str) -> bool:
    """True when the temp file ``name`` belongs to a live lease."""
    token = name[len(TMP_PREFIX):].split(".", 1)[0]
    if not token or "/" in token:
        return False
    return bool(_held(root / "pins" / f"{token}{PIN_SUFFIX}", remove_dead=False))
