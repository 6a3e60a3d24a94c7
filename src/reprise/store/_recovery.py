"""Recovery of the journals of dead writers (see ``_journal``).

Every command that opens the metadata store runs :func:`recover`. A journal is
recovered only by the holder of its lock who has checked that its name still
leads to the locked file (``try_lock``): a live writer holds the lock from the
journal's creation, and whoever moves a journal to ``done/`` holds it too. A torn
last line is cut (and reported, also as the run's tag ``reprise.journal.torn``)
before the end line of a killed run is appended.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from reprise.core._types import RunStatus
from reprise.store._journal import (
    SUFFIX,
    cut_torn_tail,
    event_line,
    read_journal,
    sweep_temp_journals,
    try_lock,
    write_whole,
)

if TYPE_CHECKING:
    from reprise.store._workspace import Workspace

__all__ = ["recover", "report_dropped"]

_logger = logging.getLogger("reprise.store._workspace")


def recover(ws: Workspace) -> list[str]:
    """Ingest journals whose writer has died; mark their runs killed. Return run ids.

    Never fails the command that called it: a journal that cannot be recovered
    now is reported (a warning) and left for the next command.
    """
    recovered: list[str] = []
    if not ws.journals_dir.is_dir():
        return recovered
    for path in sorted(ws.journals_dir.glob(f"*{SUFFIX}")):
        try:
            if _recover_path(ws, path):
                recovered.append(path.name[: -len(SUFFIX)])
        except Exception as exc:  # the journal stays; the next command retries
            _logger.warning("could not recover the run journal %s yet (%s: %s); it is kept "
                            "and the next command retries", path, type(exc).__name__, exc)
    with contextlib.suppress(OSError):
        sweep_temp_journals(ws.journals_dir)
    return recovered


def _recover_path(ws: Workspace, path: Path) -> bool:
    with try_lock(path) as fd:
        if fd is None:  # a live run (catch its rows up so readers see it) or moved
            with contextlib.suppress(FileNotFoundError):
                ws.ingest_journal(path)
            return False
        return _recover_one(ws, path, fd)


def _recover_one(ws: Workspace, path: Path, fd: int) -> bool:
    """Recover the journal of a dead writer; we hold its lock and it is at ``path``."""
    run_id = path.name[: -len(SUFFIX)]
    at, torn = cut_torn_tail(fd)
    note = b""
    if torn:
        _logger.warning("run %s: dropped a torn last journal line (%d bytes at byte %d of "
                        "%s: %r); every complete line is kept", run_id, len(torn), at,
                        path, torn[:80])
        note = event_line("T", {"reprise.journal.torn": f"{len(torn)} bytes at byte {at}"})
    if read_journal(path, 0, max_bytes=1 << 20).header is None:
        if os.fstat(fd).st_size:  # not a kill at start: say so before moving it aside
            _logger.warning("run %s: journal %s has no readable header; moved to done/ "
                            "without ingesting it", run_id, path)
        ws.archive_journal(path)
        return False
    killed = _has_no_end(path)
    if killed:
        note += ('S\t{"status":"%s","ended_at":%r,"error":"the process ended without '
                 'closing the run (killed or crashed)"}\n'
                 % (RunStatus.KILLED.value, time.time())).encode()
    if note:
        write_whole(fd, note, path)
    ws.ingest_journal(path)
    if killed:
        _logger.warning("run %s was killed; recovered its journal", run_id)
    ws.archive_journal(path)
    return killed


def _has_no_end(path: Path) -> bool:
    with open(path, "rb") as f:
        f.seek(max(0, os.fstat(f.fileno()).st_size - 65536))
        tail = f.read()
    return b"\nS\t" not in tail and not tail.startswith(b"S\t")


def report_dropped(run_id: str, path: Path, dropped: list[tuple[int, bytes]]) -> None:
    where = ", ".join(str(at) for at, _ in dropped[:10])
    _logger.warning("run %s: dropped %d malformed journal line(s) in %s (at byte %s; first: "
                    "%r), a write cut short by a crash or a full disk; the lines around them "
                    "are kept", run_id, len(dropped), path, where, dropped[0][1][:80])
