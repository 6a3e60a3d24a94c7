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
controller (``_rollout_server``). A :class:`Shadow` copies the stable version's
requests to the candidate off the request path through a bounded queue (full: the copy
is dropped and counted) and compares the answers.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
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

__all__ = ["SLOTS", "Outcomes", "Shadow", "Split", "keyer", "output_keys", "payload_key",
           "sticky_slot"]

_logger = logging.getLogger(__name__)
SLOTS = 10_000  # a weight's resolution: 0.01 %
_SCORE_BINS = 20  # bins of a score or regression output with a known range
_SHADOW_WORKERS = 16  # copies in flight to the candidate at once (its batcher batches them)


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
        self._rows: dict[tuple[str, int, int], BucketRow] = {}

    def _row(self, rollout: RolloutRecord, version: int) -> BucketRow:
        bucket = bucket_of(time.time(), bucket_seconds(rollout.interval_s))
        key = (rollout.id, version, bucket)
        row = self._rows.get(key)
        if row is None:
            row = self._rows[key] = empty_bucket(rollout.id, version, bucket, self.server)
        return row

    def request(self, rollout: RolloutRecord, version: int, *, error: bool, seconds: float,
                outputs: Iterable[str] = ()) -> None:
        """Count one answer of ``version``: its latency and outputs; a 5xx as an error."""
        row = self._row(rollout, version)
        row.requests += 1
        row.errors += error
        row.latency[latency_index(seconds * 1000)] += 1
        counts = row.outputs
        for k in outputs:
            counts[k] = counts.get(k, 0) + 1

    def shadow(self, rollout: RolloutRecord, version: int, *, compared: int = 0,
               agreed: int = 0, dropped: int = 0) -> None:
        row = self._row(rollout, version)
        row.shadow_compared += compared
        row.shadow_agreed += agreed
        row.shadow_dropped += dropped

    def take(self) -> list[BucketRow]:
        """Everything counted since the last take (the caller stores it)."""
        rows, self._rows = list(self._rows.values()), {}
        return rows

    def put_back(self, rows: list[BucketRow]) -> None:
        """Rows whose write failed: counted again with what arrived since."""
        for row in rows:
            key = (row.rollout_id, row.version, row.bucket)
            old = self._rows.get(key)
            self._rows[key] = row if old is None else old.merge(row)


@dataclass(eq=False)
class Split:
    """The stable version and the candidate of one running rollout, and how to choose."""

    rollout: RolloutRecord
    stable: ServedModel
    candidate: ServedModel
    outcomes: Outcomes
    key_header: bytes | None = None
    key_column: str | None = None
    shadow: Shadow | None = None
    _threshold: int = field(default=0, repr=False)
    output_keys: Callable[[dict[str, list[Any]]], list[str]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._threshold = _threshold(self.rollout.weight)
        # both versions' outputs are read by the stable version's signature: comparable
        self.output_keys = keyer(self.stable)

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

    def pick(self, key: bytes | None) -> ServedModel:
        """The version that answers a request with this key (None: a random draw)."""
        if self._threshold <= 0:
            return self.stable
        if self._threshold >= SLOTS:
            return self.candidate
        slot = random.randrange(SLOTS) if key is None else sticky_slot(self.rollout.id, key)
        return self.candidate if slot < self._threshold else self.stable

    def record(self, model: ServedModel, status: int, seconds: float,
               result: Result | None) -> None:
        """Count an answer given by one of the split's versions: a 5xx, or an answer
        refused after the model ran (a non-finite output), is an error; a 4xx before the
        model ran is the client's and not counted."""
        if model is not self.stable and model is not self.candidate:
            return
        if result is None and 400 <= status < 500:
            return
        ok = status == 200 and result is not None
        outputs = self.output_keys(result.outputs) if ok and result is not None else []
        self.outcomes.request(self.rollout, model.version, error=not ok, seconds=seconds,
                              outputs=outputs)


def _threshold(weight: float) -> int:
    return max(0, min(SLOTS, round(weight * SLOTS / 100)))


@dataclass(slots=True)
class _Copy:
    columns: dict[str, Any]
    rows: int
    stable: list[str] | None  # the stable version's answer: output_keys of its rows


class Shadow:
    """Copies of the stable version's requests for the candidate, compared, never returned.

    :meth:`offer` is all the request path does: a ``put_nowait`` on a bounded queue, or
    a count when it is full. Workers on the event loop hand the copies to the
    candidate's own batcher (its own worker thread) and compare its answers with the
    stable version's: they agree when every row's primary output is the same class (a
    classifier), or falls in the same score bin (:func:`output_keys`: a regression or a
    score, which a retrained model never reproduces to the last digit).
    Copies the candidate's batcher sheds (its latency budget) count as dropped too.
    """

    def __init__(self, split: Split, metrics: Metrics, capacity: int) -> None:
        self.split, self.metrics = split, metrics
        self._queue: asyncio.Queue[_Copy] = asyncio.Queue(capacity)
        self._tasks = [asyncio.get_running_loop().create_task(self._work())
                       for _ in range(min(_SHADOW_WORKERS, capacity))]
        self.dropped = 0

    def offer(self, columns: dict[str, Any], rows: int, stable: Result) -> None:
        answer = self.split.output_keys(stable.outputs) or None
        try:
            self._queue.put_nowait(_Copy(columns, rows, answer))
        except asyncio.QueueFull:
            self._drop()

    def _drop(self) -> None:
        self.dropped += 1
        cand = self.split.candidate
        self.split.outcomes.shadow(self.split.rollout, cand.version, dropped=1)
        self.metrics.shadow_copy(cand.name, str(cand.version), "dropped")

    async def _work(self) -> None:
        while True:
            copy = await self._queue.get()
            cand = self.split.candidate
            start = time.perf_counter()
            try:
                check_inputs(cand, copy.columns)  # as the candidate converts them
            except HTTPError:  # the stable version takes this input, the candidate not
                self._drop()
                continue
            try:
                result = await cand.batcher.submit(copy.columns, copy.rows)
                check_outputs(cand, result)
            except Overloaded:
                self._drop()
                continue
            except (PredictFailed, HTTPError):  # raised, or answered NaN or infinity
                seconds = time.perf_counter() - start
                self.split.outcomes.request(self.split.rollout, cand.version, error=True,
                                            seconds=seconds)
                self.metrics.rollout_request(self.split.rollout.id, cand.name, cand.version,
                                             "candidate", "shadow", error=True,
                                             seconds=seconds)
                self.metrics.shadow_copy(cand.name, str(cand.version), "failed")
                continue
            except Closed:
                return
            self._answered(copy, result, time.perf_counter() - start)

    def _answered(self, copy: _Copy, result: Result, seconds: float) -> None:
        split, cand = self.split, self.split.candidate
        keys = split.output_keys(result.outputs)
        split.outcomes.request(split.rollout, cand.version, error=False, seconds=seconds,
                               outputs=keys)
        self.metrics.rollout_request(split.rollout.id, cand.name, cand.version, "candidate",
                                     "shadow", error=False, seconds=seconds)
        if copy.stable is None:
            return
        agreed = keys == copy.stable
        split.outcomes.shadow(split.rollout, cand.version, compared=1, agreed=int(agreed))
        self.metrics.shadow_copy(cand.name, str(cand.version), "compared")
        if agreed:
            self.metrics.shadow_copy(cand.name, str(cand.version), "agreed")

    async def close(self) -> None:
        """Stop copying; what is queued is left (the rollout moved on)."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
