"""The response cache (issue 18.4): a bounded LRU of answers per model version and
canonical input row; per row (a batch is served partly from it), counted in /metrics,
dropped when the versions a name answers with change (hot swap, rollouts), never shared
across versions, and correct and bounded under many threads."""

from __future__ import annotations

import asyncio
import gc
import random
import struct
import threading
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

import reprise
from reprise.core.errors import ConfigError
from reprise.registry import RegistrySource, promote, register_package
from reprise.serve import Settings, abort_rollout, start_rollout
from reprise.serve._cache import (
    _MAX_LAYOUTS,
    _WINDOW,
    InputDtypes,
    ResponseCache,
    _Collector,
    _Doorkeeper,
    _entry_size,
    input_dtypes,
    row_keys,
)
from tests.registry.test_registry import pkg
from tests.serve.fakes import SIGNATURE, FakeSource, run, score, serving, wait_until

DTYPES = input_dtypes(SIGNATURE)
# these tests look at the table: every miss stored (the default stores on a second miss)
CACHED = Settings(poll_interval=0.01, cache_mb=1, cache_admit="first", warmup_idle=0)


def _held(cache: ResponseCache) -> int:
    """The bytes of the cache's entries, counted one by one."""
    return sum(_entry_size(k[2], blob) for k, blob in cache._table.items())


def _put(cache: ResponseCache, name: str, version: int, key: bytes, value: float) -> None:
    cache.put(name, version, [key], {"score": [value], "label": ["x"]}, {"score": "f8"}, {})


def _get(cache: ResponseCache, name: str, version: int, key: bytes) -> Any:
    found, _ = cache.get(name, version, [key])
    return None if found[0] is None else found[0][0]


def _metric(text: str, name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    return 0.0


# -- the cache itself -----------------------------------------------------------------------

def test_least_recently_used_goes_first() -> None:
    probe = ResponseCache(10**6)
    _put(probe, "m", 1, b"a", 1.0)
    one = probe.size
    cache = ResponseCache(3 * one)  # room for three entries of this size
    for k, v in ((b"a", 1.0), (b"b", 2.0), (b"c", 3.0)):
        _put(cache, "m", 1, k, v)
    assert _get(cache, "m", 1, b"a") == 1.0  # a is now the most recently used
    _put(cache, "m", 1, b"d", 4.0)  # evicts b, the least recently used
    assert _get(cache, "m", 1, b"b") is None
    assert [_get(cache, "m", 1, k) for k in (b"a", b"c", b"d")] == [1.0, 3.0, 4.0]
    assert len(cache) == 3 and cache.size == 3 * one


@settings(max_examples=80, deadline=None)
@given(bound=st.integers(1, 20_000), door=st.booleans(),
       ops=st.lists(st.tuples(st.integers(0, 30), st.integers(0, 200)), max_size=80))
def test_the_bound_in_bytes_holds_after_every_store(bound: int, door: bool,
                                                    ops: list[tuple[int, int]]) -> None:
    cache = ResponseCache(bound, doorkeeper=door)
    held = cache.size  # the doorkeeper's bytes (none under 4 KiB), counted from the start
    assert held == (1 << (bound // 64).bit_length() - 1 if door and bound >= 4096 else 0)
    for key, length in ops:
        cache.put("m", 1, [b"%d" % key], {"label": ["x" * length]}, {}, {})
        assert cache.size <= bound
        assert cache.size == held + _held(cache)
        assert len(cache) == 0 or cache.size > held


def test_the_doorkeeper_stores_a_row_when_it_misses_a_second_time() -> None:
    cache = ResponseCache(1 << 16, doorkeeper=True)
    assert cache.size == (1 << 16) // 64  # its bit array, within the bound
    # while there is room, every miss is stored (it evicts nothing)
    _put(cache, "m", 1, b"k", 1.0)
    assert _get(cache, "m", 1, b"k") == 1.0
    filler = 0
    while not cache._full:  # fill it until a store evicts (another version: its own counts)
        _put(cache, "m", 2, b"f%d" % filler, 0.0)
        filler += 1
    # none skipped; the store that made it full evicted "k" (used before the fillers)
    assert ("m", 2) not in cache._counts and len(cache) == filler
    assert _get(cache, "m", 1, b"k") is None
    # full: a row is stored only on its second miss, evicting the least recently used
    _put(cache, "m", 1, b"n", 1.0)
    assert len(cache) == filler and _get(cache, "m", 1, b"n") is None
    _put(cache, "m", 1, b"n", 1.0)  # the second miss: stored
    assert _get(cache, "m", 1, b"n") == 1.0
    # a batch: only its rows seen before are stored
    cache.put("m", 1, [b"a", b"b"], {"score": [2.0, 3.0], "label": ["y", "z"]},
              {"score": "f8"}, {})
    cache.put("m", 1, [b"a", b"c"], {"score": [2.0, 4.0], "label": ["y", "w"]},
              {"score": "f8"}, {})
    assert [_get(cache, "m", 1, k) for k in (b"a", b"b", b"c")] == [2.0, None, None]
    # hits, misses, evictions, invalidations, first misses not stored, bypassed
    assert cache._counts[("m", 1)] == [3, 4, 1, 0, 4, 0]
    # the two rows stored evicted the least recently used: the first two fillers
    assert cache._counts[("m", 2)][2] == 2 and _get(cache, "m", 2, b"f2") == 0.0
    text = generate_latest_of(cache)
    assert _metric(text, "reprise_cache_unadmitted_total", model="m", version="1") == 4
    assert _metric(text, "reprise_cache_bytes") == cache.size
    # dropping entries makes room again: a row is stored on its first miss until a store
    # has to evict
    cache.invalidate("m", 2)
    assert not cache._full
    _put(cache, "m", 1, b"fresh", 5.0)
    assert _get(cache, "m", 1, b"fresh") == 5.0
    # a bound under 4 KiB has no doorkeeper: every miss is stored
    small = ResponseCache(4000, doorkeeper=True)
    _put(small, "m", 1, b"k", 1.0)
    assert _get(small, "m", 1, b"k") == 1.0


def test_the_doorkeeper_forgets_after_an_eighth_of_its_slots() -> None:
    door = _Doorkeeper(64)  # cleared after 8 marks
    assert not door.seen(b"first") and door.seen(b"first")
    fresh = iter(range(1000))
    while door.marked:  # new rows until the clearing
        door.seen(b"%d" % next(fresh))
    assert next(fresh) <= 8 + 7  # 7 more marks (and a few false positives at most)
    assert not any(door.bits) and not door.seen(b"first")  # forgotten, and marked again
    big = _Doorkeeper(1 << 16)  # 2 bits of 65,536 per row: few false positives
    assert sum(big.seen(b"%d" % i) for i in range(1000)) <= 10


def test_a_version_that_never_hits_is_looked_up_one_request_in_64() -> None:
    cache = ResponseCache(1 << 22, doorkeeper=True, min_hit_rate=0.01)
    keys = [b"%d" % i for i in range(4 * _WINDOW)]
    assert cache.looks("m", 1, 5, 1)  # not judged yet: every request is looked up
    cache.get("m", 1, keys[:_WINDOW - 1])
    assert not cache.bypassed("m", 1)
    cache.get("m", 1, keys[_WINDOW - 1:_WINDOW])  # a window of 2,048 rows without a hit
    assert cache.bypassed("m", 1) and not cache.bypassed("m", 2)
    assert [cache.looks("m", 1, s, 3) for s in (0, 1, 16, 32, 48, 63, 64, 128, 129, -64)] \
        == [True, False, False, False, False, False, True, True, False, True]
    assert cache._counts[("m", 1)][5] == 18  # six requests of 3 rows went straight by
    assert cache.looks("m", 2, 1, 1)  # another version: its own verdict
    text = generate_latest_of(cache)
    assert _metric(text, "reprise_cache_bypassed", model="m", version="1") == 1
    assert _metric(text, "reprise_cache_bypasses_total", model="m", version="1") == 18
    # each window without hits samples another 64th of the bodies, so a hot request
    # outside the first one is looked up in time
    assert not cache.looks("m", 1, 40, 1)
    turned = 0
    while not cache.looks("m", 1, 40, 1):
        cache.get("m", 1, keys[2 * _WINDOW + 128 * turned:2 * _WINDOW + 128 * (turned + 1)])
        turned += 1
    assert turned == 24 and cache.bypassed("m", 1)  # (40 + 24) % 64 == 0
    # the sampled lookups go on judging, in windows of 128 (~8,192 requests): one that
    # hits 1 % brings every lookup back
    hot = keys[:40]
    _put_all(cache, hot)  # bypassed: the doorkeeper's even with room (a first miss)
    assert len(cache) == 0 and cache._counts[("m", 1)][4] == 40
    _put_all(cache, hot)  # stored (the second miss)
    assert len(cache) == 40
    cache.get("m", 1, keys[_WINDOW:_WINDOW + 127])
    assert cache.bypassed("m", 1)
    cache.get("m", 1, hot[:1])  # 1 hit of the window's 128: 0.78 %
    assert cache.bypassed("m", 1)
    cache.get("m", 1, keys[_WINDOW + 127:_WINDOW + 253])
    cache.get("m", 1, hot[:2])  # 2 hits of 128: 1.6 %
    assert not cache.bypassed("m", 1) and cache.looks("m", 1, 1, 1)
    assert _metric(generate_latest_of(cache), "reprise_cache_bypassed", model="m",
                   version="1") == 0
    # releasing the version forgets its verdict; 0 never bypasses
    cache.get("m", 1, keys[3 * _WINDOW:])
    assert cache.bypassed("m", 1)
    cache.invalidate("m", 1)
    assert not cache.bypassed("m", 1)
    never = ResponseCache(1 << 22)
    never.get("m", 1, keys)
    assert not never.bypassed("m", 1)
    with pytest.raises(ValueError, match="min_hit_rate"):
        ResponseCache(1 << 20, min_hit_rate=1.0)


def _put_all(cache: ResponseCache, keys: list[bytes]) -> None:
    cache.put("m", 1, keys, {"score": [1.0] * len(keys)}, {"score": "f8"}, {})


def generate_latest_of(cache: ResponseCache) -> str:
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry()
    registry.register(_Collector(cache))
    return generate_latest(registry).decode()


def test_an_entry_larger_than_the_bound_is_not_stored() -> None:
    cache = ResponseCache(500)
    cache.put("m", 1, [b"k"], {"label": ["x" * 1000]}, {}, {})
    assert len(cache) == 0 and cache.size == 0


def test_the_bound_is_real_memory() -> None:
    """What the cache counts is at least what the entries really take (tracemalloc), and
    not wildly more: the bound in MiB is a bound on memory."""
    rng = random.Random(0)
    n = 5000
    gc.collect()
    tracemalloc.start()
    try:
        cache = ResponseCache(10**9)
        before = tracemalloc.get_traced_memory()[0]
        for i in range(n):
            # fresh objects per answer, as the model's outputs are
            cache.put("churn", 3, [rng.randbytes(16)],
                      {"score": [rng.random()], "label": [f"class-{i % 7}-" + "x" * 8],
                       "proba": [[rng.random(), rng.random()]]},
                      {"score": "f8"}, {})
        gc.collect()
        real = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert real <= cache.size, (real, cache.size)
    assert cache.size < 1.6 * real, (real, cache.size)


def test_versions_never_share_answers() -> None:
    cache = ResponseCache(10**6)
    _put(cache, "m", 1, b"k", 1.0)
    assert _get(cache, "m", 2, b"k") is None
    assert _get(cache, "other", 1, b"k") is None
    assert _get(cache, "m", 1, b"k") == 1.0


def test_invalidate_a_name_or_one_version() -> None:
    cache = ResponseCache(10**6)
    for v in (1, 2):
        _put(cache, "m", v, b"k", float(v))
    _put(cache, "n", 1, b"k", 9.0)
    assert cache.invalidate("m", 1) == 1
    assert _get(cache, "m", 1, b"k") is None and _get(cache, "m", 2, b"k") == 2.0
    assert cache.invalidate("m") == 1
    assert _get(cache, "n", 1, b"k") == 9.0
    assert cache.size == _held(cache)


def test_keys_are_canonical_for_the_signature() -> None:
    def key(row: dict[str, Any]) -> bytes:
        checked = SIGNATURE.check_records([row])
        assert checked.ok, checked.errors
        return row_keys(checked.columns, 1, DTYPES)[0]

    base = key({"x": 1.0, "y": 2, "plan": "basic"})
    # another key order, an int for the float field, a float for the int field
    assert key({"plan": "basic", "y": 2, "x": 1}) == base
    assert key({"y": 2.0, "x": 1.0, "plan": "basic"}) == base
    # numpy scalars of the model's own dtypes (as the OIP's tensors give them)
    assert row_keys({"x": np.array([1.0]), "y": np.array([2]), "plan": ["basic"]}, 1,
                    DTYPES)[0] == base
    assert key({"x": 1.5, "y": 2, "plan": "basic"}) != base
    assert key({"x": 1.0, "y": 2, "plan": "gold"}) != base
    # all-float rows take a fast path; a bool (1.0 to the model) the value-by-value one:
    # both give one key for one row as the model sees it
    floats = {"a": "float", "b": "float"}
    assert row_keys({"a": [1.0], "b": [True]}, 1, floats) == \
        row_keys({"b": [1], "a": [1.0]}, 1, floats)
    # without a signature, types tell values apart: 1, 1.0, True and "1" are four rows
    assert len({row_keys({"v": [v]}, 1)[0] for v in (1, 1.0, True, "1", None)}) == 5
    # a value never leaks into the next column's name
    assert row_keys({"a": ["b"], "c": ["d"]}, 1) != row_keys({"a": ["bc"], "": ["d"]}, 1)


def test_float_rows_are_keyed_by_their_packed_values() -> None:
    """An all-float row's key is its values as the model's float64 (no digest): exact, so
    rows a digest could confuse never meet; whatever ``struct`` cannot pack is keyed value
    by value, never a wrong hit."""
    floats = InputDtypes({"a": "float", "b": "float"})
    [key] = row_keys({"a": [0.1], "b": [2]}, 1, floats)
    assert len(key) == 16 + 2 * 8 and key.endswith(struct.pack("<2d", 0.1, 2.0))
    # the names are in the tag: the same values under other names are another row
    assert row_keys({"a": [0.1], "c": [2]}, 1, InputDtypes({"a": "float", "c": "float"})
                    ) != [key]
    # several rows at once give each row's key alone
    batch = {"a": [0.1, 0.2, 0.3], "b": [2.0, 3.0, 4.0]}
    assert row_keys(batch, 3, floats) == [row_keys({"a": [a], "b": [b]}, 1, floats)[0]
                                          for a, b in zip(batch["a"], batch["b"], strict=True)]
    # numpy columns (programmatic use) are keyed value by value, their dtypes kept apart:
    # a float32 column is not the float64 values it would pack as
    as32 = row_keys({k: np.array(v, dtype="<f4" if k == "a" else "<f8")
                     for k, v in batch.items()}, 3, floats)
    as64 = row_keys({k: np.array(v, dtype="<f8") for k, v in batch.items()}, 3, floats)
    assert all(len(k) == 16 for k in as32 + as64) and not set(as32) & set(as64)
    assert not set(as32) & set(row_keys({"a": [float(np.float32(v)) for v in batch["a"]],
                                         "b": batch["b"]}, 3, floats))
    # a value struct refuses (None, a string): a 16-byte digest of the row, never equal
    # to a packed key, and distinct from the float it is not
    odd = [row_keys({"a": [v], "b": [2.0]}, 1, floats)[0] for v in (None, "0.1", [0.1])]
    assert all(len(k) == 16 for k in odd) and len({*odd, key}) == 4
    # in a batch, each row as alone: packed when it packs
    assert row_keys({"a": [0.1, None], "b": [2, 2]}, 2, floats) == [key, odd[0]]


def test_many_threads_get_only_right_answers_and_the_bound_holds() -> None:
    cache = ResponseCache(40_000)  # far fewer entries than keys: evictions all the time
    errors: list[str] = []
    start = threading.Barrier(16)

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        start.wait()
        for _ in range(3000):
            k, version = rng.randrange(400), rng.choice((1, 2))
            key = b"%d" % k
            got = _get(cache, "m", version, key)
            if got is None:
                _put(cache, "m", version, key, k * 10.0 + version)
            elif got != k * 10.0 + version:
                errors.append(f"{k} v{version}: {got}")
            if cache.size > cache.max_bytes:
                errors.append(f"over the bound: {cache.size}")
            if rng.random() < 0.002:
                cache.invalidate("m", version)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert 0 < cache.size <= cache.max_bytes
    assert cache.size == _held(cache)


def test_settings_check_the_bound_and_the_warm_up_period() -> None:
    with pytest.raises(ConfigError, match="cache_mb"):
        Settings(cache_mb=-1)
    with pytest.raises(ConfigError, match="warmup_idle"):
        Settings(warmup_idle=float("nan"))
    assert Settings().cache_mb == 0  # opt-in
    with pytest.raises(ConfigError, match="cache_admit must be 'first'.*got 'third'"):
        Settings(cache_mb=1, cache_admit="third")
    assert Settings().cache_admit == "second"
    for bad in (-0.1, 1.0, float("nan")):
        with pytest.raises(ConfigError, match="cache_min_hit_rate must be at least 0"):
            Settings(cache_mb=1, cache_min_hit_rate=bad)


# -- in the server ---------------------------------------------------------------------------

def _row(i: int) -> dict[str, Any]:
    return {"x": float(i % 10), "y": i % 100, "plan": "gold" if i % 2 else "basic"}


def _scores(r: Any) -> list[float]:
    assert r.status_code == 200, r.text
    predictions = r.json()["predictions"]
    if isinstance(predictions, dict):  # the columnar form answers in columns
        return list(predictions["score"])
    return [p["score"] for p in predictions]


def test_other_spellings_of_a_row_hit_and_a_batch_is_served_partly_from_the_cache() -> None:
    source = FakeSource()
    model = source.models["churn"][1]

    async def main() -> None:
        async with serving(source, ["churn@production"], CACHED) as (c, app):
            url = "/v1/models/churn/predict"
            model.batches.clear()
            first = await c.post(url, json=[{"x": 3.0, "y": 7, "plan": "gold"}])
            assert _scores(first) == [score(3.0, 7, "gold", 1)]
            # the same row: keys in another order, an int for the float, the columnar form
            again = [await c.post(url, json=[{"plan": "gold", "y": 7, "x": 3}]),
                     await c.post(url, json={"records": [{"x": 3, "y": 7.0, "plan": "gold"}]}),
                     await c.post(url, json={"columns": {"x": [3], "y": [7], "plan": ["gold"]}}),
                     await c.post("/v2/models/churn/infer", json={"inputs": [
                         {"name": "x", "datatype": "FP64", "shape": [1], "data": [3.0]},
                         {"name": "y", "datatype": "INT64", "shape": [1], "data": [7]},
                         {"name": "plan", "datatype": "BYTES", "shape": [1],
                          "data": ["gold"]}]})]
            assert [_scores(r) for r in again[:3]] == [[score(3.0, 7, "gold", 1)]] * 3
            assert again[3].status_code == 200
            assert model.batches == [1]  # one predict call for all five
            # a batch of five with three rows cached: the model computes the other two
            rows = [_row(1), {"x": 3.0, "y": 7, "plan": "gold"}, _row(2), _row(3), _row(1)]
            await c.post(url, json=[_row(1)])
            model.batches.clear()
            mixed = await c.post(url, json=rows)
            assert _scores(mixed) == [score(r["x"], r["y"], r["plan"], 1) for r in rows]
            assert model.batches == [2]  # _row(2) and _row(3)
            text = (await c.get("/metrics")).text
            labels = {"model": "churn", "version": "1"}
            assert _metric(text, "reprise_cache_hits_total", **labels) == 4 + 3
            assert _metric(text, "reprise_cache_misses_total", **labels) == 1 + 1 + 2
            state = app.state.reprise
            assert _metric(text, "reprise_cache_bytes") == state.cache.size > 0
            assert _metric(text, "reprise_cache_entries") == 4
            assert _metric(text, "reprise_cache_max_bytes") == 1024 * 1024
            # requests are still counted as requests (cached or not)
            assert _metric(text, "reprise_requests_total", code="200", **labels) == 7
    run(main())


def test_without_the_option_there_is_no_cache() -> None:
    source = FakeSource()
    model = source.models["churn"][1]

    async def main() -> None:
        async with serving(source, ["churn@production"], Settings(poll_interval=0.01)
                           ) as (c, app):
            assert app.state.reprise.cache is None
            model.batches.clear()
            for _ in range(3):
                await c.post("/v1/models/churn/predict", json=[_row(1)])
            assert model.batches == [1, 1, 1]
            assert "reprise_cache_hits" not in (await c.get("/metrics")).text
    run(main())


def test_a_hot_swap_drops_the_cache_and_answers_come_from_the_new_version() -> None:
    source = FakeSource()

    async def main() -> None:
        async with serving(source, ["churn@production"], CACHED) as (c, app):
            state, url = app.state.reprise, "/v1/models/churn/predict"
            for _ in range(2):
                assert _scores(await c.post(url, json=[_row(5)])) == \
                    [score(5.0, 5, "gold", 1)]
            assert len(state.cache) == 1
            source.aliases["churn@production"] = 2
            await wait_until(lambda: state.table.by_ref["churn@production"].version == 2)
            assert len(state.cache) == 0  # invalidated on the swap
            moved = await c.post(url, json=[_row(5)])
            assert moved.json()["version"] == 2
            assert _scores(moved) == [score(5.0, 5, "gold", 2)]
            assert {k[1] for k in state.cache._table} == {2}
            text = (await c.get("/metrics")).text
            assert _metric(text, "reprise_cache_invalidations_total", model="churn",
                           version="1") == 1
    run(main())


def test_concurrent_clients_across_hot_swaps_get_their_versions_answers() -> None:
    """Eight clients repeating rows while the alias moves twice: every answer is the one
    of the version named in it, and the bound holds."""
    source = FakeSource()
    for m in source.models["churn"].values():
        m.delay = 0.001
    tiny = Settings(poll_interval=0.01, cache_mb=0.002, warmup_idle=0)  # ~2 KB: evicting

    moved = asyncio.Event()

    async def client(c: Any, k: int, answers: list[tuple[int, Any]]) -> None:
        rng = random.Random(k)
        n = 0  # at least 40 requests each, and on until both moves are done (a fast
        while n < 40 or not moved.is_set():  # client would otherwise see one version)
            i = rng.randrange(12)
            answers.append((i, await c.post("/v1/models/churn/predict", json=[_row(i)])))
            n += 1

    async def mover(state: Any) -> None:
        for target in (2, 1):
            await asyncio.sleep(0.15)
            source.aliases["churn@production"] = target
            await wait_until(lambda t=target: state.table.by_ref["churn@production"]
                             .version == t)
            await asyncio.sleep(0.05)  # some answers from each version
        moved.set()

    async def main() -> tuple[list[tuple[int, Any]], Any]:
        answers: list[tuple[int, Any]] = []
        async with serving(source, ["churn@production"], tiny) as (c, app):
            state = app.state.reprise
            await asyncio.gather(mover(state), *(client(c, k, answers) for k in range(8)))
            assert state.cache.size <= state.cache.max_bytes
            return answers, (await c.get("/metrics")).text
    answers, text = run(main())
    versions = set()
    for i, r in answers:
        row, version = _row(i), r.json()["version"]
        assert _scores(r) == [score(row["x"], row["y"], row["plan"], version)]
        assert int(r.headers["x-reprise-model-version"]) == version
        versions.add(version)
    assert versions == {1, 2}
    hits = sum(_metric(text, "reprise_cache_hits_total", model="churn", version=v)
               for v in ("1", "2"))
    assert hits > 0
    assert _metric(text, "reprise_cache_evictions_total", model="churn", version="1") + \
        _metric(text, "reprise_cache_evictions_total", model="churn", version="2") > 0


# -- rollouts --------------------------------------------------------------------------------

@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("REPRISE_ACTOR", "tester")
    w = reprise.init(tmp_path)
    register_package("churn", pkg(1.0), workspace=w)
    register_package("churn", pkg(0.01), workspace=w)
    promote("churn", 1, "production", workspace=w)
    yield w
    w.close()


def _rows(n: int) -> list[dict[str, float]]:
    rng = np.random.default_rng(0)
    return [{"a": float(a), "b": float(b)} for a, b in rng.normal(size=(n, 2))]


def test_a_canary_caches_each_answer_under_the_version_that_gave_it(ws: Any) -> None:
    start_rollout("churn", 2, steps=[50, 100], interval="1h", workspace=ws)
    settings = Settings(poll_interval=0.05, server_name="s1", cache_mb=1,
                        cache_admit="first", warmup_idle=0)
    rows = _rows(40)

    async def main() -> None:
        async with serving(RegistrySource(ws), ["churn@production"], settings) as (c, app):
            state, url = app.state.reprise, "/v1/models/churn/predict"
            await wait_until(lambda: "churn@production" in state.table.splits, 20)
            seen: dict[int, tuple[int, Any]] = {}
            for rnd in range(2):  # the second round: every row a hit, same version/answer
                for i, row in enumerate(rows):
                    r = await c.post(url, json=[row], headers={"x-request-key": f"k{i}"})
                    assert r.status_code == 200, r.text
                    got = (int(r.headers["x-reprise-model-version"]), r.json()["predictions"])
                    if rnd == 0:
                        seen[i] = got
                    else:
                        assert got == seen[i]
            answered = {v for v, _ in seen.values()}
            assert answered == {1, 2}
            # each entry is under the version its key's answers came from
            cached = {k[1] for k in state.cache._table}
            assert cached == answered and len(state.cache) == len(rows)
            # v1 asked directly for a row whose cached answer is v2's: v1's own answer
            i = next(i for i, (v, _) in seen.items() if v == 2)
            direct = await c.post("/v1/models/churn/versions/1/predict", json=[rows[i]])
            assert direct.json()["version"] == 1
            assert direct.json()["predictions"] != seen[i][1]
            await asyncio.to_thread(abort_rollout, "churn", "test over", workspace=ws)
            await wait_until(lambda: not state.table.splits, 10)
            await wait_until(lambda: 2 not in {k[1] for k in state.cache._table}, 10)
            assert all(k[1] == 1 for k in state.cache._table)
    run(main())


def test_a_rollout_start_drops_the_cache(ws: Any) -> None:
    settings = Settings(poll_interval=0.05, server_name="s1", cache_mb=1,
                        cache_admit="first", warmup_idle=0)

    async def main() -> None:
        async with serving(RegistrySource(ws), ["churn@production"], settings) as (c, app):
            state = app.state.reprise
            for row in _rows(5):
                await c.post("/v1/models/churn/predict", json=[row])
            assert len(state.cache) == 5
            await asyncio.to_thread(start_rollout, "churn", 2, steps=[50, 100],
                                    interval="1h", workspace=ws)
            await wait_until(lambda: "churn@production" in state.table.splits, 20)
            assert len(state.cache) == 0
    run(main())


def test_shadow_traffic_does_not_fill_the_cache_with_candidate_answers(ws: Any) -> None:
    start_rollout("churn", 2, strategy="shadow", interval="1h", workspace=ws)
    settings = Settings(poll_interval=0.05, server_name="s1", cache_mb=1,
                        cache_admit="first", warmup_idle=0)

    async def main() -> str:
        async with serving(RegistrySource(ws), ["churn@production"], settings) as (c, app):
            state = app.state.reprise
            await wait_until(lambda: (s := state.table.splits.get("churn@production"))
                             is not None and s.shadow is not None, 20)
            for _ in range(2):
                for row in _rows(30):
                    r = await c.post("/v1/models/churn/predict", json=[row])
                    assert r.headers["x-reprise-model-version"] == "1"
            await wait_until(lambda: b'outcome="compared"' in state.metrics.render()[0], 10)
            assert {k[1] for k in state.cache._table} == {1}
            assert len(state.cache) == 30
            return (await c.get("/metrics")).text
    text = run(main())
    assert _metric(text, "reprise_cache_hits_total", model="churn", version="1") == 30
    assert _metric(text, "reprise_cache_misses_total", model="churn", version="2") == 0


def test_the_cli_refuses_a_negative_bound(workspace: Any,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    from reprise.cli import main

    with pytest.raises(SystemExit) as info:
        main(["serve", "churn@production", "--cache-mb", "-1"])
    assert info.value.code == 2
    assert "cache_mb" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main(["serve", "churn@production", "--cache-mb", "1", "--cache-admit", "third"])
    assert info.value.code == 2
    assert "cache_admit must be 'first'" in capsys.readouterr().err


def test_a_server_whose_traffic_never_repeats_stops_looking_up() -> None:
    """Requests of 2,048 fresh rows: the version is bypassed after the first window, the
    answers stay the model's, and /metrics says so."""
    source = FakeSource()
    model = source.models["churn"][1]
    rows = [_row(i) | {"x": i * 0.5} for i in range(3 * _WINDOW)]

    async def main() -> None:
        async with serving(source, ["churn@production"],
                           Settings(poll_interval=0.01, cache_mb=4, warmup_idle=0)
                           ) as (c, app):
            cache = app.state.reprise.cache
            model.batches.clear()  # the load's warm-up call
            for start in range(0, len(rows), _WINDOW):
                batch = rows[start:start + _WINDOW]
                assert _scores(await c.post("/v1/models/churn/predict", json=batch)) == \
                    [score(r["x"], r["y"], r["plan"], 1) for r in batch]
            assert cache.bypassed("churn", 1)
            text = (await c.get("/metrics")).text
            labels = {"model": "churn", "version": "1"}
            assert _metric(text, "reprise_cache_bypassed", **labels) == 1
            looked = _metric(text, "reprise_cache_misses_total", **labels)
            passed = _metric(text, "reprise_cache_bypasses_total", **labels)
            assert looked + passed == len(rows) and looked >= _WINDOW
            assert _metric(text, "reprise_cache_hits_total", **labels) == 0
            assert sum(model.batches) == len(rows)
    run(main())


def test_by_default_the_server_stores_a_row_on_its_first_miss_while_there_is_room() -> None:
    source = FakeSource()
    model = source.models["churn"][1]

    async def main() -> None:
        async with serving(source, ["churn@production"],
                           Settings(poll_interval=0.01, cache_mb=1, warmup_idle=0)
                           ) as (c, app):
            model.batches.clear()
            for _ in range(4):
                assert _scores(await c.post("/v1/models/churn/predict", json=[_row(1)])) \
                    == [score(1.0, 1, "gold", 1)]
            assert model.batches == [1]  # asked (stored: the table has room), then hits
            text = (await c.get("/metrics")).text
            labels = {"model": "churn", "version": "1"}
            assert _metric(text, "reprise_cache_hits_total", **labels) == 3
            assert _metric(text, "reprise_cache_misses_total", **labels) == 1
            assert _metric(text, "reprise_cache_unadmitted_total", **labels) == 0
            assert _metric(text, "reprise_cache_bytes") == app.state.reprise.cache.size
    run(main())


def test_a_rollout_weight_change_drops_the_cache(ws: Any) -> None:
    from dataclasses import replace

    start_rollout("churn", 2, steps=[30, 100], interval="1h", workspace=ws)
    settings = Settings(poll_interval=0.05, server_name="s1", cache_mb=1,
                        cache_admit="first", warmup_idle=0)

    async def main() -> None:
        async with serving(RegistrySource(ws), ["churn@production"], settings) as (c, app):
            state = app.state.reprise
            await wait_until(lambda: "churn@production" in state.table.splits, 20)
            for row in _rows(5):
                await c.post("/v1/models/churn/predict", json=[row])
            assert len(state.cache) == 5
            split = state.table.splits["churn@production"]
            state.rollouts._apply(split, split.rollout)  # nothing changed: kept
            assert len(state.cache) == 5
            state.rollouts._apply(split, replace(split.rollout, weight=100.0, step=1))
            assert len(state.cache) == 0
    run(main())


def test_remembered_layouts_give_the_keys_of_the_plain_path() -> None:
    # a version's InputDtypes remembers how each set of column names is laid out; the
    # keys are those of a plain mapping, whatever the columns' order, row by row
    floats = InputDtypes({"a": "float", "b": "float"})
    columns = {"b": [1, 2.5, True, np.float32(0.5)], "a": [1.0, -0.0, 0.0, 3.0]}
    first = row_keys(columns, 4, floats)
    assert first == row_keys(columns, 4, dict(floats))
    assert row_keys({"a": columns["a"], "b": columns["b"]}, 4, floats) == first
    assert len(floats.layouts) == 2  # one per order of names seen
    assert len(set(first)) == 4  # -0.0 and 0.0 stay apart; 1 and 1.0 are one value
    assert row_keys({"a": [1.0], "b": [1.0]}, 1, floats)[0] == first[0]
    mixed = input_dtypes(SIGNATURE)
    row = {"x": [1.0], "y": [2], "plan": ["basic"]}
    assert row_keys(row, 1, mixed) == row_keys(row, 1, dict(mixed)) == row_keys(row, 1, mixed)
    for i in range(2 * _MAX_LAYOUTS):  # many sets of names: a bounded memory
        row_keys({f"c{i}": [1.0]}, 1, floats)
    assert len(floats.layouts) <= _MAX_LAYOUTS


def test_entries_are_not_walked_by_the_garbage_collector() -> None:
    """A full cache holds hundreds of thousands of rows: each is one bytes object, which
    the collector never tracks (as lists, each full collection of a 64 MB cache walked
    ~370,000 objects); its key leaves the collector's lists after one collection; a hit
    answers with fresh lists; a row marshal cannot write is not stored."""
    cache = ResponseCache(10**7)
    for i in range(200):
        cache.put("m", 1, [i.to_bytes(16, "big")],
                  {"label": [f"c{i % 3}"], "proba": [[0.25, 0.75]],
                   "nested": [[[1.0], [2.0]]]}, {}, {})
    gc.collect()
    entries = list(cache._table.items())
    assert entries and not any(gc.is_tracked(key) or gc.is_tracked(entry)
                               for key, entry in entries)
    assert all(type(entry) is bytes for _, entry in entries)
    found, meta = cache.get("m", 1, [(7).to_bytes(16, "big")])
    assert meta is not None and meta[0] == ("label", "proba", "nested")
    assert found == [("c1", [0.25, 0.75], [[1.0], [2.0]])]
    assert type(found[0][1]) is list and type(found[0][2][0]) is list
    again, _ = cache.get("m", 1, [(7).to_bytes(16, "big")])
    assert again == found and again[0][1] is not found[0][1]  # no list shared by two hits
    cache.put("m", 1, [b"np"], {"label": [np.float32(1.0)], "proba": [[0.5, 0.5]],
                                "nested": [[[1.0]]]}, {}, {})
    assert cache.get("m", 1, [b"np"])[0] == [None] and len(cache) == 200
    # an object column (its tolist() keeps numpy scalars) and a datetime one (marshal
    # refuses datetimes): not stored, and the answer is not failed for it
    import datetime

    cache.put("o", 1, [b"obj"], {"score": [np.float64(0.5)]}, {"score": "O"}, {})
    cache.put("o", 1, [b"when"], {"score": [datetime.datetime(2026, 1, 1)]},
              {"score": "M8[us]"}, {})
    cache.put("o", 1, [b"float"], {"score": [0.5]}, {"score": "f8"}, {})
    assert cache.get("o", 1, [b"obj", b"when", b"float"])[0] == [None, None, (0.5,)]
