"""Worker processes that end with their parent.

A worker blocked on a pipe from its parent does not always notice the parent's
death: a ``multiprocessing`` queue's child holds both ends of the pipe, so a read
never sees end-of-file, and the worker (with its ``resource_tracker``) waits forever.
A worker calls :func:`exit_with_parent` first thing. On Linux the kernel then sends
it SIGKILL when the parent dies (``prctl(PR_SET_PDEATHSIG)``, through ctypes); on
other systems, or where prctl is refused, a daemon thread polls ``os.getppid()``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
import threading
import time

__all__ = ["exit_with_parent"]

_PR_SET_PDEATHSIG = 1
_POLL_SECONDS = 0.5


def exit_with_parent(parent_pid: int) -> None:
    """End this process (exit code 1, or SIGKILL) as soon as ``parent_pid`` is gone.

    ``parent_pid`` is the pid the parent had when it started this process: checking
    it after arming the signal closes the window in which the parent died first.
    """
    if not _arm_pdeathsig():
        threading.Thread(target=_watch, args=(parent_pid,), name="reprise-parent-watch",
                         daemon=True).start()
    if os.getppid() != parent_pid:
        os._exit(1)


def _arm_pdeathsig() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return int(libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _watch(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(_POLL_SECONDS)
    os._exit(1)
