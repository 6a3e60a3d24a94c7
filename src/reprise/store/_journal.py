"""The append-only run journal: the source of truth while a run is alive.

This is Reprise's own mechanism (no library offers it): every tracking call
appends one line to ``.reprise/journals/<run_id>.jrnl`` with a single
``write(2)`` on an ``O_APPEND`` descriptor. Once ``write`` returns, the bytes
are in the kernel's page cache and survive a SIGKILL of the process, so a
metric whose ``log_metric`` call returned is never lost. The database is an
index built from journals, ingested in batches (by the run's own background
flusher, at the end of the run, or by the next process that opens the
workspace and finds the journal of a dead run).

The writer holds an exclusive ``flock`` on its journal for the whole run: the
kernel drops it when the process dies, which is how recovery tells a dead run
from a live one without trusting pids.

A journal appears in its folder already locked and holding its header: it is
written under a temporary name, locked, then hard-linked into place. Recovery
therefore never finds a live run's journal unlocked, and only a holder of the
lock that has checked the name still leads to its file moves it to ``done/``.

Every write is whole or raises :class:`~reprise.core.errors.JournalWriteError`
(a short write, e.g. on a full disk, is finished or cut back to the last whole
line). A line that does not parse (a journal torn by an older version or a
crash) is dropped and reported in ``JournalBatch.dropped``; the lines around it
are kept.

Line format (UTF-8, ``\\n``-terminated; a final line without ``\\n`` is a write
cut short and is ignored while the writer lives, dropped by recovery)::

    M<TAB>key<TAB>step<TAB>value<TAB>timestamp      metric point (hot path)
    R<TAB>{json}                                    run header (first line)
    P<TAB>{json}   T<TAB>{json}                     params / tags
    E<TAB>{json}                                    environment {"hash", "fingerprint"}
    A<TAB>{json}                                    artifact logged {"name", record...}
    X<TAB>{json}                                    pipeline step run (lineage edges)
    S<TAB>{json}                                    end {"status", "ended_at", "error", ...}
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reprise.core.errors import InvalidNameError, JournalWriteError

__all__ = [
    "JournalBatch",
    "JournalWriter",
    "check_key",
    "cut_torn_tail",
    "finish_write",
    "read_journal",
    "try_lock",
    "write_whole",
]

SUFFIX = ".jrnl"
_KEY_RE = re.compile(r"^[^\x00-\x1f\x7f]{1,250}$")


def check_key(key: str, what: str = "metric key") -> str:
    """Validate a metric, param or tag key: 1-250 characters, no control characters."""
    if not isinstance(key, str) or not _KEY_RE.match(key) or key != key.strip():
        raise InvalidNameError(
            f"invalid {what} {key!r}: use 1-250 printable characters with no tabs, newlines "
            "or leading/trailing spaces, e.g. 'val/loss'."
        )
    return key


class JournalWriter:
    """Appends events for one run; holds the journal's lock until closed.

    ``first`` (the header lines) is in the file before anyone can see it. Not
    thread-safe for interleaving *auto-numbered* steps of one key from two
    threads; each write of whole lines is atomic with respect to others.
    """

    def __init__(self, path: Path, first: bytes = b"") -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self.lock = threading.Lock()  # held around every write (see Run.log_metric)
        self.fd = _create_locked(path, first)
        self.closed = False

    def write(self, data: bytes) -> None:
        """Append whole lines, or raise :class:`JournalWriteError` having added none
        of the line it failed in."""
        with self.lock:
            write_whole(self.fd, data, self.path)

    def metric(self, key: str, step: int, value: float, timestamp: float) -> None:
        self.write(f"M\t{key}\t{step}\t{value!r}\t{timestamp!r}\n".encode())

    def metrics(self, rows: list[tuple[str, int, float, float]]) -> None:
        self.write("".join(f"M\t{k}\t{s}\t{v!r}\t{t!r}\n" for k, s, v, t in rows).encode())

    def event(self, tag: str, payload: dict[str, Any]) -> None:
        self.write(event_line(tag, payload))

    def size(self) -> int:
        return os.fstat(self.fd).st_size

    def close(self) -> None:
        """Release the lock and close; the file stays for ingestion/archival."""
        if not self.closed:
            self.closed = True
            os.close(self.fd)


def event_line(tag: str, payload: dict[str, Any]) -> bytes:
    return f"{tag}\t{json.dumps(payload, separators=(',', ':'), allow_nan=True)}\n".encode()


def _create_locked(path: Path, first: bytes) -> int:
    """Create ``path`` holding ``first``, its lock already taken by the returned fd.

    The file is made under a temporary name (not ``*.jrnl``: recovery ignores it),
    locked, written, then hard-linked into place; ``FileExistsError`` if ``path``
    exists. A kill in between leaves only the temporary file (see
    :func:`sweep_temp_journals`).
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if first:
            write_whole(fd, first, path)
        _link(tmp, path)
    except BaseException:
        os.close(fd)
        raise
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return fd


def _link(tmp: Path, path: Path) -> None:
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise
    except OSError as exc:  # a filesystem without hard links: ids are unique, rename
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
            raise
        if path.exists():
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(path)) from exc
        os.rename(tmp, path)


def sweep_temp_journals(folder: Path, older_than: float = 3600.0) -> int:
    """Remove temporary journals left by processes killed while creating one."""
    removed = 0
    now = time.time()
    for tmp in folder.glob(".*.tmp"):
        with contextlib.suppress(FileNotFoundError), try_lock(tmp, check=False) as fd:
            if fd is not None and now - os.fstat(fd).st_mtime > older_than:
                tmp.unlink()
                removed += 1
    return removed


def write_whole(fd: int, data: bytes, path: Path) -> None:
    """Write ``data`` whole or raise :class:`JournalWriteError`; see :func:`finish_write`."""
    try:
        n = os.write(fd, data)
    except OSError:
        n = 0  # nothing was written: finish_write tries again and reports the error
    if n != len(data):
        finish_write(fd, data, n, path)


def finish_write(fd: int, data: bytes, done: int, path: Path) -> None:
    """Write the rest of ``data`` after a short write of ``done`` bytes, or raise,
    cutting the file back to the last whole line written: a reader never sees part
    of a line that the caller was told failed, and no line ingested already is cut.
    The caller holds the writer's lock (nobody appends meanwhile)."""
    try:
        while done < len(data):
            n = os.write(fd, memoryview(data)[done:])
            if n <= 0:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            done += n
    except OSError as exc:
        keep = data.rfind(b"\n", 0, done) + 1
        if done > keep:
            os.ftruncate(fd, os.fstat(fd).st_size - done + keep)
        lost, kept = data.count(b"\n", keep), data.count(b"\n", 0, keep)
        raise JournalWriteError(
            f"could not write to the run journal {path}: {exc.strerror or exc}. "
            f"{lost} line(s) (metric points or events) were not recorded; the "
            f"{kept} before them and every earlier line are kept. "
            "Free space on that disk (or fix the error) and log again."
        ) from exc


@dataclass
class JournalBatch:
    """Events parsed from one stretch of a journal, ready to ingest."""

    header: dict[str, Any] | None = None
    params: dict[str, Any] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    environments: list[dict[str, Any]] = field(default_factory=list)
    artifacts: list[dict[str, Any]] = field(default_factory=list)
    metrics: list[tuple[str, int, float, float]] = field(default_factory=list)
    steps: list[dict[str, Any]] = field(default_factory=list)
    end: dict[str, Any] | None = None
    end_offset: int = 0
    #: (byte offset, bytes) of lines that did not parse: dropped, the rest kept
    dropped: list[tuple[int, bytes]] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.header or self.params or self.tags or self.environments
                    or self.artifacts or self.metrics or self.steps or self.end)


_BAD_LINE = (ValueError, TypeError, KeyError, AttributeError)


def read_journal(path: Path, offset: int = 0, *, max_bytes: int = 64 << 20) -> JournalBatch:
    """Parse complete lines of ``path`` from byte ``offset`` (at most ``max_bytes``)."""
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read(max_bytes)
    last = data.rfind(b"\n")
    end = offset + last + 1 if last >= 0 else offset
    batch = JournalBatch(end_offset=end)
    if last < 0:
        return batch
    # split("\n"), not splitlines(): keys may contain U+0085 or U+2028, which
    # splitlines() would treat as line breaks.
    try:
        for line in data[:last].decode("utf-8", errors="replace").split("\n"):
            _parse_line(line, batch)
    except _BAD_LINE:  # a torn line somewhere: parse line by line, keep what parses
        batch = _parse_carefully(data[:last], offset, end)
    return batch


def _parse_carefully(data: bytes, offset: int, end: int) -> JournalBatch:
    batch = JournalBatch(end_offset=end)
    pos = offset
    for raw in data.split(b"\n"):
        start = _first_whole_line(raw)
        if start is None:
            batch.dropped.append((pos, raw))
        else:
            if start:
                batch.dropped.append((pos, raw[:start]))
            _parse_line(raw[start:].decode("utf-8", errors="replace"), batch)
        pos += len(raw) + 1
    if batch.dropped:  # the run keeps the report (tags are ingested with the batch)
        where = ", ".join(str(at) for at, _ in batch.dropped[:10])
        batch.tags["reprise.journal.dropped"] = f"{len(batch.dropped)} line(s) at byte {where}"
    return batch


def _first_whole_line(raw: bytes) -> int | None:
    """Where the longest well-formed line in ``raw`` starts (0: all of it), or None.

    A write cut short and followed by whole lines leaves ``<prefix><line>``: tabs
    appear only after a tag or between a metric's fields (JSON escapes them), so
    the line starts at a tag byte followed by a tab.
    """
    for i in range(len(raw)):
        if (i == 0 or raw[i + 1:i + 2] == b"\t") and _parses(raw[i:]):
            return i
    return None


def _parses(raw: bytes) -> bool:
    try:
        _parse_line(raw.decode("utf-8", errors="replace"), JournalBatch())
    except _BAD_LINE:
        return False
    return True


def _parse_line(line: str, batch: JournalBatch) -> None:
    tag, _, rest = line.partition("\t")
    if tag == "M":
        key, step, value, ts = rest.split("\t")
        batch.metrics.append((key, int(step), float(value), float(ts)))
        return
    payload = json.loads(rest)
    if not isinstance(payload, dict) or len(tag) != 1 or not "A" <= tag <= "Z":
        raise ValueError(f"not a journal line: {line[:80]!r}")
    if tag == "R":
        batch.header = payload
    elif tag == "P":
        batch.params.update(payload)
    elif tag == "T":
        batch.tags.update(payload)
    elif tag == "E":
        batch.environments.append(payload)
    elif tag == "A":
        batch.artifacts.append(payload)
    elif tag == "X":
        batch.steps.append(payload)
    elif tag == "S":
        batch.end = payload


@contextlib.contextmanager
def try_lock(path: Path, *, check: bool = True) -> Iterator[int | None]:
    """Yield a descriptor holding ``path``'s lock, or None when a live writer holds it
    or (``check``) the name no longer leads to the file locked: its holder moved it
    to ``done/`` between our open and our lock."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_APPEND)
    except FileNotFoundError:
        yield None
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield None
            return
        yield fd if not check or _same_file(fd, path) else None
    finally:
        os.close(fd)


def _same_file(fd: int, path: Path) -> bool:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)


def cut_torn_tail(fd: int) -> tuple[int, bytes]:
    """Cut a final line without ``\\n`` (a write cut short by a crash or a full disk)
    from the locked journal ``fd`` of a dead writer; return (its offset, its bytes)."""
    size = os.fstat(fd).st_size
    pos = size
    while pos > 0:
        start = max(0, pos - 65536)
        chunk = os.pread(fd, pos - start, start)
        nl = chunk.rfind(b"\n")
        if nl >= 0:
            pos = start + nl + 1
            break
        pos = start
    if pos == size:
        return size, b""
    torn = os.pread(fd, size - pos, pos)
    os.ftruncate(fd, pos)
    return pos, torn
