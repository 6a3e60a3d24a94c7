"""Runs: the tracking API.

A :class:`Run` writes every call to its journal first (see
``reprise.store._journal``) and lets a background thread ingest the journal
into the database in batches. That is what makes ``log_metric`` both fast and
crash-safe: the call costs one ``write(2)``, and a point whose call returned
survives a SIGKILL.
"""

from __future__ import annotations

import getpass
import json
import logging
import os
import socket
import threading
import time
import traceback
from pathlib import Path
from types import TracebackType
from typing import Any

from reprise.core._hashing import canonical_json
from reprise.core._ids import new_id
from reprise.core._types import ArtifactRecord, RunKind, RunStatus
from reprise.core.errors import (
    InvalidNameError,
    ParamConflictError,
    RunFinishedError,
)
from reprise.store._journal import JournalWriter, check_key, event_line, finish_write
from reprise.store._workspace import Workspace

__all__ = ["Run"]

_logger = logging.getLogger(__name__)


class Run:
    """One tracked run. Create it with :func:`reprise.start_run`.

    Example:
        >>> import reprise, tempfile
        >>> ws = reprise.init(tempfile.mkdtemp())
        >>> with reprise.start_run(name="demo", params={"lr": 0.1}, workspace=ws) as run:
        ...     run.log_metric("loss", 0.5)
        >>> ws.metadata.get_run(run.id).status.value
        'finished'
    """

    def __init__(
        self,
        workspace: Workspace,
        *,
        name: str,
        kind: RunKind = RunKind.RUN,
        parent_id: str | None = None,
        seed: int | None = None,
        env: tuple[str, dict[str, Any]] | None = None,
        system_metrics_interval: float | None = None,
        extra_header: dict[str, Any] | None = None,
        defer_ingest: bool = False,
        run_id: str | None = None,
    ) -> None:
        self.workspace = workspace
        self.id = run_id or new_id()
        self.name = name
        self.kind = RunKind(kind)
        self.parent_id = parent_id
        self.seed = seed
        self.status = RunStatus.RUNNING
        self._params: dict[str, Any] = {}
        self._steps: dict[str, int] = {}
        self._lock = threading.Lock()
        # the journal appears with its header in it, already locked (see _journal)
        self._writer = JournalWriter(workspace.journal_path(self.id),
                                     self._header_lines(env, extra_header or {}))
        self._fd, self._wlock = self._writer.fd, self._writer.lock  # for the hot path
        self._ingested = 0
        # defer_ingest: leave the whole journal for the next command that opens the
        # metadata store (it ingests finished journals first). A fully cached
        # pipeline run then never imports SQLAlchemy.
        self._defer_ingest = defer_ingest
        self._flusher = _Flusher(self, workspace.config.flush_interval)
        self._sampler, self._energy = _start_system(self, system_metrics_interval)
        if not defer_ingest:
            self._flusher.start()

    # -- lifecycle -------------------------------------------------------------------
    def _header_lines(self, env: tuple[str, dict[str, Any]] | None,
                      extra: dict[str, Any]) -> bytes:
        header: dict[str, Any] = {
            "id": self.id, "name": self.name, "kind": self.kind.value,
            "parent_id": self.parent_id, "seed": self.seed, "started_at": time.time(),
            "host": socket.gethostname(), "user": _user(), "pid": os.getpid(), **extra,
        }
        lines = b""
        if env is not None:
            env_hash, fp = env
            lines = event_line("E", {"hash": env_hash, "fingerprint": fp})
            git = fp.get("git") or {}
            header.update(env_hash=env_hash, git_commit=git.get("commit"),
                          git_dirty=git.get("dirty"))
        self.started_at = header["started_at"]
        return lines + event_line("R", header)

    def __enter__(self) -> Run:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc is None:
            self.end(RunStatus.FINISHED)
        elif isinstance(exc, KeyboardInterrupt):
            self.end(RunStatus.KILLED, error="interrupted (KeyboardInterrupt)")
        else:
            text = "".join(traceback.format_exception(exc_type, exc, tb))
            self.end(RunStatus.FAILED, error=text)

    def end(self, status: RunStatus | str = RunStatus.FINISHED, error: str | None = None) -> None:
        """End the run: final journal line, final ingestion, release the journal."""
        from reprise.tracking._api import _active

        with self._lock:
            if self.status.is_terminal:
                return
            self.status = RunStatus(status)
        _active.remove(self)
        energy = _stop_system(self._sampler, self._energy)
        self._writer.event("S", {"status": self.status.value, "ended_at": time.time(),
                                 "error": error, **energy})
        self._flusher.stop()
        if self._defer_ingest:
            self._writer.close()
            return
        if self._flush():  # archive while still holding the lock: no recovery reads it
            self.workspace.archive_journal(self._writer.path)
        self._writer.close()

    def _flush(self) -> bool:
        """Ingest what the journal holds; False (and a warning) if the database failed."""
        try:
            self._ingested = self.workspace.ingest_journal(self._writer.path,
                                                           start=self._ingested)
            return True
        except Exception as exc:  # the journal keeps everything; the next open retries
            _logger.warning("run %s: could not ingest the journal yet (%s); it is kept at %s "
                            "and will be ingested by the next command", self.id, exc,
                            self._writer.path)
            return False

    def _check_open(self) -> None:
        if self.status.is_terminal:
            raise RunFinishedError(
                f"run {self.id} ({self.name}) has ended ({self.status.value}); "
                "start a new run to log more."
            )

    # -- logging ---------------------------------------------------------------------
    def log_metric(self, key: str, value: float, step: int | None = None,
                   timestamp: float | None = None) -> None:
        """Append one metric point; durable against SIGKILL once this returns.

        Raises :class:`~reprise.core.errors.JournalWriteError` (and records nothing)
        when the journal cannot take the whole line, e.g. on a full disk.

        ``step`` defaults to one more than the key's last step (0 for the first).
        """
        if self.status is not RunStatus.RUNNING:
            self._check_open()
        steps = self._steps
        last = steps.get(key)
        if last is None:
            check_key(key)
            last = -1
        if step is None:
            step = last + 1
        steps[key] = step
        data = (f"M\t{key}\t{int(step)}\t{float(value)!r}\t"
                f"{time.time() if timestamp is None else timestamp!r}\n".encode())
        with self._wlock:  # JournalWriter.write, inlined: whole lines or JournalWriteError
            try:
                n = os.write(self._fd, data)
            except OSError:
                n = 0
            if n != len(data):
                finish_write(self._fd, data, n, self._writer.path)

    def log_metrics(self, metrics: dict[str, float], step: int | None = None,
                    timestamp: float | None = None) -> None:
        """Append several points at once (one ``write``)."""
        self._check_open()
        ts = time.time() if timestamp is None else timestamp
        rows = []
        for key, value in metrics.items():
            last = self._steps.get(key)
            if last is None:
                check_key(key)
                last = -1
            st = last + 1 if step is None else int(step)
            self._steps[key] = st
            rows.append((key, st, float(value), ts))
        self._writer.metrics(rows)

    def log_param(self, key: str, value: Any) -> None:
        """Record a parameter (JSON-able). Logging it again with another value is an error."""
        self.log_params({key: value})

    def log_params(self, params: dict[str, Any]) -> None:
        self._check_open()
        fresh: dict[str, Any] = {}
        for key, value in params.items():
            check_key(key, "param name")
            try:
                text = canonical_json(value)
            except TypeError as exc:
                raise InvalidNameError(f"param {key!r}: {exc}") from exc
            if key in self._params and canonical_json(self._params[key]) != text:
                raise ParamConflictError(
                    f"param {key!r} is already {self._params[key]!r} in run {self.id}; params "
                    f"cannot change (got {value!r}). Log it under another name or start a new run."
                )
            fresh[key] = json.loads(text)
        self._params.update(fresh)
        if fresh:
            self._writer.event("P", fresh)

    @property
    def params(self) -> dict[str, Any]:
        return dict(self._params)

    def set_tag(self, key: str, value: Any) -> None:
        self.set_tags({key: value})

    def set_tags(self, tags: dict[str, Any]) -> None:
        self._check_open()
        for key in tags:
            check_key(key, "tag name")
        self._writer.event("T", {k: str(v) for k, v in tags.items()})

    def log_artifact(self, obj: Any, name: str | None = None) -> ArtifactRecord:
        """Store ``obj`` (or the file/folder at a path) by content; record it under ``name``.

        A ``str`` or ``os.PathLike`` is a path; anything else is stored through its
        materializer (numpy, pandas, Arrow, JSON-able values, bytes).
        """
        from reprise.store._artifacts import validate_artifact_name
        from reprise.store._materializers import save_object

        self._check_open()
        if isinstance(obj, (str, os.PathLike)):
            path = Path(obj)
            if not path.exists():
                raise InvalidNameError(f"log_artifact: no file or folder at {str(path)!r}.")
            obj, name = path, name or path.name
        if name is None:
            raise InvalidNameError(
                f"log_artifact needs a name for a {type(obj).__name__}, e.g. "
                "run.log_artifact(obj, 'predictions.parquet')."
            )
        validate_artifact_name(name)
        record = save_object(self.workspace.artifacts, obj)
        self.record_artifact(name, {**record.to_dict(), "created": record.created})
        return record

    def record_artifact(self, name: str, artifact: dict[str, Any]) -> None:
        """Record an artifact already in the store (``hash``, ``size``, ``kind``,
        ``materializer``, ``meta``) under ``name`` in this run."""
        from reprise.store._artifacts import validate_artifact_name

        self._check_open()
        validate_artifact_name(name)
        self._writer.event("A", {"name": name, "created": time.time(), **artifact})

    def record_step(self, record: dict[str, Any]) -> None:
        """Journal one pipeline step run with its lineage edges.

        ``record`` holds ``id``, ``step_name``, ``status``, ``cache_key`` and lists
        ``inputs`` / ``outputs`` of ``{"name", "hash", ...}`` (artifact fields when
        the artifact is new to the database, ``source`` for raw input files).
        """
        self._check_open()
        self._writer.event("X", record)


class _Flusher(threading.Thread):
    """Ingests the journal every ``interval`` seconds while the run is live."""

    def __init__(self, run: Run, interval: float) -> None:
        super().__init__(name=f"reprise-flush-{run.id[-6:]}", daemon=True)
        self.run_ref = run
        self.interval = interval
        self._stop_event = threading.Event()

    def run(self) -> None:
        if self.interval <= 0:
            return
        while not self._stop_event.wait(self.interval):
            r = self.run_ref
            if r._writer.size() > r._ingested:
                r._flush()

    def stop(self) -> None:
        self._stop_event.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join()


def _start_system(run: Run, interval: float | None) -> tuple[Any, Any]:
    from reprise.tracking._energy import EnergyMeter
    from reprise.tracking._system import SystemSampler

    if interval is None:
        interval = run.workspace.config.system_metrics_interval
    energy = EnergyMeter()
    energy.start()
    sampler = None
    if interval > 0:
        def sink(values: dict[str, float], step: int) -> None:
            if not run.status.is_terminal:
                run.log_metrics(values, step=step)
        sampler = SystemSampler(sink, interval=interval)
        sampler.start()
    return sampler, energy


def _stop_system(sampler: Any, energy: Any) -> dict[str, Any]:
    if sampler is not None:
        sampler.stop()
    try:
        joules = float(energy.read())
    except Exception as exc:  # an unreadable counter must not fail the run
        _logger.warning("energy meter failed: %s", exc)
        return {}
    finally:
        energy.close()
    return {"energy_joules": joules, "energy_source": energy.source}


def _user() -> str | None:
    try:
        return getpass.getuser()
    except Exception:  # no user name in some containers
        return None
