"""Routing a followed alias while its rollout runs: the split, the outcomes, the shadow.

A :class:`Split` sits on the model table for ``NAME@ALIAS`` while a rollout of that
alias runs. Each request for ``/v1/models/NAME/predict`` (or ``/v2/.../infer``) is given
to the stable version or to the candidate by :meth:`Split.pick`:

* sticky: a request carrying a key (a header, or an input column of its first row) is
  hashed with the rollout's id into one of 10,000 slots, and slots below the
  candidate's weight (in hundredths of a percent) go to the candidate. A key therefore
  reaches the same version for the rollout's whole life, and as the weight grows keys
  only ever move from the stable version to the candidate, never back;
* a request without a key gets a random draw.

:class:`Outcomes` adds up, per rollout, version and time bucket, what each answer was
(request, 5xx error, latency in the fixed histogram, the output's class or score bin):
plain counts on the event loop, flushed to the metadata store by the server's rollout
controller (``_rollout_server``). :meth:`Split.record` counts a live answer there and in
the version's ``/metrics`` series at once, through the version's :class:`_Lane`. A
:class:`Shadow` copies the stable version's requests to the candidate off the request
path through a bounded queue (full: the copy is dropped and counted) and compares the
answers, in batches that yield to live traffic (:class:`ShadowGate`).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import random
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from itertools import chain
from operator import attrgetter, itemgetter
from typing import Any

from reprise.core._rollout_types import (
    BucketRow,
    RolloutRecord,
    bucket_of,
    bucket_seconds,
    empty_bucket,
    latency_index,
)
from reprise.registry import Field
from reprise.serve._batcher import Closed, Overloaded, PredictFailed, Result
from reprise.serve._finite import check_inputs, check_outputs
from reprise.serve._http import HTTPError
from reprise.serve._metrics import Metrics
from reprise.serve._models import ServedModel

__all__ = ["SLOTS", "Outcomes", "Shadow", "ShadowGate", "Split", "keyer",
           "output_keys", "payload_key", "sticky_slot"]

_logger = logging.getLogger(__name__)
SLOTS = 10_000  # a weight's resolution: 0.01 %
_SCORE_BINS = 20  # bins of a score or regression output with a known range
_SHADOW_BATCH = 256  # most copies handed to the candidate at once (ShadowGate may give fewer)
_SHADOW_NAP = 0.02  # least sleep of a shadow waiting for its budget (seconds)
# The shadow's default share of the server's CPU time (ShadowGate). What the gate charges
# (the candidate thread's CPU time, the shadow's own time on the event loop) is about a
# third to a half of what a shadowed server measurably spends more per compared copy
# (bench_rollout: ~11 us charged against ~25-30 us more CPU per copy; the rest is the
# second busy thread itself: the interpreter handed back and forth, the event loop's
# system calls slowed down), so 2 % charged keeps the whole cost near 5 %.
_SHADOW_SHARE = 0.02


def sticky_slot(rollout_id: str, key: bytes) -> int:
    """The slot (0..9999) of ``key`` in this rollout: BLAKE2b of the rollout id and the
    key, so the same key lands in the same slot for the rollout's life and in unrelated
    slots in another rollout (a key is not always among the first to try candidates)."""
    digest = hashlib.blake2b(key, digest_size=8, key=rollout_id.encode()[:64]).digest()
    return int.from_bytes(digest, "big") % SLOTS


def payload_key(payload: Any, column: str, oip: bool) -> bytes | None:
    """The value of input ``column`` in the first row of a parsed request body (a /v1
    body: records or columns; an OIP body: its tensors), or None when absent."""
    value: Any = None
    try:
        if oip:
            for tensor in payload.get("inputs") or ():
                if isinstance(tensor, dict) and tensor.get("name") == column:
                    data = tensor.get("data")
                    value = data[0] if isinstance(data, list) and data else None
                    break
        elif isinstance(payload, list):
            value = payload[0].get(column) if payload and isinstance(payload[0], dict) else None
        elif isinstance(payload, dict):
            if isinstance(payload.get("records"), list) and payload["records"]:
                first = payload["records"][0]
                value = first.get(column) if isinstance(first, dict) else None
            elif isinstance(payload.get("columns"), dict):
                values = payload["columns"].get(column)
                value = values[0] if isinstance(values, list) and values else None
    except (AttributeError, TypeError):  # a malformed body: its check will say what is wrong
        return None
    return None if value is None else str(value).encode()


def output_keys(model: ServedModel, outputs: dict[str, list[Any]]) -> list[str]:
    """What each row answered, as the prediction-shift check compares it: the class label
    of a classifier (or of any non-float output), else the score's bin (``bin:<i>``).

    The output compared is ``prediction`` when there is one, else the first. Bins: 20 equal
    bins over the output's range when the signature knows it, else quarter-octave bins of
    ``sign(v) * log2(1 + |v|)``, which need no range and suit any scale; both versions of
    a rollout bin alike, which is all the comparison needs."""
    return keyer(model)(outputs)


def keyer(model: ServedModel) -> Callable[[dict[str, list[Any]]], list[str]]:
    """:func:`output_keys` for ``model``'s signature, with the signature read once (the
    split calls it on every answer)."""
    out_field = _primary(model)
    if out_field is None:
        return lambda outputs: []
    name = out_field.name
    if out_field.dtype != "float" or model.signature.task in ("binary", "multiclass"):
        return lambda outputs: [str(v) for v in outputs.get(name) or ()]
    return lambda outputs: [_bin(v, out_field) for v in outputs.get(name) or ()]


def _primary(model: ServedModel) -> Field | None:
    outs = model.signature.outputs
    if not outs:
        return None
    return next((f for f in outs if f.name == "prediction"), outs[0])


def _bin(value: Any, out_field: Field) -> str:
    if isinstance(value, list):  # a tensor output per row: its first value stands for it
        value = value[0] if value else None
    if not isinstance(value, int | float) or not math.isfinite(value):
        return "bin:none"
    lo, hi = out_field.min, out_field.max
    if lo is not None and hi is not None and hi > lo:
        i = math.floor((value - lo) / (hi - lo) * _SCORE_BINS)
        return f"bin:{min(max(i, -1), _SCORE_BINS)}"
    return f"bin:{math.floor(4 * math.copysign(math.log2(1 + abs(value)), value))}"


class Outcomes:
    """Per (rollout, version, bucket) sums of this server's answers, kept on the event
    loop (no lock: only the loop touches them) until the controller takes them."""

    def __init__(self, server: str) -> None:
        self.server = server
        self.gen = 0  # one more at each take or put_back: a _Lane's row is stale then
        self._rows: dict[tuple[str, int, int], BucketRow] = {}
        # (rollout id, version) -> (bucket start, bucket end, its row): the row every
        # answer of this bucket adds to, found without recomputing the bucket (the
        # request path calls this once per answer)
        self._current: dict[tuple[str, int], tuple[float, float, BucketRow]] = {}

    def _row(self, rollout: RolloutRecord, version: int, now: float | None = None) -> BucketRow:
        now = time.time() if now is None else now
        current = self._current.get((rollout.id, version))
        if current is not None and current[0] <= now < current[1]:
            return current[2]
        size = bucket_seconds(rollout.interval_s)
        bucket = bucket_of(now, size)
        key = (rollout.id, version, bucket)
        row = self._rows.get(key)
        if row is None:
            row = self._rows[key] = empty_bucket(rollout.id, version, bucket, self.server)
        # (a time within a rounding error of a bound may go to the bucket beside it)
        self._current[(rollout.id, version)] = (bucket * size, (bucket + 1) * size, row)
        return row

    def lane_row(self, rollout: RolloutRecord, lane: _Lane, now: float) -> BucketRow:
        """The row ``lane``'s answers at ``now`` add to, kept on the lane until the bucket
        ends or the rows are taken."""
        row = self._row(rollout, lane.version, now)
        lane.start, lane.end, _ = self._current[(rollout.id, lane.version)]
        lane.gen, lane.row = self.gen, row
        return row

    def request(self, rollout: RolloutRecord, version: int, *, error: bool, seconds: float,
                outputs: Iterable[str] = ()) -> None:
        """Count one answer of ``version``: its latency and outputs; a 5xx as an error."""
        row = self._row(rollout, version)
        row.requests += 1
        if error:
            row.errors += 1
        row.latency[latency_index(seconds * 1000)] += 1
        counts = row.outputs
        for k in outputs:
            counts[k] = counts.get(k, 0) + 1

    def add(self, rollout: RolloutRecord, version: int, *, requests: int, seconds: float,
            outputs: Mapping[str, int]) -> None:
        """Count ``requests`` answers of ``version`` that took ``seconds`` each, with no
        error, and their outputs' counts (a shadow's batch)."""
        row = self._row(rollout, version)
        row.requests += requests
        row.latency[latency_index(seconds * 1000)] += requests
        counts = row.outputs
        for k, n in outputs.items():
            counts[k] = counts.get(k, 0) + n

    def shadow(self, rollout: RolloutRecord, version: int, *, compared: int = 0,
               agreed: int = 0, dropped: int = 0) -> None:
        row = self._row(rollout, version)
        row.shadow_compared += compared
        row.shadow_agreed += agreed
        row.shadow_dropped += dropped

    def take(self) -> list[BucketRow]:
        """Everything counted since the last take (the caller stores it)."""
        rows, self._rows = list(self._rows.values()), {}
        self._current.clear()
        self.gen += 1
        return rows

    def put_back(self, rows: list[BucketRow]) -> None:
        """Rows whose write failed: counted again with what arrived since."""
        for row in rows:
            key = (row.rollout_id, row.version, row.bucket)
            old = self._rows.get(key)
            self._rows[key] = row if old is None else old.merge(row)
        self._current.clear()
        self.gen += 1


@dataclass(slots=True, eq=False)
class _Lane:
    """Where one version of a split counts its live answers, found with no lookup per
    answer: its outcome row of the moment (valid while ``gen`` is the outcomes' and the
    clock is in ``[start, end)``) and its ``/metrics`` series (made on first use).

    Why: a rollout's bookkeeping runs on the event loop for every answer, and at
    thousands of answers a second each microsecond is a share of the server (issue 14:
    a 10 % canary must keep 95 % of a plain server's throughput); counted separately,
    the row and the series cost two lookups, two bisections and twice the calls."""

    version: int
    role: str
    gen: int = -1
    start: float = 0.0
    end: float = 0.0
    row: BucketRow | None = None
    series: Any = None


@dataclass(eq=False)
class Split:
    """The stable version and the candidate of one running rollout, and how to choose.

    With ``metrics``, :meth:`record` counts the live answers in the versions'
    ``reprise_rollout_*`` series as well."""

    rollout: RolloutRecord
    stable: ServedModel
    candidate: ServedModel
    outcomes: Outcomes
    key_header: bytes | None = None
    key_column: str | None = None
    shadow: Shadow | None = None
    metrics: Metrics | None = None
    _threshold: int = field(default=0, repr=False)
    output_keys: Callable[[dict[str, list[Any]]], list[str]] = field(init=False, repr=False)
    _lanes: tuple[_Lane, _Lane] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._threshold = _threshold(self.rollout.weight)
        # both versions' outputs are read by the stable version's signature: comparable
        self.output_keys = keyer(self.stable)
        self._lanes = (_Lane(self.stable.version, "stable"),
                       _Lane(self.candidate.version, "candidate"))

    @property
    def weight(self) -> float:
        return self.rollout.weight

    def update(self, rollout: RolloutRecord) -> None:
        """Take the rollout's new weight, phase and counters (a decision was applied)."""
        self.rollout = rollout
        self._threshold = _threshold(rollout.weight)

    def key_of(self, headers: Iterable[tuple[bytes, bytes]], payload: Any,
               oip: bool) -> bytes | None:
        if self.key_column is not None:
            return payload_key(payload, self.key_column, oip)
        if self.key_header is not None:
            for name, value in headers:
                if name == self.key_header:
                    return value
        return None

    def route(self, headers: Iterable[tuple[bytes, bytes]], payload: Any,
              oip: bool) -> ServedModel:
        """The version that answers this request (its key is looked for only when the
        candidate takes some live traffic, and not all of it)."""
        if 0 < self._threshold < SLOTS:
            return self.pick(self.key_of(headers, payload, oip))
        return self.pick(None)  # all to one version: no key needed, no draw made

    def pick(self, key: bytes | None) -> ServedModel:
        """The version that answers a request with this key (None: a random draw)."""
        if self._threshold <= 0:
            return self.stable
        if self._threshold >= SLOTS:
            return self.candidate
        if key is None:  # the same draw as a random slot below the threshold, cheaper
            return self.candidate if random.random() * SLOTS < self._threshold else self.stable
        return self.candidate if sticky_slot(self.rollout.id, key) < self._threshold \
            else self.stable

    def record(self, model: ServedModel, status: int, seconds: float,
               result: Result | None) -> list[str] | None:
        """Count an answer given by one of the split's versions: a 5xx, or an answer
        refused after the model ran (a non-finite output), is an error; a 4xx before the
        model ran is the client's and not counted. The answer's :func:`output_keys`
        (None when not counted; a shadow compares them with the candidate's)."""
        if model is self.stable:
            lane = self._lanes[0]
        elif model is self.candidate:
            lane = self._lanes[1]
        else:
            return None
        if result is None and 400 <= status < 500:
            return None
        i = latency_index(seconds * 1000)  # the row's and the series' bucket
        now = time.time()
        row = lane.row
        if row is None or lane.gen != self.outcomes.gen or not lane.start <= now < lane.end:
            row = self.outcomes.lane_row(self.rollout, lane, now)
        row.requests += 1
        row.latency[i] += 1
        series = lane.series
        if series is None and self.metrics is not None:
            series = lane.series = self.metrics.rollout_series(
                self.rollout.id, model.name, lane.version, lane.role, "live")
        if series is not None:
            series.requests += 1
            series.seconds += seconds
            series.buckets[i] += 1
        if status != 200 or result is None:
            row.errors += 1
            if series is not None:
                series.errors += 1
            return []
        keys = self.output_keys(result.outputs)
        counts = row.outputs
        for k in keys:
            counts[k] = counts.get(k, 0) + 1
        return keys


def _threshold(weight: float) -> int:
    return max(0, min(SLOTS, round(weight * SLOTS / 100)))


@dataclass(slots=True)
class _Copy:
    """A queued copy of a request, held so that the cyclic garbage collector has almost
    nothing to walk: the column names and each column's values as tuples (a JSON body's
    lists of numbers or strings become tuples of atoms, which CPython stops tracking at
    the first collection they survive), and the stable answer's keys as a tuple. Only
    this object stays tracked; as a dict of lists a single-row copy of a 20-column
    request was 22 tracked containers, and a full queue added thousands to every full
    collection of a busy server (issue 14). :attr:`columns` gives the lists back."""

    names: tuple[str, ...]
    values: tuple[Any, ...]  # per column: a tuple (was a list), or as given (an array)
    rows: int
    stable: tuple[str, ...]  # the stable answer's output_keys, compared with the candidate's

    @classmethod
    def of(cls, columns: Mapping[str, Any], rows: int, stable: Iterable[str]) -> _Copy:
        return cls(tuple(columns), tuple(map(_compact, columns.values())), rows,
                   tuple(stable))

    @property
    def columns(self) -> dict[str, Any]:
        """The copy's input columns as the request had them (lists, arrays)."""
        return {name: list(v) if type(v) is tuple else v
                for name, v in zip(self.names, self.values, strict=True)}


def _compact(values: Any) -> Any:
    return tuple(values) if type(values) is list else values


class ShadowGate:
    """When the shadow may hand the candidate a batch of copies: the yielding rule.

    The candidate's predictions run in the same process as the stable version's, so on
    a busy server they take the interpreter (the GIL) and the cores from live answers.
    The gate keeps them out of the way:

    * a token bucket of seconds: the shadow earns ``share`` seconds per second of the
      clock (up to ``burst_s`` saved) and spends what each batch cost, the candidate's
      predict calls (their thread's CPU time) and the shadow's own bookkeeping on the
      event loop. A batch starts only with the balance positive, so over any stretch
      the shadow takes at most about ``share`` of the clock's time plus one batch. The
      server's clock is its process's CPU time, not the wall's: on a machine whose
      cores are shared with other work the shadow's budget shrinks with the server's
      own (5 % of the wall's time could be most of what the server gets), and a quiet
      server's copies wait until live work pays for them (batches grow meanwhile);
    * a batch starts only while the stable version has nothing queued or running.

    Copies that wait meanwhile stay in the bounded queue; when it is full new ones are
    dropped and counted (``shadow_dropped``; the analysis says "insufficient data" rather
    than pass on too few comparisons). Pure: the clock and the load are arguments.
    """

    def __init__(self, share: float = _SHADOW_SHARE, burst_s: float = 0.02,
                 now: float = 0.0) -> None:
        if not 0 < share <= 1 or burst_s <= 0:
            raise ValueError(f"share must be in (0, 1] and burst_s positive; got {share}, "
                             f"{burst_s}")
        self.share, self.burst_s = share, burst_s
        self._tokens, self._at = burst_s, now

    def _refill(self, now: float) -> None:
        self._tokens = min(self.burst_s, self._tokens + max(0.0, now - self._at) * self.share)
        self._at = max(self._at, now)

    def wait(self, now: float, stable_busy: bool) -> float:
        """Seconds until a batch may start (0: now). The stable version being busy gives
        ``inf``: wait until it is idle."""
        self._refill(now)
        if self._tokens <= 0:
            return -self._tokens / self.share + 1e-4
        return math.inf if stable_busy else 0.0

    def spend(self, seconds: float, now: float) -> None:
        """A batch cost ``seconds`` of the server's time."""
        self._refill(now)
        self._tokens -= seconds

    def batch_rows(self, row_cost_s: float | None, most: int) -> int:
        """Rows in the next batch: as many as one burst pays for (by the cost per row seen
        so far), so one batch never holds the interpreter long; 1 to ``most``."""
        if not row_cost_s:
            return most
        return max(1, min(most, int(self.burst_s / row_cost_s)))


class Shadow:
    """Copies of the stable version's requests for the candidate, compared, never returned.

    :meth:`offer` is all the request path does: an append to a bounded queue, or a count
    when it is full. One worker on the event loop takes the queued copies in batches,
    when :class:`ShadowGate` lets it (the shadow yields to live traffic), hands them to
    the candidate's own batcher all at once (its worker thread runs them as a few large
    predict calls: the per-call cost is paid once per batch, not per copy), and compares
    its answers with the stable version's: they agree when every row's primary output is
    the same class (a classifier), or falls in the same score bin (:func:`output_keys`: a
    regression or a score, which a retrained model never reproduces to the last digit).
    Copies the candidate's batcher sheds (its latency budget) count as dropped too.
    """

    def __init__(self, split: Split, metrics: Metrics, capacity: int,
                 gate: ShadowGate | None = None,
                 clock: Callable[[], float] = time.process_time) -> None:
        self.split, self.metrics, self.capacity, self._clock = split, metrics, capacity, clock
        self.gate = gate if gate is not None else ShadowGate(now=clock())
        self._queue: deque[_Copy] = deque()
        self._wake = asyncio.Event()
        self.dropped = 0
        self._unreported = 0  # drops not yet in the outcomes and metrics
        self._row_cost: float | None = None  # seconds per copied row, moving average
        self._task = asyncio.get_running_loop().create_task(self._work())

    def offer(self, columns: dict[str, Any], rows: int, stable: Result,
              keys: list[str] | None = None) -> None:
        """Queue a copy of a request the stable version answered with ``stable``
        (``keys``: its :func:`output_keys`, when the caller has them already)."""
        if len(self._queue) >= self.capacity:
            self.dropped += 1
            self._unreported += 1
            return
        # nothing else here: whether copies can be merged is checked per batch (_merge)
        self._queue.append(_Copy.of(columns, rows, self.split.output_keys(stable.outputs)
                                    if keys is None else keys))
        if not self._wake.is_set():
            self._wake.set()

    def _report_drops(self, more: int = 0) -> None:
        self.dropped += more
        n, self._unreported = self._unreported + more, 0
        if n:
            cand = self.split.candidate
            self.split.outcomes.shadow(self.split.rollout, cand.version, dropped=n)
            self.metrics.shadow_copy(cand.name, str(cand.version), "dropped", n)

    async def _work(self) -> None:
        stable = self.split.stable.batcher
        while True:
            self._report_drops()
            if not self._queue:
                self._wake.clear()
                await self._wake.wait()
                continue
            wait = self.gate.wait(self._clock(), stable.busy)
            if wait == math.inf:
                await stable.drain(1.0)
                continue
            if wait > 0:  # (in the clock's seconds: CPU ones pass slower than the wall's)
                await asyncio.sleep(max(wait, _SHADOW_NAP))
                continue
            n = self.gate.batch_rows(self._row_cost, _SHADOW_BATCH)
            batch = [self._queue.popleft() for _ in range(min(n, len(self._queue)))]
            try:
                await self._run(batch)
            except Closed:
                return

    async def _run(self, batch: list[_Copy]) -> None:
        """Hand ``batch`` to the candidate, compare, count; charge the gate its cost (the
        candidate thread's CPU time and this loop's)."""
        cand = self.split.candidate
        cpu_before, t0 = cand.batcher.cpu_s, time.perf_counter()
        rows = sum(c.rows for c in batch) or 1
        loop_s: float | None = None
        try:
            loop_s = await self._merged(batch) if len(batch) > 1 else None
            if loop_s is None:  # one copy, inputs not lists, or a failure to pin on a copy
                loop_s = await self._each(batch)
        finally:
            cost = loop_s if loop_s is not None else time.perf_counter() - t0
            cost += cand.batcher.cpu_s - cpu_before
            self._row_cost = cost / rows if self._row_cost is None else \
                0.8 * self._row_cost + 0.2 * cost / rows
            self.gate.spend(cost, self._clock())

    async def _merged(self, batch: list[_Copy]) -> float | None:
        """The batch as one request of all its rows (one submit, one answer to read);
        the seconds this loop spent, or None when the batch must go copy by copy."""
        cand, split = self.split.candidate, self.split
        t0 = time.perf_counter()
        columns = _merge(batch)
        if columns is None or self._check_inputs(columns):
            return None
        rows = sum(c.rows for c in batch)
        loop_s = time.perf_counter() - t0
        start = time.perf_counter()
        try:
            result = await cand.batcher.submit(columns, rows)
        except PredictFailed:  # some copy's rows fail the whole call: each alone, then
            return None
        except Overloaded:
            self._report_drops(len(batch))
            return loop_s
        t1 = time.perf_counter()
        seconds = t1 - start
        try:
            check_outputs(cand, result)
        except HTTPError:  # NaN or infinity for some row: which copy's, each alone says
            return None
        keys = split.output_keys(result.outputs)
        split.outcomes.add(split.rollout, cand.version, requests=len(batch), seconds=seconds,
                           outputs=Counter(keys))
        self.metrics.rollout_request(split.rollout.id, cand.name, cand.version, "candidate",
                                     "shadow", error=False, seconds=seconds, n=len(batch))
        compared = agreed = i = 0
        for copy in batch:
            rows = copy.rows
            if copy.stable:
                compared += 1
                agreed += tuple(keys[i:i + rows]) == copy.stable
            i += rows
        self._count(compared, agreed, 0)
        return loop_s + time.perf_counter() - t1

    def _check_inputs(self, columns: dict[str, Any]) -> bool:
        """Whether the candidate refuses these inputs as it converts them (a float32
        model and a number beyond its range): the copies then go one by one."""
        try:
            check_inputs(self.split.candidate, columns)
        except HTTPError:
            return True
        return False

    async def _each(self, batch: list[_Copy]) -> float:
        """Each copy its own request (the candidate's batcher still batches them, and
        retries alone the requests of a batch that failed); the seconds this loop spent."""
        cand = self.split.candidate
        t0 = time.perf_counter()
        sent: list[tuple[_Copy, asyncio.Future[Result]]] = []
        dropped, closed = 0, False
        for copy in batch:
            try:
                columns = copy.columns
                check_inputs(cand, columns)  # as the candidate converts them
                sent.append((copy, cand.batcher.submit(columns, copy.rows)))
            except (HTTPError, Overloaded):  # the candidate refuses this input, or sheds
                dropped += 1
            except Closed:  # retired: what was sent fails with Closed too
                closed = True
                break
        start = time.perf_counter()
        loop_s = start - t0
        answers: list[tuple[_Copy, Result | BaseException, float]] = []
        for copy, future in sent:
            try:
                answer: Result | BaseException = await future
            except (PredictFailed, Closed) as exc:
                answer = exc
            answers.append((copy, answer, time.perf_counter() - start))
        t1 = time.perf_counter()
        self._report_drops(dropped)
        self._compare(answers)
        if closed or any(isinstance(a, Closed) for _, a, _ in answers):
            raise Closed(cand.batcher.label)
        return loop_s + time.perf_counter() - t1

    def _compare(self, answers: list[tuple[_Copy, Result | BaseException, float]]) -> None:
        split, cand = self.split, self.split.candidate
        rollout, keys_of = split.rollout, split.output_keys
        compared = agreed = failed = 0
        for copy, answer, seconds in answers:
            if isinstance(answer, Closed):
                continue
            if isinstance(answer, Result):
                try:
                    check_outputs(cand, answer)
                except HTTPError:  # answered NaN or infinity
                    answer = PredictFailed("non-finite")
            if not isinstance(answer, Result):  # raised, or answered NaN or infinity
                failed += 1
                split.outcomes.request(rollout, cand.version, error=True, seconds=seconds)
                self.metrics.rollout_request(rollout.id, cand.name, cand.version, "candidate",
                                             "shadow", error=True, seconds=seconds)
                continue
            keys = keys_of(answer.outputs)
            split.outcomes.request(rollout, cand.version, error=False, seconds=seconds,
                                   outputs=keys)
            self.metrics.rollout_request(rollout.id, cand.name, cand.version, "candidate",
                                         "shadow", error=False, seconds=seconds)
            if copy.stable:
                compared += 1
                agreed += tuple(keys) == copy.stable
        self._count(compared, agreed, failed)

    def _count(self, compared: int, agreed: int, failed: int) -> None:
        split, cand = self.split, self.split.candidate
        if compared:
            split.outcomes.shadow(split.rollout, cand.version, compared=compared,
                                  agreed=agreed)
        for outcome, n in (("compared", compared), ("agreed", agreed), ("failed", failed)):
            if n:
                self.metrics.shadow_copy(cand.name, str(cand.version), outcome, n)

    async def close(self) -> None:
        """Stop copying; what is queued is left (the rollout moved on)."""
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        self._report_drops()


def _merge(batch: list[_Copy]) -> dict[str, list[Any]] | None:
    """The copies' input columns end to end, when every one was a list (JSON bodies: held
    as a tuple, :class:`_Copy`) and the copies have the same columns in the same order;
    else None. Runs on the event loop for a batch of up to ``_SHADOW_BATCH`` copies at
    once, so both checks and the joining iterate in C (``map``, ``chain``), not per copy
    in Python; the request path (:meth:`Shadow.offer`) checks nothing."""
    names = batch[0].names
    if not names or not all(map(names.__eq__, map(attrgetter("names"), batch))):
        return None
    values = [c.values for c in batch]
    if set(map(type, chain.from_iterable(values))) != {tuple}:
        return None
    return {name: list(chain.from_iterable(map(itemgetter(i), values)))
            for i, name in enumerate(names)}
