"""Seeded samplers and loaders: pinned orders, exact resume, every row once, streaming."""

from __future__ import annotations

import json
import pickle
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

torch = pytest.importorskip("torch")

from reprise.core.errors import UserError  # noqa: E402
from reprise.data._loader import SeededSampler, make_loader, worker_init  # noqa: E402

N = 5_000


@pytest.fixture(scope="module")
def table() -> pa.Table:
    rng = np.random.default_rng(0)
    return pa.table({"id": np.arange(N), "a": rng.random(N), "b": rng.random(N).astype(np.float32),
                     "flag": rng.random(N) < 0.5, "y": np.arange(N) % 3})


@pytest.fixture(scope="module")
def parquet(table: pa.Table, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("loader") / "data.parquet"
    pq.write_table(table, path, row_group_size=700)  # 8 row groups, the last one short
    return path


def _ids(loader: object) -> list[int]:
    return [i for batch in loader for i in batch["id"].tolist()]  # type: ignore[attr-defined]


# -- SeededSampler -------------------------------------------------------------------------

def test_sampler_order_is_pinned() -> None:
    assert list(SeededSampler(100, seed=0))[:10] == [92, 98, 29, 53, 72, 11, 77, 33, 19, 57]


def test_sampler_is_deterministic_per_seed_and_epoch() -> None:
    a, b = SeededSampler(1000, seed=7), SeededSampler(1000, seed=7)
    assert list(a) == list(b) and sorted(a) == list(range(1000))
    b.set_epoch(1)
    assert list(a) != list(b)
    assert list(SeededSampler(1000, seed=8)) != list(a)
    assert list(SeededSampler(10, shuffle=False)) == list(range(10))


def test_start_skips_the_head_of_the_epoch() -> None:
    full = list(SeededSampler(100, seed=3, epoch=2))
    resumed = SeededSampler(100, seed=3, epoch=2, start=37)
    assert list(resumed) == full[37:] and len(resumed) == 63
    resumed.set_epoch(2)  # same epoch: keeps the offset
    assert len(resumed) == 63
    resumed.set_epoch(3)  # next epoch: from its beginning
    assert len(resumed) == 100
    with pytest.raises(UserError, match="start must be in 0..100"):
        SeededSampler(100, start=101)


def test_state_dict_round_trips_through_json() -> None:
    s = SeededSampler(50, seed=11, epoch=4, start=9)
    state = json.loads(json.dumps(s.state_dict()))
    fresh = SeededSampler(50)
    fresh.load_state_dict(state)
    assert list(fresh) == list(s)
    with pytest.raises(UserError, match="data changed"):
        SeededSampler(51).load_state_dict(state)


@pytest.mark.parametrize(("n", "replicas", "drop_last"), [(10, 3, False), (10, 3, True), (9, 3, False)])
def test_distributed_shards_are_disjoint_and_cover(n: int, replicas: int, drop_last: bool) -> None:
    shards = [list(SeededSampler(n, seed=1, num_replicas=replicas, rank=r, drop_last=drop_last))
              for r in range(replicas)]
    assert len({len(s) for s in shards}) == 1
    flat = [i for s in shards for i in s]
    if drop_last:
        assert len(set(flat)) == len(flat) == n // replicas * replicas
    else:
        assert set(flat) == set(range(n))
        assert len(flat) - len(set(flat)) == -n % replicas  # padding only
        order = list(SeededSampler(n, seed=1))
        assert shards[0][:2] == order[0:2 * replicas:replicas]


def test_sampler_is_a_torch_sampler_and_pickles() -> None:
    s = SeededSampler(20, seed=2, start=3)
    assert isinstance(s, torch.utils.data.Sampler) and isinstance(s, SeededSampler)
    assert list(pickle.loads(pickle.dumps(s))) == list(s)


def test_worker_init_seeds_random_and_numpy_from_torch() -> None:
    torch.manual_seed(1234)
    worker_init(0)
    got = (random.random(), np.random.random())
    random.seed(1234)
    np.random.seed(1234)
    assert got == (random.random(), np.random.random())


# -- in-memory loader ------------------------------------------------------------------------

@pytest.mark.parametrize("workers", [0, 2])
def test_in_memory_loader_yields_every_row_once(table: pa.Table, workers: int) -> None:
    loader = make_loader(table, batch_size=64, num_workers=workers, seed=5)
    ids = _ids(loader)
    assert sorted(ids) == list(range(N)) and len(loader) == -(-N // 64)
    assert ids != list(range(N))
    if workers:
        assert ids == _ids(make_loader(table, batch_size=64, seed=5))


def test_batches_are_typed_tensors(table: pa.Table) -> None:
    batch = next(iter(make_loader(table, batch_size=8)))
    assert set(batch) == {"id", "a", "b", "flag", "y"}
    assert (batch["id"].dtype, batch["a"].dtype, batch["b"].dtype, batch["flag"].dtype) == (
        torch.int64, torch.float32, torch.float32, torch.bool)
    np.testing.assert_allclose(batch["a"].numpy(),
                               table.column("a").to_numpy()[batch["id"].numpy()], rtol=1e-6)


def test_features_and_label_tuple(table: pa.Table) -> None:
    x, y = next(iter(make_loader(table, batch_size=16, columns=["id", "a"], label="y", seed=1)))
    assert x.shape == (16, 2) and x.dtype == torch.float32 and y.dtype == torch.int64
    assert (y == x[:, 0].long() % 3).all()
    x, _ = next(iter(make_loader(table.select(["a", "y"]), batch_size=4, label="y")))
    assert x.shape == (4, 1)  # features default to every column but the label


def test_resume_and_epochs(table: pa.Table) -> None:
    full = _ids(make_loader(table, batch_size=50, seed=2, epoch=1))
    assert _ids(make_loader(table, batch_size=50, seed=2, epoch=1, start=1000)) == full[1000:]
    assert _ids(make_loader(table, batch_size=50, seed=2, epoch=2)) != full
    loader = make_loader(table, batch_size=50, seed=2, epoch=0)
    loader.batch_sampler.sampler.set_epoch(1)  # type: ignore[union-attr]
    assert _ids(loader) == full


def test_drop_last_and_ddp_shards(table: pa.Table) -> None:
    assert all(len(b["id"]) == 64 for b in make_loader(table, batch_size=64, drop_last=True))
    shards = [_ids(make_loader(table, batch_size=100, num_replicas=2, rank=r)) for r in (0, 1)]
    assert sorted(shards[0] + shards[1]) == list(range(N))


@pytest.mark.parametrize(("replicas", "batch"), [(2, 64), (7, 65)])
def test_drop_last_shards_repeat_no_sample(table: pa.Table, replicas: int, batch: int) -> None:
    # 5,000 rows on 7 ranks: 715 each once padded with 5 repeats, 11 whole batches of 65;
    # drop_last keeps 714 distinct rows a rank, 10 whole batches
    shards = [_ids(make_loader(table, batch_size=batch, num_replicas=replicas, rank=r,
                               drop_last=True)) for r in range(replicas)]
    flat = [i for shard in shards for i in shard]
    assert len(flat) == len(set(flat)) == N // (batch * replicas) * batch * replicas
    padded = [_ids(make_loader(table, batch_size=batch, num_replicas=replicas, rank=r))
              for r in range(replicas)]
    assert sum(map(len, padded)) - len({i for s in padded for i in s}) == -N % replicas


def test_pandas_parquet_and_dataset_sources(table: pa.Table, parquet: Path) -> None:
    expected = _ids(make_loader(table, batch_size=128, seed=4))

    class Version:
        def to_arrow(self) -> pa.Table:
            raise AssertionError("the Parquet file should be read instead")

        def parquet_path(self) -> Path:
            return parquet

    for source in (table.to_pandas(), parquet, str(parquet), Version()):
        assert _ids(make_loader(source, batch_size=128, seed=4, streaming=False)) == expected


def test_text_columns_are_refused_with_a_fix(table: pa.Table) -> None:
    with_text = table.append_column("city", pa.array(["x"] * N))
    with pytest.raises(UserError, match=r"'city' holds text.*encode it as numbers"):
        make_loader(with_text, batch_size=8)
    with pytest.raises(UserError, match="'city' holds text"):
        make_loader(with_text, batch_size=8, columns=["a"], label="city")
    assert make_loader(with_text, batch_size=8, columns=["a"]) is not None
    with pytest.raises(UserError, match="'nope' is not in the data"):
        make_loader(table, batch_size=8, columns=["nope"])
    with pytest.raises(UserError, match="null"):
        make_loader(pa.table({"i": [1, None]}), batch_size=1)


def test_bad_arguments_are_refused(table: pa.Table) -> None:
    with pytest.raises(UserError, match="batch_size must be an integer >= 1"):
        make_loader(table, batch_size=0)
    with pytest.raises(UserError, match="streaming=True reads a Parquet file"):
        make_loader(table, batch_size=8, streaming=True)
    with pytest.raises(UserError, match="cannot load from a list"):
        make_loader([1, 2], batch_size=8)


def test_pin_memory_auto_is_off_without_cuda(table: pa.Table) -> None:
    assert make_loader(table, batch_size=8).pin_memory is torch.cuda.is_available()


# -- streaming -------------------------------------------------------------------------------

def _stream(parquet: Path, **kwargs: object) -> object:
    options = {"batch_size": 64, "streaming": True, "buffer_rows": 1000, "seed": 3, **kwargs}
    return make_loader(parquet, **options)  # type: ignore[arg-type]


def test_streaming_two_workers_yield_every_row_once(parquet: Path) -> None:
    loader = _stream(parquet, num_workers=2)
    batches = list(loader)  # type: ignore[call-overload]
    ids = [i for b in batches for i in b["id"].tolist()]
    assert sorted(ids) == list(range(N)) and len(batches) == len(loader)  # type: ignore[arg-type]
    resumed = _ids(_stream(parquet, num_workers=2, start=64 * 11))
    assert resumed == ids[64 * 11:]


def test_streaming_is_deterministic_and_resumable(parquet: Path) -> None:
    first = _ids(_stream(parquet, epoch=1))
    assert first == _ids(_stream(parquet, epoch=1))
    assert sorted(first) == list(range(N)) and first != list(range(N))
    assert _ids(_stream(parquet, epoch=2)) != first
    assert _ids(_stream(parquet, epoch=1, start=64 * 30)) == first[64 * 30:]
    with pytest.raises(UserError, match="falls inside a batch"):
        _stream(parquet, start=10)
    assert _ids(_stream(parquet, shuffle=False)) == list(range(N))


def test_streaming_tuple_form_matches_in_memory_rows(parquet: Path, table: pa.Table) -> None:
    x, y = next(iter(_stream(parquet, columns=["id", "a"], label="y", drop_last=True)))  # type: ignore[call-overload]
    assert x.shape == (64, 2) and (y == x[:, 0].long() % 3).all()


def test_importing_the_modules_loads_no_torch() -> None:
    code = ("import sys, reprise.data._loader, reprise.data._split; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_dataframe_with_index_is_loaded_by_position(table: pa.Table) -> None:
    df = table.to_pandas()
    df.index = pd.RangeIndex(100, 100 + N)
    assert sorted(_ids(make_loader(df, batch_size=500))) == list(range(N))


def test_float_nulls_become_nan_and_bad_seeds_are_refused() -> None:
    batch = next(iter(make_loader(pa.table({"x": [1.0, None]}), batch_size=2, shuffle=False)))
    assert batch["x"][0] == 1.0 and torch.isnan(batch["x"][1])
    with pytest.raises(UserError, match="seed must be an integer"):
        make_loader(pa.table({"x": [1.0]}), batch_size=1, seed=1.5)  # type: ignore[arg-type]
    with pytest.raises(UserError, match="epoch must be an integer >= 0"):
        SeededSampler(3, epoch=-1)


def test_stream_dataset_pickles_for_spawned_workers(parquet: Path) -> None:
    dataset = _stream(parquet, epoch=4).dataset  # type: ignore[attr-defined]
    clone = pickle.loads(pickle.dumps(dataset))
    assert isinstance(clone, torch.utils.data.IterableDataset)
    assert [b["id"].tolist() for b in clone] == [b["id"].tolist() for b in dataset]
