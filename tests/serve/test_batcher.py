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

from reprise.serve._batcher import Batcher, Closed, Overloaded, PredictFailed, Worker
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


# -- one worker thread shared by a model's versions (issue 14: a rollout's routing cost) --

class Shared:
    """Two versions' predict functions sharing one record of overlap and call order:
    out = in * 10 + version."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.calls: list[tuple[int, int]] = []  # (version, rows) in call order
        self.threads: set[int] = set()
        self.active = self.max_active = 0

    def version(self, v: int) -> Any:
        def predict(columns: dict[str, Any]) -> dict[str, Any]:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
            self.threads.add(threading.get_ident())
            self.calls.append((v, len(columns["v"])))
            if self.delay:
                time.sleep(self.delay)
            self.active -= 1
            return {"out": [x * 10 + v for x in columns["v"]]}
        return predict


def _pair(shared: Shared, worker: Worker, size: int = 64) -> tuple[Batcher, Batcher]:
    """Versions 1 and 2 of a model, on ``worker``."""
    def version(v: int) -> Batcher:
        return Batcher(shared.version(v), dict, label=f"m-v{v}", max_batch_size=size,
                       max_wait_s=0.002, budget_s=None, worker=worker)
    return version(1), version(2)


@settings(max_examples=20, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([1, 2]), st.integers(1, 6)), min_size=1,
                max_size=40), st.sampled_from([0.0, 0.0005]))
def test_versions_sharing_a_worker_each_get_their_own_rows_one_call_at_a_time(
        requests: list[tuple[int, int]], delay: float) -> None:
    async def main() -> None:
        shared = Shared(delay)
        worker = Worker("m")
        batchers = dict(zip((1, 2), _pair(shared, worker, size=8), strict=True))
        start, calls = 0, []
        for version, n in requests:
            rows = list(range(start, start + n))
            start += n

            async def one(version: int = version, rows: list[int] = rows) -> None:
                await asyncio.sleep(0)
                result = await batchers[version].submit({"v": rows}, len(rows))
                assert result.outputs == {"out": [x * 10 + version for x in rows]}
            calls.append(one())
        await asyncio.gather(*calls)
        for v in (1, 2):  # every row computed once, by its own version
            assert sum(n for u, n in shared.calls if u == v) == sum(
                n for u, n in requests if u == v)
        assert shared.max_active == 1 and len(shared.threads) == 1
        assert threading.get_ident() not in shared.threads
        for b in batchers.values():
            b.close()
        assert worker.closed

    run(main())


def test_a_version_waiting_for_the_shared_worker_takes_all_it_queued_meanwhile() -> None:
    """While the other version computes, the minority version's requests gather: one call
    for all of them, not one call each (a 10 % canary's batches of one or two rows)."""
    async def main() -> None:
        shared = Shared(0.05)
        stable, candidate = _pair(shared, Worker("m"))
        running = stable.submit({"v": [0]}, 1)
        await asyncio.sleep(0.01)  # the stable call has started
        waiting = []
        for i in range(5):  # arriving one by one on different loop turns
            waiting.append(candidate.submit({"v": [i]}, 1))
            await asyncio.sleep(0.002)
        results = await asyncio.gather(running, *waiting)
        assert [r.outputs["out"] for r in results[1:]] == [[2], [12], [22], [32], [42]]
        assert shared.calls == [(1, 1), (2, 5)]
        stable.close()
        candidate.close()

    run(main())


def test_turns_on_the_shared_worker_go_in_the_order_versions_became_ready() -> None:
    async def main() -> None:
        shared = Shared(0.03)
        worker = Worker("m")
        a, b = _pair(shared, worker)
        first = a.submit({"v": [0]}, 1)
        await asyncio.sleep(0.01)
        second = b.submit({"v": [1]}, 1)  # ready while a runs: next turn
        await asyncio.sleep(0.005)
        third = a.submit({"v": [2]}, 1)  # ready after b: after b's call
        await asyncio.gather(first, second, third)
        assert shared.calls == [(1, 1), (2, 1), (1, 1)]
        a.close()
        b.close()

    run(main())


def test_closing_one_version_leaves_the_shared_worker_to_the_other() -> None:
    async def main() -> None:
        shared = Shared(0.02)
        worker = Worker("m")
        stable, candidate = _pair(shared, worker)
        busy = stable.submit({"v": [0]}, 1)
        await asyncio.sleep(0.005)
        dropped = candidate.submit({"v": [1]}, 1)  # waits for its turn ...
        candidate.close()  # ... and is failed, its turn given up
        with pytest.raises(Closed):
            await dropped
        assert (await busy).outputs["out"] == [1]
        assert (await stable.submit({"v": [3]}, 1)).outputs["out"] == [31]
        assert not worker.closed and shared.calls == [(1, 1), (1, 1)]
        with pytest.raises(Closed):
            candidate.submit({"v": [4]}, 1)
        stable.close()
        assert worker.closed
        with pytest.raises(Closed):  # a closed worker takes no new version
            Batcher(shared.version(3), dict, label="m-v3", max_batch_size=4, max_wait_s=0,
                    budget_s=None, worker=worker)

    run(main())


def test_the_latency_budget_counts_the_other_versions_call_ahead() -> None:
    async def main() -> None:
        shared = Shared(0.1)
        worker = Worker("m")
        stable, candidate = _pair(shared, worker)
        await stable.submit({"v": [0]}, 1)  # ~0.1 s a call, learnt
        await candidate.submit({"v": [0]}, 1)
        busy = stable.submit({"v": [1]}, 1)
        await asyncio.sleep(0.01)
        queued = candidate.submit({"v": [1]}, 1)
        # behind the stable call running now: about 0.1 s (running) + 0.1 s (its own)
        assert candidate.estimate_wait(1) > 0.15
        await asyncio.gather(busy, queued)
        stable.close()
        candidate.close()

    run(main())
