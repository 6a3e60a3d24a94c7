"""The request log of one server: a sample of answered predictions (inputs, outputs,
version, latency, request id, time), kept off the request path.

* The request path only draws the sample (one random number and a per-second counter)
  and appends the request's already-checked columns and outputs (each column as a
  tuple, which the garbage collector soon stops walking) to a buffer bounded in rows,
  on the event loop: no lock, no I/O. When it is full
  the record is dropped and counted (``reprise_request_log_records{outcome="dropped"}``
  and a warning at most once a minute), never waited for.
* A flusher task hands the buffer, swapped out whole, to one writer thread every
  ``log_flush_s`` seconds or as soon as ``log_flush_rows`` rows wait; the thread
  builds one Arrow table per model version and stores it as a Parquet chunk
  (``reprise.store._request_log``). At shutdown, after the models drained, the rest
  is flushed: every answer acknowledged before a graceful stop is written. A SIGKILL
  loses what was still in the buffer, never part of a chunk.
* Columns named in ``log_exclude`` (PII) are taken out of a record when it is
  offered, so they never reach the buffer, let alone a file.
* Retention runs in the writer thread after a flush, at most every five minutes:
  chunks of the served models older than ``log_max_age_days`` go, then the oldest
  beyond ``log_max_mb`` per model (``reprise monitor prune`` does the same by hand).
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from reprise.core._reqlog_types import (
    INPUT_PREFIX,
    OUTPUT_PREFIX,
    request_id_problem,
)
from reprise.serve._http import HTTPError, Scope

if TYPE_CHECKING:
    import pyarrow as pa

    from reprise.serve._settings import Settings

__all__ = ["REQUEST_ID_HEADER", "RequestLogger", "RequestSink", "Sampler", "WorkspaceSink",
           "build_table", "create_request_logger"]

_logger = logging.getLogger(__name__)
REQUEST_ID_HEADER = b"x-request-id"
_WARN_EVERY_S = 60.0
_PRUNE_EVERY_S = 300.0


class RequestSink(Protocol):
    """Where chunks go. Called from the logger's one writer thread only."""

    def write(self, table: pa.Table, *, name: str, version: int, server: str,
              first_at: float, last_at: float, requests: int) -> None: ...

    def prune(self, names: list[str], max_age_s: float | None,
              max_bytes: int | None) -> None: ...


class WorkspaceSink:
    """Chunks into a workspace's artifact store, indexed in its metadata store."""

    def __init__(self, workspace: Any) -> None:
        self.workspace = workspace

    def write(self, table: pa.Table, *, name: str, version: int, server: str,
              first_at: float, last_at: float, requests: int) -> None:
        from reprise.store._request_log import write_request_chunk

        write_request_chunk(self.workspace, table, name=name, version=version, server=server,
                            first_at=first_at, last_at=last_at, requests=requests)

    def prune(self, names: list[str], max_age_s: float | None,
              max_bytes: int | None) -> None:
        from reprise.store._request_log import prune_request_log

        for name in names:
            report = prune_request_log(self.workspace, name=name, max_age_s=max_age_s,
                                       max_bytes=max_bytes)
            if report.chunks:
                _logger.info("request log of %s: pruned %d chunks (%d rows, %d bytes)",
                             name, len(report.chunks), report.rows, report.bytes_freed)


class Sampler:
    """Takes a ``rate`` share of requests, at most ``cap`` in any one clock second.

    ``clock`` and ``draw`` are parameters so that tests can drive them.
    """

    def __init__(self, rate: float, cap: int, *, clock: Callable[[], float] = time.monotonic,
                 draw: Callable[[], float] = random.random) -> None:
        self.rate, self.cap, self._clock, self._draw = rate, cap, clock, draw
        self._second = -1
        self._taken = 0

    def take(self) -> bool:
        if self.rate < 1.0 and self._draw() >= self.rate:
            return False
        second = int(self._clock())
        if second != self._second:
            self._second, self._taken = second, 0
        if self._taken >= self.cap:
            return False
        self._taken += 1
        return True


@dataclass(slots=True)
class _Record:
    name: str
    version: int
    request_id: str
    at: float
    latency_ms: float
    rows: int
    inputs: dict[str, Any]
    outputs: dict[str, Any]


class RequestLogger:
    """The request log of one server (see the module docstring).

    ``request_id`` and ``offer`` run on the event loop; ``run`` is the flusher task and
    ``close`` flushes what is left.
    """

    def __init__(self, sink: RequestSink, settings: Settings, server: str,
                 registry: Any = None, *, sampler: Sampler | None = None) -> None:
        self.sink, self.server = sink, server
        self.sampler = sampler or Sampler(settings.log_sample, settings.log_cap)
        self.exclude = frozenset(settings.log_exclude)
        self.capacity, self.flush_rows = settings.log_buffer, settings.log_flush_rows
        self.flush_s = settings.log_flush_s
        self.max_age_s = (settings.log_max_age_days * 86400.0
                          if settings.log_max_age_days is not None else None)
        self.max_bytes = (int(settings.log_max_mb * 1024 * 1024)
                          if settings.log_max_mb is not None else None)
        self.buffer: list[_Record] = []
        self.buffered_rows = 0  # the bound is on rows: a record holds its request's columns
        self.dropped = self.written = self.failed = 0
        self._prefix = os.urandom(6).hex()
        self._count = 0
        self._wake: asyncio.Event | None = None
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="reprise-request-log")
        self._last_warning = -_WARN_EVERY_S
        self._last_prune = -_PRUNE_EVERY_S
        self._names: set[str] = set()
        self._counter = _counter(registry) if registry is not None else None

    # -- the request path -------------------------------------------------------------
    def request_id(self, scope: Scope, body_id: str | None = None) -> str:
        """The client's ``x-request-id`` when it sent a valid one (else 400); else the
        inference request's own ``id`` (OIP, ``body_id``) when it is a valid request id,
        so that feedback can name a prediction by the id the client already has; else a
        new id unique across servers (a random per-process prefix and a counter: cheaper
        than a ULID on every request)."""
        return self.choose_id(self.header_id(scope), body_id)

    def choose_id(self, sent: str | None, body_id: str | None = None) -> str:
        """:meth:`request_id` once the header is read (``sent``, from :meth:`header_id`)."""
        if sent is not None:
            return sent
        if body_id is not None and request_id_problem(body_id) is None:
            return body_id
        self._count += 1
        return f"{self._prefix}-{self._count:x}"

    def header_id(self, scope: Scope) -> str | None:
        """The client's ``x-request-id``, checked (a bad one is a 400), or None."""
        for key, value in scope["headers"]:
            if key == REQUEST_ID_HEADER:
                text = bytes(value).decode("latin-1")
                problem = request_id_problem(text)
                if problem is not None:
                    raise HTTPError(400, f"the x-request-id header {problem}; send 1 to 128 "
                                    "visible ASCII characters, or none (the server gives "
                                    "one)", kind="bad_request")
                return text
        return None

    def offer(self, name: str, version: int, request_id: str, latency_s: float,
              inputs: dict[str, Any], rows: int, outputs: dict[str, Any]) -> None:
        """Log one answered request if the sample takes it; drop and count it when the
        buffer is full."""
        if not self.sampler.take():
            return
        if self.buffered_rows + rows > self.capacity:
            self._drop(name, version)
            return
        # each column as a tuple, not the request's list: the buffer holds up to a flush
        # interval of records (~1,000 at the default cap), and as lists they were most
        # of what a busy server's full garbage collections walked (tuples of numbers or
        # strings are untracked at the first collection they survive; issue 14)
        exclude = self.exclude
        inputs = {k: _compact(v) for k, v in inputs.items() if k not in exclude}
        outputs = {k: _compact(v) for k, v in outputs.items() if k not in exclude}
        self.buffer.append(_Record(name, version, request_id, time.time(), latency_s * 1000,
                                   rows, inputs, outputs))
        self.buffered_rows += rows
        if self.buffered_rows >= self.flush_rows and self._wake is not None:
            self._wake.set()

    def _drop(self, name: str, version: int) -> None:
        self.dropped += 1
        self._count_outcome(name, version, "dropped", 1)
        now = time.monotonic()
        if now - self._last_warning >= _WARN_EVERY_S:
            self._last_warning = now
            _logger.warning("request log: the buffer of %d rows is full (the store is "
                            "slower than the sampled traffic); dropping records, %d so far. "
                            "Lower --log-sample or --log-cap, or raise --log-buffer",
                            self.capacity, self.dropped)

    # -- flushing ---------------------------------------------------------------------
    async def run(self) -> None:
        """Flush every ``flush_s`` seconds, or sooner when ``flush_rows`` rows wait."""
        self._wake = asyncio.Event()
        # import pyarrow now, in the writer thread, rather than during the first flush
        # under traffic (its import holds the interpreter for a few hundred ms)
        await asyncio.get_running_loop().run_in_executor(self._writer, _import_arrow)
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), self.flush_s)
            except TimeoutError:
                pass
            self._wake.clear()
            await self.flush()

    async def flush(self) -> None:
        """Write what the buffer holds now (in the writer thread)."""
        if not self.buffer:
            return
        batch, self.buffer, self.buffered_rows = self.buffer, [], 0
        await asyncio.get_running_loop().run_in_executor(self._writer, self._write, batch)

    async def close(self, timeout: float | None = None) -> None:
        """Flush the rest, then stop the writer thread; a store that has not taken it
        within ``timeout`` seconds is given up on (logged), so a hung store cannot
        hold the shutdown forever."""
        pending = sum(r.rows for r in self.buffer)
        try:
            await asyncio.wait_for(self.flush(), timeout)
        except TimeoutError:
            _logger.error("request log: the store did not take the last %d rows within "
                          "%.0f s; they are lost", pending, timeout or 0)
            self._writer.shutdown(wait=False)
            return
        self._writer.shutdown(wait=True)

    def _write(self, batch: list[_Record]) -> None:
        groups: dict[tuple[str, int], list[_Record]] = {}
        for rec in batch:
            groups.setdefault((rec.name, rec.version), []).append(rec)
        for (name, version), records in groups.items():
            self._names.add(name)
            try:
                table = build_table(records)
                self.sink.write(table, name=name, version=version, server=self.server,
                                first_at=min(r.at for r in records),
                                last_at=max(r.at for r in records),
                                requests=len(records))
            except Exception as exc:  # a store that fails must not stop the server
                self.failed += len(records)
                self._count_outcome(name, version, "failed", len(records))
                _logger.error("request log: could not write %d records of %s v%d: %s",
                              len(records), name, version, exc, exc_info=exc)
                continue
            self.written += len(records)
            self._count_outcome(name, version, "written", len(records))
        self._maybe_prune()

    def _maybe_prune(self) -> None:
        if self.max_age_s is None and self.max_bytes is None:
            return
        now = time.monotonic()
        if now - self._last_prune < _PRUNE_EVERY_S:
            return
        self._last_prune = now
        try:
            self.sink.prune(sorted(self._names), self.max_age_s, self.max_bytes)
        except Exception as exc:
            _logger.error("request log: pruning failed: %s", exc, exc_info=exc)

    def _count_outcome(self, name: str, version: int, outcome: str, n: int) -> None:
        if self._counter is not None:
            self._counter.labels(name, str(version), outcome).inc(n)


def _import_arrow() -> None:
    import pyarrow.parquet  # noqa: F401


def _counter(registry: Any) -> Any:
    from prometheus_client import Counter

    return Counter("reprise_request_log_records", "Sampled requests of the request log, "
                   "by outcome: written (in a Parquet chunk), dropped (the buffer was full) "
                   "or failed (the store refused the chunk).", ["model", "version", "outcome"],
                   registry=registry)


def build_table(records: list[_Record]) -> pa.Table:
    """One row per input row: request id, row index, time, version, latency, then the
    ``input.`` and ``output.`` columns (null where a record lacks one)."""
    import pyarrow as pa

    rows = [r.rows for r in records]
    arrays: dict[str, Any] = {
        "request_id": pa.array([r.request_id for r in records for _ in range(r.rows)],
                               pa.string()),
        "row": pa.array([i for r in records for i in range(r.rows)], pa.int32()),
        "time": pa.array([r.at for r in records for _ in range(r.rows)], pa.float64()),
        "version": pa.array([r.version for r in records for _ in range(r.rows)], pa.int64()),
        "latency_ms": pa.array([r.latency_ms for r in records for _ in range(r.rows)],
                               pa.float64())}
    total = sum(rows)
    for prefix, dicts in ((INPUT_PREFIX, [r.inputs for r in records]),
                          (OUTPUT_PREFIX, [r.outputs for r in records])):
        for name in dict.fromkeys(k for d in dicts for k in d):
            arrays[prefix + name] = _column([d.get(name) for d in dicts], rows, total)
    return pa.table(arrays)


def _column(parts: list[Any], rows: list[int], total: int) -> pa.Array:
    """One column from each record's part (None: the record lacks it). Numeric parts
    are joined by numpy, with no Python object per value (per-value Python work is
    most of the writer's time); anything else goes through Python lists."""
    import numpy as np
    import pyarrow as pa

    if not any(p is None for p in parts):
        try:
            joined = np.concatenate(parts)
        except (ValueError, TypeError):
            joined = None
        if joined is not None and joined.ndim == 1 and len(joined) == total \
                and joined.dtype.kind in "biuf":
            return pa.array(joined)
    values: list[Any] = []
    for p, n in zip(parts, rows, strict=True):
        values.extend([None] * n if p is None else _as_list(p, n))
    return _arrow(values)


def _compact(values: Any) -> Any:
    return tuple(values) if type(values) is list else values


def _as_list(column: Any, rows: int) -> list[Any]:
    values = column.tolist() if hasattr(column, "tolist") else list(column)
    if len(values) != rows:  # not a per-row column: kept whole, once per row
        return [values] * rows
    return values  # type: ignore[no-any-return]


def _arrow(values: list[Any]) -> pa.Array:
    """An Arrow array of ``values``; a column of mixed types becomes its JSON text."""
    import json

    import pyarrow as pa

    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
        return pa.array([None if v is None else json.dumps(v, default=str) for v in values],
                        pa.string())


def create_request_logger(settings: Settings, workspace: Any, registry: Any,
                          ) -> RequestLogger | None:
    """The server's request log, or None when it is off or there is no workspace to
    write into (a source that is not the registry)."""
    if not settings.request_log or workspace is None:
        return None
    import socket

    from reprise.core import new_id, require

    require("pyarrow", None, "the request log")
    server = settings.server_name or f"{socket.gethostname()}:{os.getpid()}:{new_id()[:6]}"
    return RequestLogger(WorkspaceSink(workspace), settings, server, registry)

