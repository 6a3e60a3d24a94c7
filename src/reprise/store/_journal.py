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

Line format (UTF-8, ``\\n``-terminated; a final line without ``\\n`` is a write
cut short by a kill and is ignored)::

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
import fcntl
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reprise.core.errors import InvalidNameError

__all__ = [
    "JournalBatch",
    "JournalWriter",
    "check_key",
    "read_journal",
    "try_lock",
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

    Not thread-safe for interleaving *auto-numbered* steps of one key from two
    threads; each ``write`` of a whole line is atomic with respect to others.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self._fd)
            raise
        self.closed = False

    def metric(self, key: str, step: int, value: float, timestamp: float) -> None:
        os.write(self._fd, f"M\t{key}\t{step}\t{value!r}\t{timestamp!r}\n".encode())

    def metrics(self, rows: list[tuple[str, int, float, float]]) -> None:
        data = "".join(f"M\t{k}\t{s}\t{v!r}\t{t!r}\n" for k, s, v, t in rows)
        os.write(self._fd, data.encode())

    def event(self, tag: str, payload: dict[str, Any]) -> None:
        line = f"{tag}\t{json.dumps(payload, separators=(',', ':'), allow_nan=True)}\n"
        os.write(self._fd, line.encode())

    def size(self) -> int:
        return os.fstat(self._fd).st_size

    def close(self) -> None:
        """Release the lock and close; the file stays for ingestion/archival."""
        if not self.closed:
            self.closed = True
            os.close(self._fd)


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

    @property
    def empty(self) -> bool:
        return not (self.header or self.params or self.tags or self.environments
                    or self.artifacts or self.metrics or self.steps or self.end)


def read_journal(path: Path, offset: int = 0, *, max_bytes: int = 64 << 20) -> JournalBatch:
    """Parse complete lines of ``path`` from byte ``offset`` (at most ``max_bytes``)."""
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read(max_bytes)
    last = data.rfind(b"\n")
    batch = JournalBatch(end_offset=offset + last + 1 if last >= 0 else offset)
    if last < 0:
        return batch
    # split("\n"), not splitlines(): keys may contain U+0085 or U+2028, which
    # splitlines() would treat as line breaks.
    for line in data[:last].decode("utf-8", errors="replace").split("\n"):
        _parse_line(line, batch)
    return batch


def _parse_line(line: str, batch: JournalBatch) -> None:
    tag, _, rest = line.partition("\t")
    if tag == "M":
        key, step, value, ts = rest.split("\t")
        batch.metrics.append((key, int(step), float(value), float(ts)))
        return
    payload = json.loads(rest)
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
def try_lock(path: Path) -> Iterator[int | None]:
    """Yield a descriptor holding ``path``'s lock, or None when a live writer holds it."""
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
        yield fd
    finally:
        os.close(fd)
