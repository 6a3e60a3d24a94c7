"""Stopping every process a launch started, wherever it ended up in the process tree.

torchrun starts each worker in a session of its own, and a worker whose parent
died is re-parented to PID 1: neither a process group nor the parent's list of
children finds them all once something went wrong. So every process of a
launch carries a marker in its environment (``REPRISE_LAUNCH_ID``, inherited by
the workers and their data-loader processes), and stopping a launch means: the
launcher's own descendants plus every process of this user whose environment
holds the marker (psutil reads ``/proc/<pid>/environ``).

Stopping is SIGTERM to the top of the tree (the launcher and the ranks: they
checkpoint and exit, or their watchdog ends them), then SIGKILL to whatever of
the whole tree is left after the grace period.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterable
from typing import Any

__all__ = ["MARKER_ENV", "new_marker", "stop_tree", "tree"]

MARKER_ENV = "REPRISE_LAUNCH_ID"


def new_marker() -> str:
    return f"{os.getpid()}-{secrets.token_hex(8)}"


def _marked(marker: str) -> list[Any]:
    import psutil

    uid = os.getuid() if hasattr(os, "getuid") else None
    found = []
    for p in psutil.process_iter(["uids"]):
        try:
            uids = p.info.get("uids")
            if uid is not None and uids is not None and uids.real != uid:
                continue
            if p.environ().get(MARKER_ENV) == marker:
                found.append(p)
        except (psutil.Error, OSError):
            continue
    return found


def tree(root: int | None, marker: str) -> list[Any]:
    """The launch's live processes: ``root`` and its descendants, and every marked one."""
    import psutil

    procs: dict[int, Any] = {}
    if root is not None:
        with contextlib.suppress(psutil.Error):
            top = psutil.Process(root)
            procs[top.pid] = top
            for child in top.children(recursive=True):
                procs[child.pid] = child
    for p in _marked(marker):
        procs.setdefault(p.pid, p)
    procs.pop(os.getpid(), None)
    return list(procs.values())


def _signal(procs: Iterable[Any], kill: bool) -> None:
    import psutil

    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.kill() if kill else p.terminate()


def stop_tree(root: int | None, marker: str, grace: float) -> list[int]:
    """Stop the launch (see the module docstring); the PIDs that were still alive.

    SIGTERM goes to ``root`` (torchrun passes it on to the ranks; a rank sent it
    twice, by torchrun and by us, could take the second for "stop at once") and
    to marked processes whose parent is not part of the launch (ranks orphaned
    by a dead torchrun). The ranks' own children (data-loader workers) are left
    to them during the grace period, so that a rank can finish its checkpoint.
    Then SIGKILL to every survivor.
    """
    import psutil

    procs = tree(root, marker)
    pids = {p.pid for p in procs}
    top = []
    for p in procs:
        with contextlib.suppress(psutil.Error):
            if p.pid == root or p.ppid() not in pids:
                top.append(p)
    _signal(top, kill=False)
    interrupted = None
    try:
        _, alive = psutil.wait_procs(procs, timeout=grace)
    except KeyboardInterrupt as exc:  # a second Ctrl-C: no more waiting
        interrupted, alive = exc, procs
    # late arrivals (a process started while we waited) are swept too
    alive = list({p.pid: p for p in [*alive, *tree(root, marker)]}.values())
    if alive:
        _signal(alive, kill=True)
        psutil.wait_procs(alive, timeout=10)
    if interrupted is not None:
        raise interrupted
    return sorted(pids)
