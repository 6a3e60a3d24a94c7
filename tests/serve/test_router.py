"""Routing during a rollout (issue 14.2), in process: the sticky split, what an answer is
counted as, the shadow's bounded queue, and a server following a rollout of its alias
from the metadata store (the split installed within a poll, outcomes flushed to buckets,
a pinned version still pinned, an abort sending everything back to the stable version)."""

from __future__ import annotations

import asyncio
import gc
import math
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import reprise
from reprise.core._rollout_types import RolloutRecord
from reprise.core.errors import ConfigError
from reprise.registry import Field, RegistrySource, Signature, promote, register_package
from reprise.serve import Settings, abort_rollout, start_rollout
from reprise.serve._batcher import Result
from reprise.serve._metrics import Metrics
from reprise.serve._models import ServedModel
from reprise.serve._router import (
    SLOTS,
    Outcomes,
    Shadow,
    ShadowGate,
    Split,
    _Copy,
    _merge,
    output_keys,
    payload_key,
    sticky_slot,
)
from reprise.serve._settings import ResolvedSettings
from tests.registry.test_registry import pkg
from tests.serve.fakes import SIGNATURE, FakeModel, run, serving, wait_until


def _rollout(weight: float = 25.0, rid: str = "r1", phase: str = "steps") -> RolloutRecord:
    return RolloutRecord(rid, "churn", "production", 1, 2, "canary", [weight, 100], 60.0, {},
                         {}, "running", 0, weight, phase, 0.0, 0.0, None, 0, 0, None, "me")


# FakeModel's inputs, its outputs with the label first (a class: the shadow compares it)
LABELLED = Signature(inputs=SIGNATURE.inputs, outputs=SIGNATURE.outputs[::-1])


def _served(version: int, *, delay: float = 0.0) -> ServedModel:
    """A served FakeModel (on the running loop: its batcher binds to it)."""
    model = FakeModel("churn", version, delay=delay, signature=LABELLED)
    return ServedModel.create(model, ResolvedSettings(8, 0.0, 1000.0, None, None), Metrics())


def _model(version: int, signature: Signature = LABELLED) -> Any:
    """What the split needs of a version, without a batcher."""
    return SimpleNamespace(name="churn", version=version, signature=signature)


_stable, _candidate = _model(1), _model(2)


class _NaNModel(FakeModel):
    def predict(self, columns: dict[str, Any]) -> dict[str, Any]:
        out = super().predict(columns)
        return {**out, "score": [float("nan")] * len(out["score"])}


# -- the split ---------------------------------------------------------------------------

def test_a_key_keeps_its_slot_in_a_rollout_and_not_across_rollouts() -> None:
    keys = [f"customer-{i}".encode() for i in range(2000)]
    first = [sticky_slot("r1", k) for k in keys]
    assert first == [sticky_slot("r1", k) for k in keys]
    other = [sticky_slot("r2", k) for k in keys]
    assert sum(a == b for a, b in zip(first, other, strict=True)) < 10
    # uniform enough that a 25 % weight gives about a quarter of the keys
    assert 0.22 < sum(s < SLOTS // 4 for s in first) / len(keys) < 0.28


@given(st.binary(min_size=1, max_size=40), st.floats(0, 100), st.floats(0, 100))
def test_as_the_weight_grows_a_key_only_moves_to_the_candidate(key: bytes, w1: float,
                                                               w2: float) -> None:
    low, high = sorted((w1, w2))
    split = Split(_rollout(low), _stable, _candidate, Outcomes("s"))
    before = split.pick(key)
    split.update(_rollout(high))
    assert before is _stable or split.pick(key) is _candidate


def test_pick_shares_by_weight_and_is_sticky() -> None:
    split = Split(_rollout(20.0), _stable, _candidate, Outcomes("s"))
    random_picks = Counter(split.pick(None).version for _ in range(20_000))
    assert 0.18 < random_picks[2] / 20_000 < 0.22
    keyed = {k: split.pick(str(k).encode()) for k in range(1000)}
    assert all(split.pick(str(k).encode()) is m for k, m in keyed.items())
    split.update(_rollout(0.0))
    assert all(split.pick(str(k).encode()) is _stable for k in range(100))
    split.update(_rollout(100.0))
    assert all(split.pick(None) is _candidate for _ in range(100))


def test_shadow_copies_merge_only_when_all_are_lists_with_the_same_columns() -> None:
    a, b = _Copy.of({"x": [1.0], "y": [2]}, 1, ["k"]), _Copy.of(
        {"x": [3.0, 4.0], "y": [5, 6]}, 2, ["k", "k"])
    assert _merge([a, b]) == {"x": [1.0, 3.0, 4.0], "y": [2, 5, 6]}
    assert _merge([a]) == {"x": [1.0], "y": [2]}
    other = _Copy.of({"y": [2], "x": [1.0]}, 1, ["k"])  # the same columns in another order
    fewer = _Copy.of({"x": [1.0]}, 1, ["k"])
    arrays = _Copy.of({"x": np.array([1.0]), "y": [2]}, 1, ["k"])
    assert _merge([a, other]) is None and _merge([a, fewer]) is None
    assert _merge([a, arrays]) is None and _merge([arrays, a]) is None
    assert _merge([_Copy.of({}, 1, [])]) is None


def test_the_key_comes_from_the_header_or_the_first_rows_column() -> None:
    by_header = Split(_rollout(), _stable, _candidate, Outcomes("s"), key_header=b"x-k")
    assert by_header.key_of([(b"a", b"1"), (b"x-k", b"alice")], None, False) == b"alice"
    assert by_header.key_of([(b"a", b"1")], None, False) is None
    assert payload_key([{"id": 7, "x": 1}, {"id": 8}], "id", False) == b"7"
    assert payload_key({"records": [{"id": "bob"}]}, "id", False) == b"bob"
    assert payload_key({"columns": {"id": [3, 4]}}, "id", False) == b"3"
    assert payload_key({"inputs": [{"name": "x", "data": [1]}, {"name": "id", "data": [9]}]},
                       "id", True) == b"9"
    for bad in ([], [1], {"records": "x"}, {"columns": {"id": []}}, "text", None):
        assert payload_key(bad, "id", False) is None
    assert payload_key({"inputs": 3}, "id", True) is None


def test_outputs_are_counted_as_classes_or_score_bins() -> None:
    cls = Signature(inputs=[Field("a", "float")], outputs=[Field("prediction", "int"),
                                                          Field("probabilities", "float")],
                    task="binary", classes=[0, 1])
    assert output_keys(_model(1, cls), {"prediction": [1, 0, 1]}) == ["1", "0", "1"]
    ranged = Signature(inputs=[Field("a", "float")],
                       outputs=[Field("prediction", "float", min=0.0, max=10.0)],
                       task="regression")
    assert output_keys(_model(1, ranged), {"prediction": [0.1, 9.9, 50.0]}) == [
        "bin:0", "bin:19", "bin:20"]
    free = Signature(inputs=[Field("a", "float")], outputs=[Field("prediction", "float")],
                     task="regression")
    keys = output_keys(_model(1, free), {"prediction": [0.0, 1.0, -1.0, 1e6, float("nan")]})
    assert keys == ["bin:0", "bin:4", "bin:-4", "bin:79", "bin:none"]


def test_an_answer_counts_by_version_and_a_client_error_not_at_all() -> None:
    outcomes = Outcomes("s1")
    split = Split(_rollout(), _stable, _candidate, outcomes)
    result = Result({"score": [1.0], "label": ["high"]}, {}, {})
    split.record(_stable, 200, 0.004, result)
    split.record(_candidate, 500, 0.2, None)  # the model raised
    split.record(_candidate, 422, 0.001, result)  # a non-finite output: the model's fault
    split.record(_candidate, 422, 0.001, None)  # the client's bad request
    split.record(_model(3), 200, 0.001, result)  # not one of the split's versions
    rows = {r.version: r for r in outcomes.take()}
    assert (rows[1].requests, rows[1].errors, rows[1].outputs) == (1, 0, {"high": 1})
    assert (rows[2].requests, rows[2].errors, rows[2].outputs) == (2, 2, {})
    assert rows[1].latency[3] == 1 and sum(rows[2].latency) == 2  # 4 ms: the (3, 5] bucket
    assert outcomes.take() == []
    outcomes.put_back(list(rows.values()))
    split.record(_stable, 200, 0.004, result)
    again = {r.version: r for r in outcomes.take()}
    assert again[1].requests == 2 and again[2].requests == 2


def test_an_answer_counts_in_its_bucket_row_and_its_metrics_series_alike(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Split.record keeps each version's row of the moment (a _Lane): a new row after
    the rows are taken or put back, and after the bucket ends; the /metrics series gets
    the same counts, in the same latency bucket."""
    clock = [1_000_000.0]
    monkeypatch.setattr("reprise.serve._router.time.time", lambda: clock[0])
    outcomes, metrics = Outcomes("s1"), Metrics()
    split = Split(_rollout(), _stable, _candidate, outcomes, metrics=metrics)
    result = Result({"score": [1.0], "label": ["high"]}, {}, {})
    for seconds in (0.004, 0.0005, 2.5):
        split.record(_stable, 200, seconds, result)
    split.record(_stable, 503, 0.02, None)
    split.record(_candidate, 200, 0.004, result)
    first = outcomes.take()
    split.record(_stable, 200, 0.004, result)  # rows taken: a new row, not the taken one
    clock[0] += 60.0  # the next bucket (the rollout's interval is 60 s: 5 s buckets)
    split.record(_stable, 200, 0.004, result)
    later = outcomes.take()
    stable_rows = [r for r in first if r.version == 1]
    assert [(r.requests, r.errors) for r in stable_rows] == [(4, 1)]
    assert sorted((r.bucket, r.requests) for r in later) == [
        (200_000, 1), (200_012, 1)]
    series = metrics._rollouts[("r1", 1, "live")]
    assert (series.requests, series.errors) == (6, 1)
    merged = [sum(r.latency[i] for r in stable_rows + later)
              for i in range(len(series.buckets))]
    assert series.buckets == merged  # one index for both
    assert series.labels == ("churn", "1", "r1", "stable", "live")
    assert metrics._rollouts[("r1", 2, "live")].requests == 1
    text = metrics.render()[0].decode()
    assert 'reprise_rollout_requests_total{mode="live",model="churn",role="stable",' \
        'rollout="r1",version="1"} 6.0' in text


def test_the_shadow_drops_and_counts_when_its_queue_is_full() -> None:
    async def main() -> tuple[Any, Shadow]:
        stable, slow = _served(1), _served(2, delay=0.3)
        outcomes = Outcomes("s1")
        split = Split(_rollout(0.0, phase="shadow"), stable, slow, outcomes)
        shadow = Shadow(split, Metrics(), capacity=3)
        cols = {"x": [1.0], "y": [60], "plan": ["gold"]}
        answer = await stable.batcher.submit(cols, 1)
        start = time.perf_counter()
        for _ in range(20):
            shadow.offer(cols, 1, answer)
        assert time.perf_counter() - start < 0.05  # offering never waits for the candidate
        await wait_until(lambda: slow.batcher.depth == 0 and not shadow._queue, 5)
        await asyncio.sleep(0.35)
        await shadow.close()
        return outcomes.take(), shadow
    rows, shadow = run(main())
    dropped = sum(r.shadow_dropped for r in rows)
    compared = sum(r.shadow_compared for r in rows)
    assert dropped == shadow.dropped and dropped == 20 - 3  # 3 queued, the rest dropped
    assert compared == 20 - dropped and sum(r.requests for r in rows) == compared
    # the label (the output compared) is the same for both versions; their scores differ
    assert sum(r.shadow_agreed for r in rows) == compared
    assert {k for r in rows for k in r.outputs} == {"high"}



class _Recording(FakeModel):
    """Remembers the rows of every predict call, as plain lists."""

    def __init__(self, version: int) -> None:
        super().__init__("churn", version, signature=LABELLED)
        self.seen: list[dict[str, list[Any]]] = []

    def predict(self, columns: dict[str, Any]) -> dict[str, Any]:
        self.seen.append({k: np.asarray(v).tolist() for k, v in columns.items()})
        return super().predict(columns)


def test_a_queued_shadow_copy_is_left_alone_by_the_collector_and_reaches_it_unchanged() -> None:
    cols = {"x": [1.5, 2.5], "y": [60, 7], "plan": ["gold", "tin"]}
    copy = _Copy.of(cols, 2, ["high", "low"])
    gc.collect(0)  # survived a young collection: tuples of atoms are no longer tracked
    assert not any(map(gc.is_tracked, (copy.names, copy.stable, *copy.values)))
    assert copy.columns == cols and copy.columns["x"] is not cols["x"]
    nested = _Copy.of({"x": np.array([1.0]), "v": [[1, 2]]}, 1, ["k"])  # kept as given
    assert nested.columns["v"] == [[1, 2]] and isinstance(nested.columns["x"], np.ndarray)

    async def main() -> tuple[list[Any], _Recording]:
        stable = _served(1)
        model = _Recording(2)
        cand = ServedModel.create(model, ResolvedSettings(8, 0.0, 1000.0, None, None),
                                  Metrics())
        outcomes = Outcomes("s1")
        shadow = Shadow(Split(_rollout(0.0, phase="shadow"), stable, cand, outcomes),
                        Metrics(), capacity=10)
        offered = [{"x": [0.5], "y": [60], "plan": ["gold"]}, cols,
                   {"x": [-3.0], "y": [51], "plan": ["tin"]}]
        for c in offered:
            shadow.offer(c, len(c["x"]), await stable.batcher.submit(c, len(c["x"])))
        await wait_until(lambda: sum(r.shadow_compared for r in outcomes._rows.values())
                         == 3, 5)
        await shadow.close()
        model.seen.insert(0, {k: [v for c in offered for v in c[k]] for k in cols})
        return outcomes.take(), model
    rows, model = run(main())
    expected, *seen = model.seen
    # the candidate got every offered row, in order, as the stable version did
    assert {k: [v for batch in seen for v in batch[k]] for k in expected} == expected
    assert sum(r.shadow_agreed for r in rows) == 3  # the labels agree (tuples vs lists)


def test_the_shadow_gate_yields_to_the_stable_version_and_caps_its_share() -> None:
    gate = ShadowGate(share=0.05, burst_s=0.02, now=100.0)
    assert gate.wait(100.0, stable_busy=False) == 0.0
    assert gate.wait(100.0, stable_busy=True) == math.inf  # live traffic first
    gate.spend(0.07, 100.0)  # a batch that cost 70 ms: 50 ms in debt
    assert gate.wait(100.0, stable_busy=False) == pytest.approx(1.0, abs=1e-3)
    assert gate.wait(100.5, stable_busy=False) == pytest.approx(0.5, abs=1e-3)
    assert gate.wait(101.001, stable_busy=False) == 0.0
    gate.spend(0.0, 1000.0)  # an idle hour saves no more than one burst
    gate.spend(0.021, 1000.0)
    assert gate.wait(1000.0, stable_busy=False) > 0
    # over a long stretch of back-to-back batches the shadow gets about its share
    gate, now, spent = ShadowGate(share=0.05, burst_s=0.02, now=0.0), 0.0, 0.0
    while now < 100.0:
        now += gate.wait(now, stable_busy=False)
        gate.spend(0.004, now)
        spent += 0.004
    assert spent / now == pytest.approx(0.05, rel=0.05)
    # a batch holds as many rows as one burst pays for, at least one
    assert gate.batch_rows(None, 256) == 256
    assert gate.batch_rows(0.001, 256) == 20
    assert gate.batch_rows(1.0, 256) == 1
    with pytest.raises(ValueError, match="share"):
        ShadowGate(share=0.0)


def test_a_shadow_waits_for_the_gate_and_counts_what_it_dropped_meanwhile() -> None:
    async def main() -> tuple[list[Any], Shadow, FakeModel]:
        stable, cand = _served(1), _served(2)
        outcomes = Outcomes("s1")
        clock = [0.0]
        gate = ShadowGate(share=0.1, burst_s=0.01, now=0.0)
        gate.spend(1.0, 0.0)  # in debt for 10 s of the injected clock
        shadow = Shadow(Split(_rollout(0.0, phase="shadow"), stable, cand, outcomes),
                        Metrics(), capacity=5, gate=gate, clock=lambda: clock[0])
        cols = {"x": [1.0], "y": [60], "plan": ["gold"]}
        answer = await stable.batcher.submit(cols, 1)
        for _ in range(12):
            shadow.offer(cols, 1, answer)
        await asyncio.sleep(0.3)  # the worker sleeps on the gate: nothing reaches v2
        assert cand.servable.batches == [] and shadow.dropped == 7
        clock[0] = 11.0  # the debt is paid
        await wait_until(lambda: sum(r.shadow_compared for r in outcomes._rows.values()), 15)
        await shadow.close()
        return outcomes.take(), shadow, cand.servable
    rows, shadow, model = run(main())
    assert sum(r.shadow_dropped for r in rows) == 7 == shadow.dropped
    assert sum(r.shadow_compared for r in rows) == 5 == sum(r.shadow_agreed for r in rows)
    assert model.batches == [5]  # the queued copies in one predict call
    assert sum(r.requests for r in rows) == 5


def test_a_shadow_batch_with_a_failing_row_fails_only_its_copy() -> None:
    async def main() -> list[Any]:
        stable = _served(1)
        failing = FakeModel("churn", 2, signature=LABELLED,
                            fail_when=lambda c: 99 in c["y"].tolist())
        cand = ServedModel.create(failing, ResolvedSettings(8, 0.0, 1000.0, None, None),
                                  Metrics())
        outcomes = Outcomes("s1")
        shadow = Shadow(Split(_rollout(0.0, phase="shadow"), stable, cand, outcomes),
                        Metrics(), capacity=10)
        good, bad = {"x": [1.0], "y": [60], "plan": ["gold"]}, \
            {"x": [1.0], "y": [99], "plan": ["gold"]}
        for cols in (good, bad, good, good):
            shadow.offer(cols, 1, await stable.batcher.submit(cols, 1))
        await wait_until(lambda: sum(r.requests for r in outcomes._rows.values()) == 4, 5)
        await shadow.close()
        return outcomes.take()
    rows = run(main())
    assert sum(r.errors for r in rows) == 1
    assert sum(r.shadow_compared for r in rows) == 3 == sum(r.shadow_agreed for r in rows)


def test_a_shadowed_candidate_answering_nan_counts_as_failing() -> None:
    async def main() -> list[Any]:
        stable = _served(1)
        nan = ServedModel.create(_NaNModel("churn", 2, signature=LABELLED),
                                 ResolvedSettings(8, 0.0, 1000.0, None, None), Metrics())
        outcomes = Outcomes("s1")
        shadow = Shadow(Split(_rollout(0.0, phase="shadow"), stable, nan, outcomes), Metrics(),
                        capacity=10)
        cols = {"x": [1.0], "y": [60], "plan": ["gold"]}
        answer = await stable.batcher.submit(cols, 1)
        for _ in range(5):
            shadow.offer(cols, 1, answer)
        await wait_until(lambda: sum(r.requests for r in outcomes._rows.values()) == 5, 5)
        await shadow.close()
        return outcomes.take()
    rows = run(main())
    assert sum(r.errors for r in rows) == 5 and sum(r.shadow_compared for r in rows) == 0


class _Regressor(FakeModel):
    """Answers ``x + offset``: a regression whose versions differ a little (or a lot)."""

    def __init__(self, version: int, offset: float) -> None:
        super().__init__("churn", version, signature=Signature(
            inputs=SIGNATURE.inputs, outputs=[Field("prediction", "float")],
            task="regression"))
        self.offset = offset

    def predict(self, columns: dict[str, Any]) -> dict[str, Any]:
        return {"prediction": [float(x) + self.offset for x in columns["x"]]}


@pytest.mark.parametrize(("offset", "agreed"), [(0.001, 1), (50.0, 0)])
def test_a_regression_agrees_in_shadow_when_its_answer_falls_in_the_same_bin(
        offset: float, agreed: int) -> None:
    async def main() -> list[Any]:
        def served(version: int, offset: float) -> ServedModel:
            return ServedModel.create(_Regressor(version, offset),
                                      ResolvedSettings(8, 0.0, 1000.0, None, None), Metrics())
        stable, cand = served(1, 0.0), served(2, offset)
        outcomes = Outcomes("s1")
        shadow = Shadow(Split(_rollout(0.0, phase="shadow"), stable, cand, outcomes), Metrics(),
                        capacity=10)
        cols = {"x": [3.3], "y": [1], "plan": ["gold"]}
        shadow.offer(cols, 1, await stable.batcher.submit(cols, 1))
        await wait_until(lambda: sum(r.shadow_compared for r in outcomes._rows.values()), 5)
        await shadow.close()
        return outcomes.take()
    rows = run(main())
    assert sum(r.shadow_compared for r in rows) == 1
    assert sum(r.shadow_agreed for r in rows) == agreed


def test_settings_check_the_key_header() -> None:
    assert Settings(key_header="X-Customer").key_header == "x-customer"
    with pytest.raises(ConfigError, match="not an HTTP header name"):
        Settings(key_header="x customer")
    with pytest.raises(ConfigError, match="shadow_queue"):
        Settings(shadow_queue=0)


# -- a server following a rollout ---------------------------------------------------------

@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("REPRISE_ACTOR", "tester")
    w = reprise.init(tmp_path)
    register_package("churn", pkg(1.0), workspace=w)
    register_package("churn", pkg(0.5), workspace=w)
    promote("churn", 1, "production", workspace=w)
    yield w
    w.close()


def _rows(n: int, seed: int = 0) -> list[dict[str, float]]:
    rng = np.random.default_rng(seed)
    return [{"a": float(a), "b": float(b)} for a, b in rng.normal(size=(n, 2))]


def test_a_server_routes_records_and_gives_up_a_rollout(ws: Any) -> None:
    rec = start_rollout("churn", 2, steps=[30, 100], interval="1h", workspace=ws)
    settings = Settings(poll_interval=0.05, server_name="s1")

    async def main() -> tuple[list[Any], list[Any], list[Any], Any]:
        async with serving(RegistrySource(ws), ["churn@production"], settings) as (c, app):
            state = app.state.reprise
            await wait_until(lambda: "churn@production" in state.table.splits, 20)
            listed = (await c.get("/v1/models")).json()["models"][0]
            assert listed["rollout"]["candidate"] == 2 and listed["rollout"]["weight"] == 30
            during = [await c.post("/v1/models/churn/predict", json=[row],
                                   headers={"x-request-key": f"k{i % 50}"})
                      for i, row in enumerate(_rows(300))]
            pinned = [await c.post("/v1/models/churn/versions/2/predict", json=[row])
                      for row in _rows(5)]
            await state.rollouts.flush()
            weights = (await c.get("/metrics")).text
            assert f'reprise_rollout_weight{{model="churn",rollout="{rec.id}",version="2"}} ' \
                   '30.0' in weights
            await asyncio.to_thread(abort_rollout, "churn", "test over", workspace=ws)
            await wait_until(lambda: not state.table.splits, 10)
            after = [await c.post("/v1/models/churn/predict", json=[row])
                     for row in _rows(50)]
            await wait_until(lambda: 2 not in state.table.versions["churn"], 10)
            return during, pinned, after, (await c.get("/metrics")).text
    during, pinned, after, metrics = run(main())
    assert all(r.status_code == 200 for r in during + pinned + after)
    versions = [int(r.headers["x-reprise-model-version"]) for r in during]
    assert all(r.json()["version"] == v for r, v in zip(during, versions, strict=True))
    by_key: dict[str, set[int]] = {}
    for i, v in enumerate(versions):
        by_key.setdefault(f"k{i % 50}", set()).add(v)
    assert all(len(vs) == 1 for vs in by_key.values())  # sticky
    assert 0.1 < versions.count(2) / len(versions) < 0.55  # ~30 % of 50 keys
    assert {int(r.headers["x-reprise-model-version"]) for r in pinned} == {2}
    assert {int(r.headers["x-reprise-model-version"]) for r in after} == {1}
    stored = ws.metadata.window_buckets(rec.id, 0, 2**62)
    assert {r.server for r in stored} == {"s1"}
    counted = {v: sum(r.requests for r in stored if r.version == v) for v in (1, 2)}
    assert counted == {1: versions.count(1), 2: versions.count(2)}  # pinned: not counted
    assert sum(sum(r.outputs.values()) for r in stored) == len(during)
    assert "reprise_rollout_weight{" not in metrics  # the rollout ended: its series went


def test_a_server_not_deciding_applies_a_decision_within_a_second(ws: Any) -> None:
    """The alias is polled every 3 s, but while a rollout runs the record is read every
    second: an abort decided elsewhere, just after a poll, empties the split within about a
    second, not at the next poll."""
    rec = start_rollout("churn", 2, steps=[30, 100], interval="1h", workspace=ws)
    ws.metadata.acquire_lease(f"rollout:{rec.id}", "another-server", 3600, time.time())

    async def main() -> float:
        settings = Settings(poll_interval=3.0, server_name="s1")
        async with serving(RegistrySource(ws), ["churn@production"], settings) as (c, app):
            state = app.state.reprise
            await wait_until(lambda: "churn@production" in state.table.splits, 20)
            start = time.monotonic()
            await asyncio.to_thread(abort_rollout, "churn", "decided elsewhere", workspace=ws)
            await wait_until(lambda: not state.table.splits, 10)
            return time.monotonic() - start
    took = run(main())
    assert took < 2.0
    assert ws.metadata.lease_holder(f"rollout:{rec.id}", time.time()) == "another-server"


def test_a_rollout_keyed_by_an_input_column_sticks_by_its_value(ws: Any) -> None:
    start_rollout("churn", 2, steps=[50, 100], interval="1h", key_column="a", workspace=ws)
    values = [float(v) for v in np.linspace(-2, 2, 40)]

    async def main() -> list[tuple[float, int]]:
        settings = Settings(poll_interval=0.05, key_header=None)
        async with serving(RegistrySource(ws), ["churn@production"], settings) as (c, app):
            await wait_until(lambda: app.state.reprise.table.splits, 20)
            out = []
            for i in range(200):
                a = values[i % 40]
                body = ({"columns": {"a": [a, 0.0], "b": [0.5, 0.1]}} if i % 2
                        else [{"a": a, "b": 0.5}])
                r = await c.post("/v1/models/churn/predict", json=body)
                assert r.status_code == 200, r.text
                out.append((a, int(r.headers["x-reprise-model-version"])))
            return out
    answers = run(main())
    by_value: dict[float, set[int]] = {}
    for a, v in answers:
        by_value.setdefault(a, set()).add(v)
    assert all(len(vs) == 1 for vs in by_value.values())
    assert {v for vs in by_value.values() for v in vs} == {1, 2}
