"""The micro-batcher: every caller gets exactly its own rows, in order, never mixed up or
dropped; batches respect the size limit; a lone request does not wait; overload sheds."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reprise.serve._batcher import Batcher, Closed, Overloaded, PredictFailed
from tests.serve.fakes import run


class Echo:
    """predict: out = in * 10 + 1, recording batch sizes, the thread, and overlap."""

    def __init__(self, delay: float = 0.0, fail_on: int | None = None) -> None:
        self.delay, self.fail_on = delay, fail_on
        self.batches: list[int] = []
        self.threads: set[int] = set()
        self.active = self.max_active = 0

    def __call__(self, columns: dict[str, Any]) -> dict[str, Any]:
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        self.threads.add(threading.get_ident())
        self.batches.append(len(columns["v"]))
        if self.delay:
            time.sleep(self.delay)
        self.active -= 1
        if self.fail_on is not None and self.fail_on in columns["v"]:
            raise ValueError("poisoned row")
        return {"out": [v * 10 + 1 for v in columns["v"]]}


def _batcher(model: Echo, *, size: int = 8, wait: float = 0.002,
             budget: float | None = None) -> Batcher:
    return Batcher(model, dict, label="test-v1", max_batch_size=size, max_wait_s=wait,
                   budget_s=budget)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(1, 12), min_size=1, max_size=40), st.integers(1, 16),
       st.sampled_from([0.0, 0.0005]))
def test_every_caller_gets_exactly_its_rows(sizes: list[int], max_batch: int,
                                            delay: float) -> None:
    async def main() -> None:
        model = Echo(delay)
        b = _batcher(model, size=max_batch)
        start = 0
        calls = []
        for n in sizes:
            rows = list(range(start, start + n))
            start += n

            async def one(rows: list[int] = rows) -> None:
                await asyncio.sleep(0)  # interleave the callers
                result = await b.submit({"v": rows}, len(rows))
                assert result.outputs == {"out": [v * 10 + 1 for v in rows]}
            calls.append(one())
        await asyncio.gather(*calls)
        assert sum(model.batches) == sum(sizes)
        assert all(n <= max_batch or n in sizes for n in model.batches)
        assert model.max_active == 1
        assert await b.drain(1)
        b.close()

    run(main())


def test_predict_runs_in_one_worker_thread_never_on_the_loop() -> None:
    async def main() -> None:
        model = Echo(0.001)
        b = _batcher(model)
        await asyncio.gather(*(b.submit({"v": [i]}, 1) for i in range(30)))
        assert model.threads and threading.get_ident() not in model.threads
        assert len(model.threads) == 1 and model.max_active == 1
        b.close()

    run(main())


def test_a_lone_request_does_not_wait_for_max_wait() -> None:
    async def main() -> None:
        b = _batcher(Echo(), wait=2.0)
        t0 = time.perf_counter()
        await b.submit({"v": [1]}, 1)
        assert time.perf_counter() - t0 < 0.5
        b.close()

    run(main())


def test_requests_arriving_together_share_a_batch_and_the_size_limit_holds() -> None:
    async def main() -> None:
        model = Echo()
        b = _batcher(model, size=4)
        futures = [b.submit({"v": [i]}, 1) for i in range(10)]
        await asyncio.gather(*futures)
        assert model.batches == [4, 4, 2]
        model.batches.clear()
        big = await b.submit({"v": list(range(9))}, 9)  # larger than a batch: runs alone
        assert len(big.outputs["out"]) == 9 and model.batches == [9]
        b.close()

    run(main())


def test_max_batch_size_one_never_batches() -> None:
    async def main() -> None:
        model = Echo()
        b = _batcher(model, size=1)
        await asyncio.gather(*(b.submit({"v": [i]}, 1) for i in range(6)))
        assert model.batches == [1] * 6
        b.close()

    run(main())


def test_a_failing_request_does_not_fail_its_batch_mates(caplog: pytest.LogCaptureFixture
                                                         ) -> None:
    async def main() -> None:
        b = _batcher(Echo(fail_on=3))
        futures = [b.submit({"v": [i]}, 1) for i in range(6)]
        results = await asyncio.gather(*futures, return_exceptions=True)
        failed = [r for r in results if isinstance(r, PredictFailed)]
        assert len(failed) == 1 and results[3] is failed[0]
        assert failed[0].error_id in caplog.text and "poisoned row" in caplog.text
        assert [r.outputs["out"] for r in results if not isinstance(r, Exception)] == [
            [1], [11], [21], [41], [51]]
        b.close()

    run(main())


def test_overload_is_refused_with_a_retry_time_instead_of_queueing() -> None:
    async def main() -> None:
        b = _batcher(Echo(0.05), size=1, budget=0.12)
        await b.submit({"v": [0]}, 1)  # seeds the moving average (~50 ms a call)
        accepted = [b.submit({"v": [i]}, 1) for i in range(2)]
        with pytest.raises(Overloaded) as info:
            for i in range(10):
                accepted.append(b.submit({"v": [i]}, 1))
        assert info.value.retry_after >= 1 and info.value.estimate_s > 0.12
        await asyncio.gather(*accepted)  # what was accepted is still answered
        b.close()

    run(main())


def test_a_request_larger_than_a_batch_is_estimated_by_its_own_call_time() -> None:
    """It runs alone in one call, not in rows / max_batch_size calls (issue 20: valid
    4 MB bodies were refused with estimates of minutes for calls of milliseconds)."""
    async def main() -> None:
        b = _batcher(Echo(0.05), size=4, budget=0.5)
        await b.submit({"v": list(range(400))}, 400)  # learns the time of such a call
        running = b.submit({"v": [0]}, 1)
        big = b.submit({"v": list(range(400))}, 400)  # waits ~0.05 s, estimated so
        assert b.estimate_wait(400) < 0.5
        await asyncio.gather(running, big)
        b.close()

    run(main())


def test_drain_waits_for_queued_work_and_close_fails_the_rest() -> None:
    async def main() -> None:
        b = _batcher(Echo(0.02), size=1)
        futures = [b.submit({"v": [i]}, 1) for i in range(3)]
        assert await b.drain(5)
        assert all(f.done() and not f.exception() for f in futures)
        slow = _batcher(Echo(0.2), size=1)
        queued = [slow.submit({"v": [i]}, 1) for i in range(3)]
        assert not await slow.drain(0.05)
        slow.close()
        with pytest.raises(Closed):
            slow.submit({"v": [9]}, 1)
        results = await asyncio.gather(*queued, return_exceptions=True)
        assert any(isinstance(r, Closed) for r in results)
        b.close()

    run(main())


@settings(max_examples=8, deadline=None)
@given(st.lists(st.integers(1, 9), min_size=2, max_size=30), st.integers(1, 8))
def test_concurrent_http_callers_each_get_their_own_rows(sizes: list[int],
                                                         max_batch: int) -> None:
    from reprise.serve import Settings
    from tests.serve.fakes import FakeSource, score, serving

    source = FakeSource()
    source.models["churn"][1].delay = 0.001

    async def main() -> None:
        async with serving(source, ["churn@production"],
                           Settings(max_batch_size=max_batch, poll_interval=5)) as (c, _):
            async def caller(k: int, n: int) -> None:
                rows = [{"x": float(j % 10), "y": k, "plan": "gold" if j % 2 else "basic"}
                        for j in range(n)]
                r = await c.post("/v1/models/churn/predict", json={"records": rows})
                assert r.status_code == 200
                assert [p["score"] for p in r.json()["predictions"]] == [
                    score(row["x"], k, row["plan"], 1) for row in rows]
            await asyncio.gather(*(caller(k, n) for k, n in enumerate(sizes)))
        assert sum(source.models["churn"][1].batches) == sum(sizes) + 1  # + warm-up

    run(main())


def _label(model: Echo, label: str, **kw: Any) -> Batcher:
    return Batcher(model, dict, label=label, max_batch_size=kw.get("size", 8),
                   max_wait_s=0.002, budget_s=None)


def test_a_cheap_rider_waiting_for_a_busy_host_runs_in_the_hosts_thread_after_it() -> None:
    """A canary's candidate carried by the stable version's batcher: what it queues while
    the host is busy goes with the host's next batch, in the host's thread, after the
    host's call, and both calls' answers reach the loop at once; every caller still gets
    exactly its rows."""
    async def main() -> None:
        order: list[str] = []

        class Named(Echo):
            def __init__(self, name: str, delay: float) -> None:
                super().__init__(delay)
                self.name = name

            def __call__(self, columns: dict[str, Any]) -> dict[str, Any]:
                order.append(self.name)
                return super().__call__(columns)

        stable, cand = Named("stable", 0.01), Named("cand", 0.001)
        host, rider = _label(stable, "s-v1"), _label(cand, "s-v2")
        await host.submit({"v": [0]}, 1)  # warm-ups: each one's call time is known
        await rider.submit({"v": [0]}, 1)
        warm = set(cand.threads)
        host.carry(rider)
        assert host.rider is rider
        order.clear()
        first = host.submit({"v": [1]}, 1)  # the host is busy with this one...
        await asyncio.sleep(0.002)
        behind = host.submit({"v": [2]}, 1)  # ...while these queue
        riding = [rider.submit({"v": [10 + i]}, 1) for i in range(3)]
        # the host's second batch and the rider's batch come back in one hand-over: their
        # futures are done in the same turn of the loop (one callback finishes both)
        handed: list[tuple[str, int]] = []
        turn = 0

        async def count_turns() -> None:
            nonlocal turn
            while not all(f.done() for f in (behind, *riding)):
                turn += 1
                await asyncio.sleep(0)

        for name, fut in (("host", behind), *(("rider", f) for f in riding)):
            fut.add_done_callback(lambda _f, name=name: handed.append((name, turn)))
        await count_turns()
        got = await asyncio.gather(first, behind, *riding)
        assert {t for _, t in handed} == {handed[0][1]}, handed
        assert [r.outputs["out"] for r in got] == [[11], [21], [101], [111], [121]]
        assert order == ["stable", "stable", "cand"]  # one call of the rider's three
        assert cand.batches[-1] == 3
        assert cand.threads - warm <= stable.threads  # no call in its own thread
        assert await host.drain(1) and await rider.drain(1)
        # an idle host: the rider does not wait for it
        t0 = time.perf_counter()
        await rider.submit({"v": [5]}, 1)
        assert time.perf_counter() - t0 < 0.5
        host.close()
        rider.close()

    run(main())


def test_a_slow_rider_runs_in_its_own_thread_and_a_released_one_is_not_stranded() -> None:
    async def main() -> None:
        stable, slow = Echo(0.002), Echo(0.03)
        host, rider = _label(stable, "s-v1"), _label(slow, "s-v2")
        await host.submit({"v": [0]}, 1)
        await rider.submit({"v": [0]}, 1)
        host.carry(rider)
        busy = host.submit({"v": [1]}, 1)
        await asyncio.sleep(0)
        assert (await rider.submit({"v": [3]}, 1)).outputs["out"] == [31]
        assert slow.threads.isdisjoint(stable.threads)  # 15x the host's calls: its own
        await busy
        # a rider waiting for its host when the host stops carrying it dispatches alone
        fast = Echo()
        rider2 = _label(fast, "s-v3")
        await rider2.submit({"v": [0]}, 1)
        host.carry(rider2)
        stable.delay = 0.05
        busy = host.submit({"v": [1]}, 1)
        await asyncio.sleep(0.01)
        waiting = rider2.submit({"v": [4]}, 1)
        await asyncio.sleep(0.005)
        host.carry(None)
        t0 = time.perf_counter()
        assert (await asyncio.wait_for(waiting, 1)).outputs["out"] == [41]
        assert time.perf_counter() - t0 < 0.04  # not after the host's 50 ms call
        await busy
        for b in (host, rider, rider2):
            b.close()

    run(main())


def test_a_batch_mixing_lists_and_arrays_joins_each_column_in_order() -> None:
    """JSON bodies give lists (joined in one pass); programmatic callers may give numpy
    arrays (each converted, then concatenated): either way every column arrives whole,
    in the callers' order, and each caller gets its own rows."""
    import numpy as np

    seen: list[dict[str, list[float]]] = []

    def predict(columns: dict[str, Any]) -> dict[str, Any]:
        seen.append({k: list(map(float, v)) for k, v in columns.items()})
        return {"out": [a + 10 * b for a, b in zip(columns["a"], columns["b"], strict=True)]}

    async def main() -> None:
        b = Batcher(predict, dict, label="test-v1", max_batch_size=16, max_wait_s=0.002,
                    budget_s=None)
        lists = [b.submit({"a": [1.0, 2.0], "b": [3.0, 4.0]}, 2),
                 b.submit({"a": [5.0], "b": [6.0]}, 1)]
        got = await asyncio.gather(*lists)
        assert seen == [{"a": [1.0, 2.0, 5.0], "b": [3.0, 4.0, 6.0]}]
        assert [r.outputs["out"] for r in got] == [[31.0, 42.0], [65.0]]
        seen.clear()
        mixed = [b.submit({"a": [1.0], "b": [2.0]}, 1),
                 b.submit({"a": np.array([3.0, 4.0]), "b": np.array([5.0, 6.0])}, 2),
                 b.submit({"a": [7.0], "b": np.array([8.0])}, 1)]
        got = await asyncio.gather(*mixed)
        assert seen == [{"a": [1.0, 3.0, 4.0, 7.0], "b": [2.0, 5.0, 6.0, 8.0]}]
        assert [r.outputs["out"] for r in got] == [[21.0], [53.0, 64.0], [87.0]]
        b.close()

    run(main())


def test_an_idle_host_gathers_for_its_rider_and_runs_it_in_its_thread() -> None:
    """A rider's request reaching an idle host: the host gathers one loop turn for it, as
    for its own, and runs the rider's call in its thread (with the host's own requests
    of that turn, answered in one hand-over); a batch of the rider's alone leaves the
    host's call-time average and batch metrics alone, and the host stays usable."""
    class Where(Echo):
        def __call__(self, columns: dict[str, Any]) -> dict[str, Any]:
            self.last = threading.get_ident()
            return super().__call__(columns)

    async def main() -> None:
        stable, cand = Where(0.002), Where(0.001)
        seen: list[int] = []
        host = Batcher(stable, dict, label="s-v1", max_batch_size=8, max_wait_s=0.002,
                       budget_s=None, on_batch=lambda rows, s: seen.append(rows))
        rider = _label(cand, "s-v2")
        await host.submit({"v": [0]}, 1)
        await rider.submit({"v": [0]}, 1)
        assert cand.last != stable.last  # warm-ups: each in its own thread
        host.carry(rider)
        call_s = host.call_s
        seen.clear()
        # the rider alone: in the host's thread, the host's figures untouched
        assert (await rider.submit({"v": [7]}, 1)).outputs["out"] == [71]
        assert cand.last == stable.last
        assert host.call_s == call_s and seen == [] and cand.batches[-1] == 1
        # both in the same turn: one dispatch, one hand-over
        got = await asyncio.gather(rider.submit({"v": [1]}, 1), host.submit({"v": [2]}, 1),
                                   rider.submit({"v": [3]}, 1))
        assert [r.outputs["out"] for r in got] == [[11], [21], [31]]
        assert cand.batches[-1] == 2 and stable.batches[-1] == 1 and seen == [1]
        assert cand.last == stable.last
        assert await host.drain(1) and await rider.drain(1)
        assert (await host.submit({"v": [4]}, 1)).outputs["out"] == [41]
        # a request larger than a batch never rides: its call lasts as long as its rows
        big, call_s = list(range(20)), host.call_s
        assert (await rider.submit({"v": big}, 20)).outputs["out"] == [v * 10 + 1 for v in big]
        assert cand.last != stable.last and host.call_s == call_s
        assert (await rider.submit({"v": [6]}, 1)).outputs["out"] == [61]
        assert cand.last == stable.last
        host.carry(None)  # released: its own thread again
        assert (await rider.submit({"v": [5]}, 1)).outputs["out"] == [51]
        assert cand.last != stable.last
        host.close()
        rider.close()

    run(main())
