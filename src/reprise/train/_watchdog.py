"""SIGTERM that works even when the training thread is blocked in a collective.

The Trainer answers SIGTERM by checkpointing at the next step boundary and
exiting with 143. Python runs a signal handler only in the main thread, between
bytecodes; a main thread blocked inside a C++ collective (a gloo or NCCL
all-reduce whose peer hangs or is gone) never gets there, so the handler would
wait as long as the collective does: 30 minutes, gloo's default timeout.

The C-level handler, though, writes the signal number into the "wakeup" file
descriptor (:func:`signal.set_wakeup_fd`) the moment the signal arrives, in
whatever state the main thread is. A daemon thread reads it. After a SIGTERM it
watches the training's progress counter: as long as it moves (or a checkpoint
is being written), the graceful stop is under way and the thread waits; if it
stands still for the grace period — ``max(min_grace, 4 ×`` the mean time per
optimizer step up to the last step boundary; 60 s before the first step) — the
main thread is blocked, and the thread says so on stderr and ends the process
with ``os._exit(143)``. A second SIGTERM, more
than 2 s after the first, ends it at once. Nothing is written on that path: the
last checkpoint stands.

Every byte read is passed on to the wakeup fd that was set before, if any
(asyncio's, say), so installing the watchdog takes nothing away.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import threading
import time
from collections.abc import Callable

__all__ = ["SigtermWatchdog"]

EXIT_CODE = 128 + signal.SIGTERM
# SIGTERMs this close together are one request sent twice (SLURM signals every process of
# a step, torchrun passes it on to its workers): only a later one means "stop at once"
DUPLICATE_WINDOW = 2.0


class SigtermWatchdog:
    """Ends a process whose main thread cannot answer SIGTERM (see the module docstring).

    ``progress()`` returns something that changes whenever the main thread moves
    on (a counter of batches); ``busy()`` is true while it does slow work that is
    part of the graceful stop (writing a checkpoint); ``pace()`` gives the
    optimizer steps done and the ``time.monotonic()`` of the last step boundary,
    for the grace period. :meth:`start` must run in the main thread; :meth:`stop`
    puts the previous wakeup fd back.
    """

    def __init__(self, progress: Callable[[], object], *, busy: Callable[[], bool],
                 pace: Callable[[], tuple[int, float]], label: str = "",
                 min_grace: float = 3.0, factor: float = 4.0, first_step: float = 60.0,
                 duplicate_window: float = DUPLICATE_WINDOW) -> None:
        self.progress, self.busy, self.pace = progress, busy, pace
        self.first_step, self.duplicate_window = first_step, duplicate_window
        self.label, self.min_grace, self.factor = label, min_grace, factor
        self._fds: tuple[int, int] | None = None
        self._previous = -1
        self._thread: threading.Thread | None = None
        self._t0 = time.monotonic()
        self._steps0 = 0

    def start(self) -> bool:
        """Install the wakeup fd and the thread; False where that cannot be done."""
        if threading.current_thread() is not threading.main_thread() or self._fds is not None:
            return False
        r, w = os.pipe()
        os.set_blocking(w, False)
        try:
            self._previous = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        except ValueError:
            os.close(r)
            os.close(w)
            return False
        self._fds = (r, w)
        self._t0, self._steps0 = time.monotonic(), self.pace()[0]
        self._thread = threading.Thread(target=self._run, name="reprise-sigterm-watchdog",
                                        daemon=True)
        self._thread.start()
        return True

    def stop(self) -> None:
        if self._fds is None:
            return
        r, w = self._fds
        with contextlib.suppress(ValueError):
            signal.set_wakeup_fd(self._previous)
        with contextlib.suppress(OSError):
            os.write(w, b"\0")  # 0 is no signal: tells the thread to end
        if self._thread is not None:
            self._thread.join(timeout=5)
        os.close(r)
        os.close(w)
        self._fds, self._thread = None, None

    def grace(self) -> float:
        """Seconds without progress, after SIGTERM, taken to mean "blocked"."""
        steps, last = self.pace()
        if steps <= self._steps0:
            return max(self.min_grace, self.first_step)
        return max(self.min_grace, self.factor * (last - self._t0) / (steps - self._steps0))

    def _run(self) -> None:
        assert self._fds is not None
        r = self._fds[0]
        signalled_at: float | None = None
        grace = mark = 0.0
        seen: object = None
        while True:
            timeout = None if signalled_at is None else 0.1
            ready, _, _ = select.select([r], [], [], timeout)
            if ready:
                data = os.read(r, 256)
                if not data or 0 in data:
                    return
                self._forward(data)
                terms = data.count(signal.SIGTERM)
                if terms and signalled_at is not None \
                        and time.monotonic() - signalled_at > self.duplicate_window:
                    self._exit("a second SIGTERM")
                if terms and signalled_at is None:
                    signalled_at = mark = time.monotonic()
                    grace, seen = self.grace(), self.progress()
            if signalled_at is None:
                continue
            now, current = time.monotonic(), self.progress()
            if current != seen or self.busy():
                seen, mark = current, now
            elif now - mark >= grace:
                self._exit(f"SIGTERM, then no progress for {now - mark:.1f} s (blocked in a "
                           "collective, or a peer is gone)")

    def _forward(self, data: bytes) -> None:
        if data and self._previous >= 0:
            with contextlib.suppress(OSError):
                os.write(self._previous, data)

    def _exit(self, why: str) -> None:
        with contextlib.suppress(OSError):
            os.write(2, f"reprise.train{self.label}: {why}: exiting now with {EXIT_CODE}; no "
                        "checkpoint written, the last one stands\n".encode())
        os._exit(EXIT_CODE)
