"""Streaming profiles: exact statistics against numpy/pandas, laws of the one-pass merge,
the sketches above their exact range, JSON safety, determinism and profile diffs."""

from __future__ import annotations

import collections
import datetime as dt
import decimal
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reprise.core.errors import ConfigError, InvalidNameError, UserError
from reprise.data import _profile, _sketches
from reprise.data._formats import DataFormatError
from reprise.data._profile import (
    DISTINCT_CAP,
    profile_batches,
    profile_files,
    profile_parquet,
    profile_table,
)
from reprise.data._profile_diff import column_type_changes, diff_profiles

QS = [0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99]
_MINUTE = 60_000_000  # microseconds
_JAN_2024 = int(dt.datetime(2024, 1, 1, tzinfo=dt.UTC).timestamp()) * 1_000_000


def _split(table: pa.Table, sizes: list[int]) -> list[pa.RecordBatch]:
    """Cut a table into batches of the given sizes (the last takes the rest)."""
    out, start = [], 0
    for size in [*sizes, table.num_rows]:
        part = table.slice(start, size)
        out.append(pa.RecordBatch.from_arrays([c.combine_chunks() for c in part.columns],
                                              schema=table.schema))
        start += part.num_rows
    return out


def _without_moments(p: dict[str, Any]) -> dict[str, Any]:
    cols = {k: {s: v for s, v in c.items() if s not in ("mean", "std")}
            for k, c in p["columns"].items()}
    return {**p, "columns": cols}


def _close(a: float | None, b: float | None, rel: float = 1e-9) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-9)


@pytest.fixture
def mixed() -> pa.Table:
    rng = np.random.default_rng(7)
    n = 4000
    f = rng.normal(3.0, 2.0, n)
    f[rng.random(n) < 0.05] = np.nan
    return pa.table({
        "f": pa.array(f, from_pandas=True),  # NaN -> null
        "i": pa.array(rng.integers(-50, 50, n)),
        "s": pa.array(np.array(["red", "green", "blue", "été"])[rng.integers(0, 4, n)]),
        "c": pa.array(np.array(["a", "b", "c"])[rng.integers(0, 3, n)]).dictionary_encode(),
        "b": pa.array(rng.random(n) < 0.25),
        "t": pa.array(_MINUTE * np.arange(n) + _JAN_2024, pa.timestamp("us", tz="UTC")),
    })


# --------------------------------------------------------------------------- exact statistics


def test_numeric_statistics_are_exact_on_small_tables(mixed: pa.Table) -> None:
    p = profile_table(mixed)
    assert p["format_version"] == 1 and p["rows"] == 4000
    for name in ("f", "i"):
        col = p["columns"][name]
        s = mixed[name].to_pandas()
        x = s.dropna().to_numpy(dtype=float)
        assert col["kind"] == "numeric"
        assert col["count"] == len(x) and col["nulls"] == int(s.isna().sum())
        assert col["min"] == x.min() and col["max"] == x.max()
        assert col["mean"] == pytest.approx(x.mean(), rel=1e-12)
        assert col["std"] == pytest.approx(s.std(), rel=1e-12)  # ddof=1, as pandas
        assert col["distinct"] == len(np.unique(x)) and col["distinct_exact"]
        assert list(col["quantiles"].values()) == pytest.approx(np.quantile(x, QS), rel=1e-12)
        assert col["quantiles_exact"] is True
        counts, edges = np.histogram(x, bins=20, range=(x.min(), x.max()))
        assert col["histogram"]["counts"] == counts.tolist()
        if name == "f":
            assert col["histogram"]["edges"] == pytest.approx(edges.tolist())
        else:  # integer edges: where each of numpy's bins starts among the integers
            assert col["histogram"]["edges"] == [math.ceil(e - 1e-9) for e in edges]
        assert sum(col["histogram"]["counts"]) == col["count"]
    assert p["columns"]["i"]["type"] == "int64" and isinstance(p["columns"]["i"]["min"], int)


def test_bins_argument_and_single_value_column() -> None:
    p = profile_table(pa.table({"x": [5.0] * 10}), bins=4)
    h = p["columns"]["x"]["histogram"]
    assert len(h["counts"]) == 4 and len(h["edges"]) == 5 and sum(h["counts"]) == 10
    assert p["columns"]["x"]["std"] == 0.0 and p["columns"]["x"]["distinct"] == 1


def test_text_top_values_are_exact_counts(mixed: pa.Table) -> None:
    p = profile_table(mixed, top_k=2)
    for name in ("s", "c"):
        col = p["columns"][name]
        values = mixed[name].to_pylist()
        freq = collections.Counter(values).most_common()
        assert col["kind"] == ("string" if name == "s" else "categorical")
        assert col["top"] == [list(kv) for kv in freq[:2]] and col["top_exact"]
        assert col["distinct"] == len(freq) and col["distinct_exact"]
        assert col["min_length"] == min(len(v) for v in values)
        assert col["max_length"] == max(len(v) for v in values)
        assert col["mean_length"] == pytest.approx(np.mean([len(v) for v in values]))
    assert p["columns"]["s"]["max_length"] == 5  # characters, not bytes: "green"/"été"


def test_top_ties_break_by_value_and_top_k_zero() -> None:
    t = pa.table({"s": ["b", "a", "c", "a", "b", "c", None]})
    assert profile_table(t)["columns"]["s"]["top"] == [["a", 2], ["b", 2], ["c", 2]]
    assert profile_table(t, top_k=0)["columns"]["s"]["top"] == []


def test_categorical_batches_with_different_dictionaries() -> None:
    b1 = pa.record_batch({"c": pa.array(["x", "y", "x"]).dictionary_encode()})
    b2 = pa.record_batch({"c": pa.array(["z", "x", None]).dictionary_encode()})
    col = profile_batches(b1.schema, [b1, b2])["columns"]["c"]
    assert col["top"] == [["x", 3], ["y", 1], ["z", 1]]
    assert (col["count"], col["nulls"], col["distinct"]) == (5, 1, 3)


def test_boolean_temporal_decimal_and_other_columns(mixed: pa.Table) -> None:
    p = profile_table(mixed)
    b = p["columns"]["b"]
    assert b["true"] == sum(mixed["b"].to_pylist()) and b["distinct"] == 2
    assert b["mean"] == pytest.approx(b["true"] / 4000)
    t = p["columns"]["t"]
    assert t["kind"] == "temporal" and t["distinct"] == 4000
    assert t["min"] == "2024-01-01T00:00:00+00:00"
    assert t["max"] == (dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
                        + dt.timedelta(minutes=3999)).isoformat()
    other = profile_table(pa.table({
        "d": pa.array([dt.date(2020, 1, 2), None, dt.date(1999, 12, 31)]),
        "dec": pa.array([decimal.Decimal("1.50"), None, decimal.Decimal("-2.25")],
                        pa.decimal128(6, 2)),
        "f32": pa.array([1.5, 2.5, None], pa.float32()),
        "l": pa.array([[1], None, [2, 3]]),
        "n": pa.nulls(3),
        "dur": pa.array([5, None, 7], pa.duration("s")),
        "tod": pa.array([dt.time(1, 2, 3), None, dt.time(4, 5)], pa.time64("us")),
        "iv": pa.array([pa.MonthDayNano([1, 2, 3])] * 3, pa.month_day_nano_interval()),
    }))["columns"]
    assert (other["d"]["min"], other["d"]["max"], other["d"]["nulls"]) == ("1999-12-31",
                                                                           "2020-01-02", 1)
    assert (other["dec"]["min"], other["dec"]["max"]) == (-2.25, 1.5)
    assert other["f32"]["mean"] == 2.0
    assert other["l"] == {"kind": "other", "type": "list<item: int64>", "count": 2, "nulls": 1}
    assert (other["n"]["count"], other["n"]["nulls"]) == (0, 3)
    assert (other["dur"]["min"], other["dur"]["max"]) == ("0:00:05", "0:00:07")
    assert (other["tod"]["min"], other["tod"]["max"]) == ("01:02:03", "04:05:00")
    assert other["iv"]["kind"] == "other" and other["iv"]["count"] == 3


# --------------------------------------------------------------------------- missing values


def test_nan_counts_as_null_and_infinities_as_values() -> None:
    arr = pa.array([1.0, float("nan"), None, float("inf"), float("-inf"), 2.0, -0.0, 0.0])
    col = profile_table(pa.table({"x": arr}))["columns"]["x"]
    assert (col["count"], col["nulls"], col["nan"], col["inf"]) == (6, 2, 1, 2)
    assert (col["min"], col["max"]) == (-0.0, 2.0)
    assert col["mean"] == pytest.approx(0.75)
    assert col["distinct"] == 5  # 1, inf, -inf, 2, and 0 == -0
    assert sum(col["histogram"]["counts"]) == 4  # the finite values


@pytest.mark.parametrize("typ", [pa.float64(), pa.int32(), pa.string(), pa.timestamp("ms"),
                                 pa.dictionary(pa.int8(), pa.string()), pa.bool_()])
def test_all_null_columns(typ: pa.DataType) -> None:
    col = profile_table(pa.table({"x": pa.nulls(5, typ)}))["columns"]["x"]
    assert (col["count"], col["nulls"]) == (0, 5)
    assert col.get("distinct", 0) == 0
    for stat in ("min", "max", "mean", "std", "quantiles", "histogram", "min_length"):
        assert col.get(stat) is None
    assert col.get("top", []) == []


def test_empty_table_and_no_batches() -> None:
    schema = pa.schema({"x": pa.float64(), "s": pa.string(), "t": pa.date32()})
    for p in (profile_table(schema.empty_table()), profile_batches(schema, [])):
        assert p["rows"] == 0
        assert all(c["count"] == 0 and c["nulls"] == 0 for c in p["columns"].values())
        json.dumps(p, allow_nan=False)


def test_profiles_are_json_without_nan(mixed: pa.Table) -> None:
    weird = pa.table({"x": [float("nan"), float("inf"), None], "y": [1e308, -1e308, 1e308],
                      "b": pa.array([b"\x00", b"\xff", None])})
    for t in (mixed, weird):
        text = json.dumps(profile_table(t), allow_nan=False)
        assert json.loads(text)["rows"] == t.num_rows


# --------------------------------------------------------------------------- the one-pass merge


_special = st.sampled_from([math.inf, -math.inf, math.nan])
_values = st.lists(st.one_of(st.none(), st.floats(-1e6, 1e6, allow_nan=False), _special),
                   max_size=300)


@settings(max_examples=80, deadline=None)
@given(values=_values, cuts=st.lists(st.integers(0, 60), max_size=8))
def test_any_batching_gives_the_same_profile(values: list[float | None], cuts: list[int]) -> None:
    finite = [v if v is not None and math.isfinite(v) else None for v in values]
    ints = [None if v is None else int(v) for v in finite]
    table = pa.table({"f": pa.array(values, pa.float64()), "i": pa.array(ints, pa.int64()),
                      "s": pa.array([None if v is None else f"k{int(v) % 7}" for v in finite])})
    whole = profile_table(table)
    split = profile_batches(table.schema, _split(table, cuts))
    assert _without_moments(split) == _without_moments(whole)
    for name, column in (("f", finite), ("i", ints)):
        a, b = whole["columns"][name], split["columns"][name]
        assert _close(a["mean"], b["mean"]) and _close(a["std"], b["std"])
        x = np.array([v for v in column if v is not None], dtype=float)
        if len(x):
            assert _close(a["mean"], float(x.mean()))
            assert (a["min"], a["max"]) == (x.min(), x.max())
            assert sum(a["histogram"]["counts"]) == len(x)
        if len(x) > 1:
            assert _close(a["std"], float(x.std(ddof=1)), rel=1e-7)
    f = whole["columns"]["f"]
    assert f["nan"] == sum(1 for v in values if v is not None and math.isnan(v))
    assert f["nulls"] == values.count(None) + f["nan"]
    assert f["inf"] == sum(1 for v in values if v is not None and math.isinf(v))


def test_parallel_and_sequential_batches_agree() -> None:
    rng = np.random.default_rng(3)
    n = 120_000
    t = pa.table({"x": rng.normal(size=n), "k": rng.integers(0, 1000, n),
                  "s": pa.array(rng.integers(0, 30, n).astype(str))})
    one = profile_batches(t.schema, t.to_batches())  # one big batch: columns in threads
    many = profile_batches(t.schema, t.to_batches(max_chunksize=999))  # small: one thread
    assert _without_moments(one) == _without_moments(many)
    assert _close(one["columns"]["x"]["std"], many["columns"]["x"]["std"])


def test_quantiles_and_histogram_above_the_sample_size() -> None:
    rng = np.random.default_rng(11)
    x = rng.normal(size=200_000)
    t = pa.table({"x": x})
    col = profile_table(t, sample_size=20_000)["columns"]["x"]
    assert col["quantiles_exact"] is False and col["histogram"]["exact"] is False
    assert list(col["quantiles"].values()) == pytest.approx(np.quantile(x, QS), abs=0.05)
    counts, _ = np.histogram(x, bins=20, range=(x.min(), x.max()))
    got = np.array(col["histogram"]["counts"])
    assert got.sum() == len(x)
    assert np.abs(got - counts).max() <= 0.002 * len(x)  # one fine grid bin per edge at most
    again = profile_batches(t.schema, t.to_batches(max_chunksize=7777), sample_size=20_000)
    assert again["columns"]["x"]["quantiles"] == col["quantiles"]  # rows decide, not batches
    assert again["columns"]["x"]["histogram"] == col["histogram"]


def test_integer_histogram_is_exact_above_the_sample_size() -> None:
    rng = np.random.default_rng(5)
    k = rng.integers(0, 100, 50_000)
    col = profile_table(pa.table({"k": k}), sample_size=1000)["columns"]["k"]
    counts, _ = np.histogram(k, bins=20, range=(0, 99))
    assert col["histogram"]["counts"] == counts.tolist()


def test_fine_histogram_counts_do_not_depend_on_batches() -> None:
    rng = np.random.default_rng(2)
    parts = [rng.normal(0, 10.0 ** i, 5000) for i in range(6)]  # the range keeps growing
    a, b = _sketches._FineHistogram(), _sketches._FineHistogram()
    lo = hi = 0.0
    for x in parts:
        lo, hi = min(lo, float(x.min())), max(hi, float(x.max()))
        a.add(x, lo, hi)
    allx = np.concatenate(parts)
    b.add(allx, float(allx.min()), float(allx.max()))
    assert (a.e, a.offset) == (b.e, b.offset) and (a.counts == b.counts).all()
    width = 2.0 ** b.e
    direct = np.bincount((np.floor(allx / width) - b.offset).astype(np.int64),
                         minlength=_profile.FINE_BINS)
    assert (direct == b.counts).all()


# --------------------------------------------------------------------------- sketches


def test_distinct_estimate_above_the_cap() -> None:
    n = 300_000
    t = pa.table({"i": np.arange(n) * 7, "f": np.arange(n) * 0.5,
                  "s": pa.array([f"id-{i}" for i in range(n)]), "near": np.arange(n)})
    p = profile_table(t)
    for name in ("i", "f", "s"):
        col = p["columns"][name]
        assert col["distinct_exact"] is False
        assert abs(col["distinct"] - n) / n < 0.05
    # integers over a narrow range (here 300,000 apart) are counted exactly on a bitmap
    assert p["columns"]["near"]["distinct"] == n and p["columns"]["near"]["distinct_exact"]
    small = profile_table(t.slice(0, DISTINCT_CAP))["columns"]
    assert all(small[c]["distinct"] == DISTINCT_CAP and small[c]["distinct_exact"]
               for c in ("i", "f", "s"))


def test_many_values_below_the_cap_are_still_counted_exactly() -> None:
    rng = np.random.default_rng(8)
    values = [f"k{i % 5000}" for i in range(60_000)] + ["hot"] * 50 + ["warm"] * 40
    t = pa.table({"s": pa.array(values).take(pa.array(rng.permutation(len(values))))})
    col = profile_batches(t.schema, t.to_batches(max_chunksize=20_000))["columns"]["s"]
    want = sorted(collections.Counter(values).items(), key=lambda kv: (-kv[1], kv[0]))[:10]
    assert col["top"] == [list(kv) for kv in want] and col["top_exact"]
    assert col["distinct"] == 5002 and col["distinct_exact"]


def test_approximate_top_counts_are_bounded_lower_bounds() -> None:
    rng = np.random.default_rng(9)
    values = [f"u{i}" for i in range(150_000)] + ["hot"] * 9000 + ["warm"] * 4000
    values += [f"w{i % 50}" for i in range(20_000)]
    order = rng.permutation(len(values))
    arr = pa.array(values).take(pa.array(order))
    t = pa.table({"s": arr})
    col = profile_batches(t.schema, t.to_batches(max_chunksize=50_000))["columns"]["s"]
    truth = collections.Counter(values)
    assert col["top_exact"] is False
    assert col["top"][0][0] == "hot" and col["top"][1][0] == "warm"
    bound = len(values) / (_sketches.MG_CAPACITY + 1)
    for value, count in col["top"]:
        assert truth[value] - bound <= count <= truth[value]


@pytest.fixture
def small_caps(monkeypatch: pytest.MonkeyPatch) -> tuple[int, int]:
    """Exact limits a hundred times lower, so the sketches take over at test sizes."""
    monkeypatch.setattr(_sketches, "DISTINCT_CAP", 1000)
    monkeypatch.setattr(_sketches, "MG_CAPACITY", 100)
    return 1000, 100


def test_text_column_beyond_the_cap_over_many_batches(small_caps: tuple[int, int]) -> None:
    """Issue 22.1: an ID column with more distinct values than the exact limit, spread
    over several batches, crashed (IndexError) once every count fell to the summary's
    floor; the count is estimated and the top values degrade to what stands out."""
    cap, capacity = small_caps
    rng = np.random.default_rng(12)
    ids = [f"id-{i:07d}" for i in range(30_000)]
    values = ids + ["hot"] * 3000 + ["warm"] * 1500
    order = rng.permutation(len(values))
    t = pa.table({"u": pa.array(ids + [f"x-{i}" for i in range(4500)]),
                  "s": pa.array(values).take(pa.array(order))})
    p = profile_batches(t.schema, t.to_batches(max_chunksize=2000))["columns"]
    unique = p["u"]
    assert unique["count"] == 34_500 and unique["distinct_exact"] is False
    assert abs(unique["distinct"] - 34_500) / 34_500 < 4 / math.sqrt(cap)
    assert unique["top"] == [] and unique["top_exact"] is False  # nothing stands out
    col = p["s"]
    assert col["distinct_exact"] is False and col["top_exact"] is False
    assert abs(col["distinct"] - 30_002) / 30_002 < 4 / math.sqrt(cap)
    assert [v for v, _ in col["top"][:2]] == ["hot", "warm"]
    bound = len(values) / (capacity + 1)
    for value, count in col["top"][:2]:
        truth = 3000 if value == "hot" else 1500
        assert truth - bound <= count <= truth
    json.dumps(p, allow_nan=False)


def test_unique_text_column_at_the_real_limit_over_many_batches() -> None:
    """The same at the real limit, as ``data add`` reads a big file: batches of 50,000."""
    n = 2 * DISTINCT_CAP + 50_000
    t = pa.table({"id": pa.array([f"user-{i:09d}" for i in range(n)])})
    col = profile_batches(t.schema, t.to_batches(max_chunksize=50_000))["columns"]["id"]
    assert col["count"] == n and not col["distinct_exact"]
    assert abs(col["distinct"] - n) / n < 4 / math.sqrt(_sketches.KMV_K) and col["top"] == []


def test_same_input_and_seed_give_the_same_profile(mixed: pa.Table) -> None:
    big = pa.table({"x": np.random.default_rng(1).normal(size=50_000)})
    assert profile_table(mixed, seed=3) == profile_table(mixed, seed=3)
    a = profile_table(big, sample_size=500, seed=1)
    assert a == profile_table(big, sample_size=500, seed=1)
    assert a["columns"]["x"]["quantiles"] != profile_table(big, sample_size=500,
                                                           seed=2)["columns"]["x"]["quantiles"]


# --------------------------------------------------------------------------- entry points


def test_parquet_and_pandas_entry_points(tmp_path: Path, mixed: pa.Table) -> None:
    path = tmp_path / "m.parquet"
    pq.write_table(mixed, path, row_group_size=1000)
    from_file = profile_parquet(path, batch_rows=333)
    assert _without_moments(from_file) == _without_moments(profile_table(mixed))
    sub = profile_parquet(path, columns=["i", "s"])
    assert list(sub["columns"]) == ["i", "s"]
    from_df = profile_table(mixed.select(["i", "s"]).to_pandas())["columns"]
    assert from_df["i"] == sub["columns"]["i"]
    assert from_df["s"]["top"] == sub["columns"]["s"]["top"]  # str may arrive as large_string
    with pytest.raises(UserError, match="no column"):
        profile_parquet(path, columns=["nope"])
    with pytest.raises(UserError, match="not a file"):
        profile_parquet(tmp_path / "missing.parquet")
    (tmp_path / "bad.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(DataFormatError, match="cannot be read as Parquet"):
        profile_parquet(tmp_path / "bad.parquet")


def test_parquet_dictionary_pages_are_counted_as_the_strings_they_hold(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    words = np.array(["ant", "bee", "cat", None], dtype=object)[rng.integers(0, 4, 20_000)]
    t = pa.table({"w": pa.array(words, pa.string()),
                  "u": pa.array([f"id{i}" for i in range(20_000)])})
    path = tmp_path / "d.parquet"
    pq.write_table(t, path, row_group_size=5000)
    assert _profile._dictionary_columns(pq.read_metadata(path)) == ["w"]  # u is plain
    assert profile_parquet(path, batch_rows=3000) == profile_table(t)


def test_read_ahead_passes_errors_and_stops_early() -> None:
    def failing() -> Any:
        yield 1
        raise OSError("disk gone")

    with pytest.raises(OSError, match="disk gone"):
        list(_profile._read_ahead(failing()))
    gen = _profile._read_ahead(iter(range(1000)))
    assert next(gen) == 0
    gen.close()  # the reading thread is told to stop and joined


def test_bad_arguments_are_refused() -> None:
    t = pa.table({"x": [1.0]})
    for kw in ({"bins": 0}, {"top_k": -1}, {"sample_size": 0}, {"seed": -1}, {"bins": 2.5}):
        with pytest.raises(ConfigError):
            profile_table(t, **kw)
    dup = pa.Table.from_arrays([pa.array([1]), pa.array([2])], names=["a", "a"])
    with pytest.raises(InvalidNameError, match="more than once"):
        profile_table(dup)


def test_profile_files(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.JPG").write_bytes(b"x" * 10)
    (tmp_path / "sub" / "b.jpg").write_bytes(b"x" * 30)
    (tmp_path / "sub" / "README").write_bytes(b"")
    (tmp_path / "link.jpg").symlink_to(tmp_path / "a.JPG")
    p = profile_files(tmp_path)
    assert (p["files"], p["bytes"]) == (3, 40)
    assert p["size"] == {"min": 0, "max": 30, "mean": pytest.approx(40 / 3)}
    assert p["extensions"] == {"": 1, ".jpg": 2}
    empty = tmp_path / "empty"
    empty.mkdir()
    assert profile_files(empty)["files"] == 0 and profile_files(empty)["size"] is None
    with pytest.raises(UserError, match="not a directory"):
        profile_files(tmp_path / "a.JPG")


# --------------------------------------------------------------------------- diffs


def test_diff_profiles_reports_what_changed() -> None:
    old = profile_table(pa.table({"x": [1.0, 2.0, 3.0], "k": [1, 2, 3],
                                  "s": ["a", "a", "b"], "gone": [1, 1, 1]}))
    new = profile_table(pa.table({"x": [1.0, 2.0, None, 9.0], "k": [1.5, 2.0, 3.0, 4.0],
                                  "s": ["a", "c", "c", "c"], "extra": [0, 0, 0, 0]}))
    d = diff_profiles(old, new)
    assert d["rows"] == {"old": 3, "new": 4}
    assert d["columns_added"] == ["extra"] and d["columns_removed"] == ["gone"]
    assert d["type_changes"] == [["k", "int64", "double"]]
    x = d["columns"]["x"]
    assert x["nulls_fraction"] == {"old": 0.0, "new": 0.25}
    assert x["max"] == {"old": 3.0, "new": 9.0} and "min" not in x
    assert d["columns"]["s"]["top_added"] == ["c"] and d["columns"]["s"]["top_removed"] == ["b"]
    json.dumps(d, allow_nan=False)
    same = diff_profiles(old, old)
    assert same["columns"] == {} and same["type_changes"] == [] and same["columns_added"] == []


def test_diff_of_file_profiles(tmp_path: Path) -> None:
    (tmp_path / "a.png").write_bytes(b"12")
    before = profile_files(tmp_path)
    (tmp_path / "b.wav").write_bytes(b"123")
    d = diff_profiles(before, profile_files(tmp_path))
    assert d == {"files": {"old": 1, "new": 2}, "bytes": {"old": 2, "new": 5},
                 "extensions": {".wav": {"old": 0, "new": 1}}}


def test_column_type_changes_accepts_schemas_profiles_and_mappings() -> None:
    s1 = pa.schema({"a": pa.int64(), "b": pa.string(), "c": pa.float32()})
    s2 = pa.schema({"a": pa.float64(), "b": pa.string()})
    want = [("a", "int64", "double")]
    assert column_type_changes(s1, s2) == want
    assert column_type_changes(profile_table(s1.empty_table()), {"a": "double"}) == want
    with pytest.raises(UserError):
        column_type_changes(42, s2)
