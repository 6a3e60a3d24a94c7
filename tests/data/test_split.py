"""Deterministic splits: pinned assignments, stability under appends, groups, strata, time."""

from __future__ import annotations

import datetime as dt
import warnings

import blake3
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reprise.core.errors import UserError
from reprise.data._split import assign_splits, split

HALVES = {"train": 0.5, "validation": 0.25, "test": 0.25}
LETTER = {"train": "T", "validation": "V", "test": "S"}


def _letters(names: np.ndarray) -> str:
    return "".join(LETTER[str(n)] for n in names)


@pytest.fixture
def twenty() -> pa.Table:
    return pa.table({"id": list(range(20)), "key": [f"user-{i}" for i in range(20)]})


# -- pinned: any platform, version or encoding difference fails here --------------------

@pytest.mark.parametrize(("column", "seed", "expected"), [
    ("id", 0, "TTTTVTVVVSVTTTTTSTVV"),
    ("id", 1, "TTTTTTSTTTTSVTSSTTTT"),
    ("key", 0, "TVSTSTSTTVVVTVTTTTSV"),
    ("key", 1, "TVTTSSTVTTVTVTTSTTTT"),
])
def test_assignment_is_pinned(twenty: pa.Table, column: str, seed: int, expected: str) -> None:
    assert _letters(assign_splits(twenty, by=column, fractions=HALVES, seed=seed)) == expected


def test_default_fractions_are_pinned(twenty: pa.Table) -> None:
    assert _letters(assign_splits(twenty, by="id")) == "TTTTTTTTTVTTTTTTSTTT"


def _documented_u(tag: bytes, seed: int, payload: bytes) -> float:
    digest = blake3.blake3(b"reprise.split.v1\x00" + tag + b"\x00" + str(seed).encode() + b"\x00"
                           + payload).digest()
    return (int.from_bytes(digest[:8], "big") >> 11) / 2**53


@pytest.mark.parametrize(("values", "tag", "payloads"), [
    (pa.array([-12, 0, 7, 2**40], pa.int64()), b"int", [b"-12", b"0", b"7", b"1099511627776"]),
    (pa.array(["a", "é", "", "user-1"]), b"str", [b"a", b"\xc3\xa9", b"", b"user-1"]),
    (pa.array([0.1, -2.5, 1.5e-05, float("inf")]), b"float", [b"0.1", b"-2.5", b"1.5e-05", b"inf"]),
    (pa.array([3.0, -0.0, 1e300], pa.float64()), b"int", [b"3", b"0", b"%d" % int(1e300)]),
    (pa.array([3.0, -7.0], pa.float32()), b"int", [b"3", b"-7"]),
    (pa.array([True, False]), b"bool", [b"true", b"false"]),
    (pa.array([dt.date(1970, 1, 2), dt.date(1969, 12, 31)]), b"date", [b"1", b"-1"]),
    (pa.array([1, 2], pa.timestamp("s")), b"ts", [b"1000000000", b"2000000000"]),
])
def test_encoding_is_the_documented_one(values: pa.Array, tag: bytes, payloads: list[bytes]) -> None:
    for seed in (0, 3):
        got = assign_splits(pa.table({"k": values}), by="k", fractions={"a": 0.5, "b": 0.5},
                            seed=seed, as_indices=True)
        assert got.tolist() == [int(_documented_u(tag, seed, p) >= 0.5) for p in payloads]


def test_numeric_keys_hash_by_value_so_an_integer_key_read_as_float_keeps_its_split() -> None:
    ints = pa.table({"id": list(range(1000)), "x": [i % 7 for i in range(1000)]})
    floats = pa.table({"id": pa.array(range(1000), pa.float64()),
                       "x": pa.array([i % 7 for i in range(1000)], pa.float64())})
    for key in ("id", None):  # a key column, and the whole row
        assert (assign_splits(ints, by=key) == assign_splits(floats, by=key)).all()
    # pandas reads an integer column with one missing value as float64
    frame = pd.DataFrame({"id": [*range(999), None]})
    assert (assign_splits(frame.iloc[:999], by="id") == assign_splits(ints.slice(0, 999), by="id")).all()
    # a fraction keeps its own value: 2.5 is neither 2 nor 3
    mixed = assign_splits(pa.table({"id": [2.0, 2.5, 3.0] * 50}), by="id",
                          fractions={"a": 0.5, "b": 0.5}, as_indices=True)
    assert mixed[0] == assign_splits(pa.table({"id": [2]}), by="id",
                                     fractions={"a": 0.5, "b": 0.5}, as_indices=True)[0]


def test_integer_widths_timestamp_units_and_categories_agree() -> None:
    ints = [assign_splits(pa.table({"k": pa.array(range(50), t)}), by="k", as_indices=True)
            for t in (pa.int8(), pa.int32(), pa.uint64())]
    assert all((ints[0] == other).all() for other in ints[1:])
    ts = [pa.array(range(0, 50_000, 1000), pa.timestamp("ms")),
          pa.array(range(0, 50_000_000_000, 1_000_000_000), pa.timestamp("ns"))]
    assert (assign_splits(pa.table({"k": ts[0]}), by="k", as_indices=True)
            == assign_splits(pa.table({"k": ts[1]}), by="k", as_indices=True)).all()
    words = [f"w{i % 7}" for i in range(40)]
    cat = pd.DataFrame({"k": pd.Categorical(words)})
    assert (assign_splits(cat, by="k") == assign_splits(pd.DataFrame({"k": words}), by="k")).all()


# -- hash mode laws ------------------------------------------------------------------------

@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(-2**62, 2**62), min_size=1, max_size=60, unique=True),
       st.lists(st.integers(-2**62, 2**62), max_size=60), st.integers(0, 5))
def test_appending_rows_never_moves_existing_ones(old: list[int], new: list[int], seed: int) -> None:
    before = assign_splits(pa.table({"id": old}), by="id", seed=seed)
    after = assign_splits(pa.table({"id": old + new}), by="id", seed=seed)
    assert (after[:len(old)] == before).all()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abcdefgh"), st.sampled_from("xyz")), min_size=1,
                max_size=80),
       st.sampled_from(["hash", "stratify", "time"]))
def test_a_group_never_straddles_two_splits(rows: list[tuple[str, str]], mode: str) -> None:
    table = pa.table({"g": [g for g, _ in rows], "y": [y for _, y in rows],
                      "t": list(range(len(rows)))[::-1]})
    kwargs = {"stratify": "y"} if mode == "stratify" else {"time": "t"} if mode == "time" else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # tiny classes are expected here
        names = assign_splits(table, group="g", **kwargs)  # type: ignore[arg-type]
    per_group: dict[str, set[str]] = {}
    for g, name in zip(table.column("g").to_pylist(), names, strict=True):
        per_group.setdefault(g, set()).add(str(name))
    assert all(len(s) == 1 for s in per_group.values())


def test_sizes_on_100k_rows_are_close_to_the_fractions() -> None:
    n = 100_000
    codes = assign_splits(pa.table({"id": np.arange(n)}), by="id", as_indices=True)
    counts = np.bincount(codes, minlength=3)
    for count, fraction in zip(counts, (0.8, 0.1, 0.1), strict=True):
        assert abs(count - fraction * n) < 0.03 * fraction * n


def test_the_seed_changes_the_assignment(twenty: pa.Table) -> None:
    assert (assign_splits(twenty, by="id", seed=0) != assign_splits(twenty, by="id", seed=1)).any()


def test_without_a_key_the_whole_row_is_the_key() -> None:
    table = pa.table({"a": [1, 2, 3, 1, 2, 3] * 10, "b": ["x", "y", None, "x", "y", None] * 10})
    names = assign_splits(table, fractions=HALVES)
    row: dict[tuple[object, object], str] = {}
    for a, b, name in zip(table.column("a").to_pylist(), table.column("b").to_pylist(), names,
                          strict=True):
        assert row.setdefault((a, b), name) == name  # identical rows share a split
    shuffled = table.take(pa.array(np.random.default_rng(0).permutation(table.num_rows)))
    assert sorted(assign_splits(shuffled, fractions=HALVES)) == sorted(names)


# -- stratified ----------------------------------------------------------------------------

def test_stratified_proportions_are_within_one_row_per_class() -> None:
    sizes = {"a": 101, "b": 57, "c": 13, "d": 3}
    labels = [label for label, k in sizes.items() for _ in range(k)]
    table = pa.table({"id": np.arange(len(labels)) * 7 + 3, "y": labels})
    fractions = {"train": 0.7, "validation": 0.2, "test": 0.1}
    names = assign_splits(table, by="id", stratify="y", fractions=fractions)
    for label, k in sizes.items():
        mine = names[np.asarray(labels) == label]
        for name, fraction in fractions.items():
            assert abs((mine == name).sum() - fraction * k) <= 1


def test_stratified_is_independent_of_row_order() -> None:
    table = pa.table({"id": np.arange(300), "y": np.arange(300) % 4})
    perm = np.random.default_rng(1).permutation(300)
    a = assign_splits(table, by="id", stratify="y")
    b = assign_splits(table.take(pa.array(perm)), by="id", stratify="y")
    assert (a[perm] == b).all()


def test_a_class_smaller_than_the_number_of_splits_warns() -> None:
    table = pa.table({"id": np.arange(31), "y": ["big"] * 30 + ["rare"]})
    with pytest.warns(UserWarning, match="'y' has 1 class"):
        names = assign_splits(table, by="id", stratify="y")
    assert len(names) == 31


def test_group_stratify_uses_the_majority_label() -> None:
    groups = [f"g{i}" for i in range(40) for _ in range(3)]
    labels = [("pos" if i % 4 == 0 else "neg") if j < 2 else "pos" if i % 4 else "neg"
              for i in range(40) for j in range(3)]
    names = assign_splits(pa.table({"g": groups, "y": labels}), group="g", stratify="y",
                          fractions=HALVES)
    majority_pos = [i % 4 == 0 for i in range(40)]
    per_group = names[::3]
    pos = per_group[np.asarray(majority_pos)]
    assert abs((pos == "train").sum() - 0.5 * len(pos)) <= 1
    assert abs((per_group[~np.asarray(majority_pos)] == "train").sum() - 15) <= 1


# -- time ------------------------------------------------------------------------------------

def test_time_split_puts_earliest_rows_first_in_mapping_order() -> None:
    times = np.random.default_rng(2).integers(0, 50, size=200)  # many ties
    table = pa.table({"id": np.arange(200), "t": times})
    fractions = {"old": 0.6, "middle": 0.3, "new": 0.1}
    names = assign_splits(table, by="id", time="t", fractions=fractions)
    assert [(names == k).sum() for k in fractions] == [120, 60, 20]
    assert times[names == "old"].max() <= times[names == "middle"].min()
    assert times[names == "middle"].max() <= times[names == "new"].min()


def test_time_split_with_groups_orders_groups_by_first_time() -> None:
    table = pa.table({"g": ["a", "a", "b", "b", "c", "c", "d", "d"],
                      "t": [dt.date(2024, 1, d) for d in (1, 9, 2, 3, 5, 6, 7, 8)]})
    names = assign_splits(table, group="g", time="t", fractions={"train": 0.5, "test": 0.5})
    assert names.tolist() == ["train"] * 4 + ["test"] * 4


# -- inputs and outputs ----------------------------------------------------------------------

def test_split_partitions_the_rows_in_order(twenty: pa.Table) -> None:
    parts = split(twenty, by="key", fractions=HALVES)
    assert list(parts) == list(HALVES)
    ids = sorted(i for t in parts.values() for i in t.column("id").to_pylist())
    assert ids == list(range(20))
    assert all(t.column("id").to_pylist() == sorted(t.column("id").to_pylist())
               for t in parts.values())


def test_pandas_in_pandas_out(twenty: pa.Table) -> None:
    df = twenty.to_pandas()
    df.index = [f"r{i}" for i in range(20)]
    parts = split(df, by="id", fractions=HALVES)
    assert all(isinstance(p, pd.DataFrame) for p in parts.values())
    assert list(parts["validation"].index) == [f"r{i}" for i in (4, 6, 7, 8, 10, 18, 19)]
    assert (assign_splits(df, by="id") == assign_splits(twenty, by="id")).all()


def test_objects_with_to_arrow_are_accepted(twenty: pa.Table) -> None:
    class Version:
        def to_arrow(self) -> pa.Table:
            return twenty

    parts = split(Version(), by="id", fractions=HALVES)
    assert isinstance(parts["train"], pa.Table) and parts["train"].num_rows == 11


@pytest.mark.parametrize(("fractions", "message"), [
    ({"train": 0.8, "test": 0.1}, "sum to 1"),
    ({"train": 1.2, "test": -0.2}, "positive"),
    ({"train": 1.0, "test": 0.0}, "positive"),
    ({}, "non-empty"),
    ({"train": "0.5", "test": 0.5}, "positive number"),
    ({"train": float("nan"), "test": 0.5}, "positive number"),
])
def test_bad_fractions_are_refused(twenty: pa.Table, fractions: dict[str, object],
                                   message: str) -> None:
    with pytest.raises(UserError, match=message):
        assign_splits(twenty, by="id", fractions=fractions)  # type: ignore[arg-type]


def test_fractions_within_tolerance_are_accepted(twenty: pa.Table) -> None:
    assert len(assign_splits(twenty, by="id", fractions={"a": 0.1 + 0.2, "b": 0.7})) == 20


def test_unknown_column_lists_the_available_ones(twenty: pa.Table) -> None:
    with pytest.raises(UserError, match=r"'user_id' \(given as by=\).*'id', 'key'"):
        assign_splits(twenty, by="user_id")


def test_null_keys_are_refused_with_count_and_column() -> None:
    with pytest.raises(UserError, match="column 'id' has 2 null value"):
        assign_splits(pa.table({"id": [1, None, 3, None]}), by="id")


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"by": "id", "group": "key"}, "either by= or group="),
    ({"by": "id", "stratify": "key", "time": "id"}, "cannot be combined"),
    ({"by": "id", "seed": 1.5}, "seed must be an integer"),
])
def test_conflicting_arguments_are_refused(twenty: pa.Table, kwargs: dict[str, object],
                                           message: str) -> None:
    with pytest.raises(UserError, match=message):
        assign_splits(twenty, **kwargs)  # type: ignore[arg-type]


def test_unsupported_inputs_are_refused() -> None:
    with pytest.raises(UserError, match="cannot split a list"):
        assign_splits([1, 2, 3], by="id")
    with pytest.raises(UserError, match="cannot be a split key"):
        assign_splits(pa.table({"k": pa.array([[1], [2]])}), by="k")
