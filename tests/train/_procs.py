"""Is a process gone, and which processes of a test's launch are still alive."""

from __future__ import annotations

from pathlib import Path

import psutil


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def survivors(folder: Path) -> list[int]:
    """Ranks (by the PIDs they wrote) and any process started with this folder in its
    command line (torchrun, the ranks) that are still alive."""
    pids = {int(p.read_text()) for p in folder.glob("pid-*")}
    for p in psutil.process_iter(["cmdline"]):
        if any(str(folder) in part for part in p.info["cmdline"] or ()):
            pids.add(p.pid)
    return sorted(pid for pid in pids if not gone(pid))
