"""Dynamic micro-batching for one model version.

Written by hand: the policy is this server's own (no waiting when idle, gathering only
while requests keep arriving, a latency budget that sheds load) and it needs one worker
thread per version plus per-caller futures on the event loop; Ray Serve's and BentoML's
batchers come with their whole runtimes.

Policy:

* Requests queue in arrival order. When the model is idle, the queue is dispatched on
  the next turn of the event loop, so the requests that arrived in the same turn share
  a batch; it keeps gathering turn by turn only while each turn brings new requests,
  up to ``max_batch_size`` rows or ``max_wait`` seconds. A lone request therefore waits
  one loop turn (microseconds), never ``max_wait``.
* While a batch runs in the worker thread, new requests queue; when it finishes, the
  queue is dispatched the same way. Under load batches grow by themselves.
* A batch holds whole requests (a request larger than ``max_batch_size`` runs alone).
* ``submit`` refuses (:class:`Overloaded`) a request whose estimated wait, from the queue
  ahead of it and a moving average of the model's call time (per row for requests larger
  than a batch, which run alone), exceeds the latency budget.
* If a batch of several requests fails, each request is retried alone, so one bad
  request cannot fail the others; a failure is logged once with an error id.
* A *rider* (:meth:`Batcher.carry`: a canary's candidate, carried by the stable version's
  batcher) does not wake its own thread: the host's next batch takes the rider's queue
  too (an idle host gathers for it as for its own requests: the next loop turn
  dispatches both, or the rider's alone), and the host's thread runs the rider's call
  right after its own and hands both calls' answers back to the event loop at once: the
  two versions' calls share one wake-up of the worker thread and one of the event loop
  (bench_rollout: the loop's wake-ups per answer of a 10 % canary fell from twice a
  plain server's to about the same; with ONNX Runtime, whose calls are short, the host
  was idle at most of the rider's requests until idle hosts gathered for it too). The
  host's answers wait for the rider's call (on average at most ``_RIDE_MAX_S``, below).
  The rider's requests wait as long as the host's arriving at the same time do. Only
  while the rider's calls are about as cheap as the host's (moving averages): a slower
  rider runs in its own thread.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import chain
from operator import itemgetter
from typing import Any

from reprise.core import new_id

__all__ = ["Batcher", "Closed", "Overloaded", "PredictFailed", "Result"]

_logger = logging.getLogger(__name__)
_EWMA = 0.2  # weight of the newest call in the moving average of call times
# a rider is carried while its calls take at most this many times the host's (on average)
# and at most _RIDE_MAX_S: the host's next batch waits for the rider's call
_RIDE_RATIO = 2.0
_RIDE_MAX_S = 0.005


class Overloaded(Exception):
    """The queue cannot meet the latency budget; retry after ``retry_after`` seconds."""

    def __init__(self, retry_after: int, estimate_s: float) -> None:
        super().__init__(f"estimated wait {estimate_s * 1000:.0f} ms")
        self.retry_after, self.estimate_s = retry_after, estimate_s


class Closed(Exception):
    """The version was retired or the server is stopping."""


class PredictFailed(Exception):
    """The model raised; the traceback is in the server log under ``error_id``."""

    def __init__(self, error_id: str) -> None:
        super().__init__(error_id)
        self.error_id = error_id


@dataclass(frozen=True, slots=True)
class Result:
    """One caller's outputs: its rows of each output column, in its row order.

    ``kinds`` and ``row_shapes`` describe the batch's output arrays (numpy dtype string
    and per-row shape) where the model returned arrays; shared by a batch's callers.
    ``call`` is when the call that computed it started and ended (``time.perf_counter``;
    the conversion of the batch's inputs included): the queue wait and model call spans.
    """

    outputs: dict[str, list[Any]]
    kinds: dict[str, str]
    row_shapes: dict[str, tuple[int, ...]]
    call: tuple[float, float] = (0.0, 0.0)


@dataclass(slots=True)
class _Item:
    columns: dict[str, Any]
    rows: int
    future: asyncio.Future[Result]


# what a predict call hands back to the loop: the batch, its results, seconds, CPU seconds
_Done = tuple[list[_Item], list["Result | PredictFailed"], float, float]


def _no_batch(rows: int, seconds: float) -> None:
    pass


def _no_depth(depth: int) -> None:
    pass


class Batcher:
    """Queue, batch and run ``predict`` for one model version in its own thread.

    Create it on the event loop that will call :meth:`submit`; everything but the
    ``predict`` call itself runs on that loop, so no locks are needed.
    """

    def __init__(self, predict: Callable[[dict[str, Any]], Mapping[str, Any]],
                 convert: Callable[[Mapping[str, Any]], dict[str, Any]], *, label: str,
                 max_batch_size: int, max_wait_s: float, budget_s: float | None,
                 on_batch: Callable[[int, float], None] = _no_batch,
                 on_depth: Callable[[int], None] = _no_depth) -> None:
        self._predict, self._convert, self.label = predict, convert, label
        self.max_batch_size, self._max_wait_s, self._budget_s = (
            max_batch_size, max_wait_s, budget_s)
        self._on_batch, self._on_depth = on_batch, on_depth
        self._loop = asyncio.get_running_loop()
        self._executor = ThreadPoolExecutor(1, thread_name_prefix=f"reprise-{label}")
        self._queue: deque[_Item] = deque()
        self._queued_rows = 0
        self._busy = self._gathering = self._closed = False
        self._seen, self._gather_start = 0, 0.0
        self.call_s: float | None = None  # moving average of one predict call
        # a request larger than max_batch_size runs alone, in one call whose time grows
        # with its rows: estimated per row, so that neither it nor the requests behind
        # it are estimated as rows / max_batch_size ordinary calls
        self.row_s: float | None = None  # moving average per row of such calls
        self._queued_big_rows = 0
        self._running_s = 0.0  # the estimated time of the call running now
        self.cpu_s = 0.0  # CPU seconds of the worker thread in predict calls so far
        self._idle = asyncio.Event()
        self._idle.set()
        self._rider: Batcher | None = None  # the batcher this one carries (see carry)
        self._host: Batcher | None = None  # the batcher carrying this one
        self._waiting_host = False  # queued requests left for the host's next batch

    @property
    def busy(self) -> bool:
        """Whether a call runs or requests wait (a shadow yields to it: ``_router``)."""
        return not self._idle.is_set()

    @property
    def depth(self) -> int:
        """Requests waiting (not counting the batch running now)."""
        return len(self._queue)

    def estimate_wait(self, rows: int) -> float:
        """Seconds a request of ``rows`` rows would wait for its answer now (an estimate)."""
        if self.call_s is None:
            return 0.0
        big = rows > self.max_batch_size
        small_rows = self._queued_rows - self._queued_big_rows + (0 if big else rows)
        batches = math.ceil(small_rows / self.max_batch_size)
        running = self._running_s if self._busy else 0.0
        return running + batches * self.call_s + self._big_s(
            self._queued_big_rows + (rows if big else 0))

    def _big_s(self, rows: int) -> float:
        """Estimated seconds of calls for ``rows`` rows of oversized requests."""
        assert self.call_s is not None
        per_row = self.row_s if self.row_s is not None else self.call_s / self.max_batch_size
        return rows * per_row

    def _call_estimate(self, rows: int) -> float:
        if self.call_s is None:
            return 0.0
        return self.call_s if rows <= self.max_batch_size else max(self.call_s,
                                                                   self._big_s(rows))

    def submit(self, columns: dict[str, Any], rows: int) -> asyncio.Future[Result]:
        """Queue checked input columns; the future gets this caller's :class:`Result`.

        Raises:
            Overloaded: the estimated wait exceeds the latency budget.
            Closed: the batcher no longer takes work.
        """
        if self._closed:
            raise Closed(self.label)
        if self._budget_s is not None and (self._busy or self._queue):
            estimate = self.estimate_wait(rows)
            if estimate > self._budget_s:
                raise Overloaded(max(1, math.ceil(estimate - self._budget_s)), estimate)
        future: asyncio.Future[Result] = self._loop.create_future()
        self._queue.append(_Item(columns, rows, future))
        self._queued_rows += rows
        if rows > self.max_batch_size:
            self._queued_big_rows += rows
        self._idle.clear()
        if not self._busy and not self._gathering and not self._waiting_host:
            if self._rides():
                self._waiting_host = True  # the host's next batch takes this queue
            else:
                self._start_gathering()
        return future

    # -- riding (see the module's docstring) -------------------------------------------

    @property
    def rider(self) -> Batcher | None:
        """The batcher this one carries (:meth:`carry`), if any."""
        return self._rider

    def carry(self, rider: Batcher | None) -> None:
        """Carry ``rider``'s calls in this batcher's thread (None: stop carrying)."""
        old, self._rider = self._rider, rider
        if old is not None and old is not rider:
            old._host = None
            old._leave_host()
        if rider is not None:
            rider._host = self

    def _rides(self) -> bool:
        """Whether this batcher's queue may wait for its host's next batch now; an idle
        host starts gathering for it (its next loop turn dispatches the rider's queue
        with whatever of its own arrived meanwhile, in its thread)."""
        host = self._host
        # a request larger than a batch (its call as long as its rows) never rides
        if host is None or host._closed or self._queued_big_rows or not self._cheap():
            return False
        if not (host._busy or host._gathering):
            host._start_gathering()
        return True

    def _cheap(self) -> bool:
        """Whether this rider's calls cost little enough beside its host's to be carried
        (moving averages; both known)."""
        host = self._host
        mine, hosts = self.call_s, None if host is None else host.call_s
        return mine is not None and hosts is not None and \
            mine <= min(_RIDE_MAX_S, _RIDE_RATIO * hosts)

    def _leave_host(self) -> None:
        """Dispatch on its own what waited for the host (its batch did not take it)."""
        if self._waiting_host:
            self._waiting_host = False
            if self._queue and not self._busy and not self._gathering:
                self._start_gathering()

    def _take_rider(self) -> tuple[Batcher, list[_Item]] | None:
        """The rider's queued requests for this host's batch (marks the rider busy)."""
        rider = self._rider
        if rider is None or not rider._waiting_host:
            return None
        rider._waiting_host = False
        if rider._closed or rider._busy or rider._gathering:
            return None
        if rider._queued_big_rows:  # queued since it began to wait: its own thread
            rider._start_gathering()
            return None
        batch, rows = rider._take()
        if not batch:
            rider._idle.set()
            return None
        rider._busy = True
        rider._running_s = rider._call_estimate(rows)
        return rider, batch

    async def drain(self, timeout: float) -> bool:
        """Wait until nothing is queued or running; False if ``timeout`` passed first."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            return False
        return True

    def close(self) -> None:
        """Take no more work, fail what is still queued, and let the thread end."""
        self._closed = True
        self.carry(None)
        if self._host is not None:
            self._host.carry(None)
        while self._queue:
            item = self._queue.popleft()
            if not item.future.done():
                item.future.set_exception(Closed(self.label))
        self._queued_rows = self._queued_big_rows = 0
        self._executor.shutdown(wait=False)

    # -- gathering and dispatch (event loop) ------------------------------------------

    def _start_gathering(self) -> None:
        self._gathering = True
        self._seen, self._gather_start = len(self._queue), time.perf_counter()
        self._loop.call_soon(self._gather)

    def _gather(self) -> None:
        n = len(self._queue)
        if (n == self._seen or self._queued_rows >= self.max_batch_size
                or time.perf_counter() - self._gather_start >= self._max_wait_s):
            self._dispatch()
        else:  # requests arrived during the last turn: give the next turn a chance too
            self._seen = n
            self._loop.call_soon(self._gather)

    def _take(self) -> tuple[list[_Item], int]:
        """The next batch off the queue, and its rows."""
        batch: list[_Item] = []
        rows = 0
        queue = self._queue
        while queue:
            item = queue[0]
            if batch and rows + item.rows > self.max_batch_size:
                break
            queue.popleft()
            self._queued_rows -= item.rows
            if item.rows > self.max_batch_size:
                self._queued_big_rows -= item.rows
            if not item.future.done():  # a caller that went away is not computed
                batch.append(item)
                rows += item.rows
        self._on_depth(len(queue))
        return batch, rows

    def _dispatch(self) -> None:
        self._gathering = False
        batch, rows = self._take()
        carried = self._take_rider()
        if not batch and carried is None:
            self._idle.set()
            rider = self._rider
            if rider is not None:
                rider._leave_host()
            return
        # (a batch of the rider's alone, when none of this one's came: its thread is
        # taken all the same, so this one is busy and its next requests queue)
        self._busy = True
        # (what this one's next requests would wait for: the rider's call too)
        self._running_s = (self._call_estimate(rows) if batch else 0.0) + \
            (carried[0]._running_s if carried is not None else 0.0)
        self._executor.submit(self._run, batch, carried)

    def _finish(self, batch: list[_Item], results: list[Result | PredictFailed],
                seconds: float, cpu_s: float = 0.0) -> None:
        self._busy = False
        if not batch:  # the thread ran only its rider's call: nothing of this one's
            self._next()
            return
        self.cpu_s += cpu_s
        rows = sum(item.rows for item in batch)
        if rows > self.max_batch_size:
            self.row_s = _average(self.row_s, seconds / rows)
        else:
            self.call_s = _average(self.call_s, seconds)
        self._on_batch(rows, seconds)
        for item, result in zip(batch, results, strict=True):
            if item.future.done():
                continue
            if isinstance(result, PredictFailed):
                item.future.set_exception(result)
            else:
                item.future.set_result(result)
        self._next()

    def _next(self) -> None:
        """After a call: dispatch what queued meanwhile, or go idle."""
        if self._queue and not self._closed:
            if self._rides():
                self._waiting_host = True
            else:
                self._start_gathering()
            return
        self._idle.set()
        rider = self._rider
        if rider is None or not rider._waiting_host:
            return
        if not self._closed and rider._cheap():  # gather a turn for the rider's queue
            self._start_gathering()
        else:  # nothing of this one's will carry it
            rider._leave_host()

    # -- the worker thread -------------------------------------------------------------

    def _run(self, batch: list[_Item],
             rider: tuple[Batcher, list[_Item]] | None = None) -> None:
        done: _Done = self._run_own(batch) if batch else (batch, [], 0.0, 0.0)
        if rider is not None:  # both answers go back to the loop in one hand-over
            carried, rider_done = rider[0], rider[0]._run_own(rider[1])
            self._post(self._finish_with, done, carried, rider_done)
        else:
            self._post(self._finish, *done)

    def _finish_with(self, done: _Done, rider: Batcher, rider_done: _Done) -> None:
        try:
            self._finish(*done)
        finally:  # the rider's callers get their answers whatever happened to the host's
            rider._finish(*rider_done)

    def _post(self, callback: Callable[..., None], *args: Any) -> None:
        try:
            self._loop.call_soon_threadsafe(callback, *args)
        except RuntimeError:  # the loop is closed: the server is gone, nobody waits
            pass

    def _run_own(self, batch: list[_Item]) -> _Done:
        start, cpu = time.perf_counter(), time.thread_time()
        results: list[Result | PredictFailed]
        try:
            results = list(self._predict_batch(batch))
        except Exception as exc:
            results = ([self._predict_alone(item) for item in batch] if len(batch) > 1
                       else [self._failed(exc)])
        return batch, results, time.perf_counter() - start, time.thread_time() - cpu

    def _predict_alone(self, item: _Item) -> Result | PredictFailed:
        try:
            return self._predict_batch([item])[0]
        except Exception as exc:
            return self._failed(exc)

    def _failed(self, exc: BaseException) -> PredictFailed:
        error_id = new_id()
        _logger.error("model %s failed to predict (error id %s)", self.label, error_id,
                      exc_info=exc)
        return PredictFailed(error_id)

    def _predict_batch(self, batch: list[_Item]) -> list[Result]:
        rows = sum(item.rows for item in batch)
        started = time.perf_counter()
        outputs = self._predict(self._merge(batch))
        call = (started, time.perf_counter())
        if not isinstance(outputs, Mapping):
            raise TypeError(f"predict returned a {type(outputs).__name__}, not a mapping of "
                            "output columns")
        return _split(outputs, batch, rows, call)

    def _merge(self, batch: list[_Item]) -> dict[str, Any]:
        """One column per input across the batch, converted to arrays once."""
        if len(batch) == 1:
            return self._convert(batch[0].columns)
        columns = [item.columns for item in batch]
        merged: dict[str, Any] = {}
        for name in columns[0]:
            chunks = list(map(itemgetter(name), columns))
            # JSON bodies give lists: the check and the join in C
            if set(map(type, chunks)) == {list}:
                merged[name] = list(chain.from_iterable(chunks))
            else:  # some callers sent numpy arrays (programmatic use): convert, then join
                import numpy as np

                merged[name] = np.concatenate(
                    [self._convert({name: c})[name] for c in chunks])
        return self._convert(merged)


def _average(average: float | None, sample: float) -> float:
    """The moving average after ``sample`` (the sample itself when there is none yet)."""
    return sample if average is None else (1 - _EWMA) * average + _EWMA * sample


def _split(outputs: Mapping[str, Any], batch: list[_Item], rows: int,
           call: tuple[float, float]) -> list[Result]:
    """Each caller's slice of every output column, as plain lists."""
    lists: dict[str, list[Any]] = {}
    kinds: dict[str, str] = {}
    shapes: dict[str, tuple[int, ...]] = {}
    for name, values in outputs.items():
        dtype = getattr(values, "dtype", None)
        if dtype is not None and hasattr(values, "tolist"):
            kinds[name] = dtype.str[1:]
            shapes[name] = tuple(getattr(values, "shape", (0,))[1:])
            values = values.tolist()
        else:
            values = list(values)
        if len(values) != rows:
            raise ValueError(f"predict returned {len(values)} rows of output {name!r} "
                             f"for {rows} input rows")
        lists[name] = values
    results, start = [], 0
    for item in batch:
        end = start + item.rows
        results.append(Result({n: v[start:end] for n, v in lists.items()}, kinds, shapes,
                              call))
        start = end
    return results
