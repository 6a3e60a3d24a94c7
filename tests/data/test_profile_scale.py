"""``data add`` on the columns real exports have: ID columns beyond the exact limits and
64-bit integers beyond float64's 2**53 (issue 22, items 1 and 2), end to end."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import reprise
from reprise.data import _sketches, add_dataset
from reprise.data._formats import _NUMBER
from reprise.data._profile import QUANTILES, profile_batches, profile_table
from reprise.data._values import _hash_strings, _maybe_number_or_blank

QS = list(QUANTILES)


@pytest.fixture
def ws(tmp_path: Path) -> Any:
    return reprise.init(tmp_path)


def test_data_add_of_an_id_column_beyond_the_exact_limit(ws: Any,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_sketches, "DISTINCT_CAP", 500)
    monkeypatch.setattr(_sketches, "MG_CAPACITY", 50)
    n = 6000
    t = pa.table({"id": pa.array([f"order-{i:06d}" for i in range(n)]),
                  "plan": pa.array(["basic", "pro", "team"] * (n // 3))})
    res = add_dataset("orders", t, workspace=ws, batch_rows=700)
    cols = res.record.profile["columns"]
    assert res.record.rows == n
    assert cols["id"]["distinct_exact"] is False and abs(cols["id"]["distinct"] - n) < 0.2 * n
    assert cols["id"]["top"] == []
    assert cols["plan"]["distinct"] == 3 and cols["plan"]["top_exact"] is True


# --------------------------------------------------------------------------- 64-bit integers

BIG = 1_500_000_000_000_000_000  # 1.5e18: float64 steps of 256 here


def _exact_quantiles(values: list[int]) -> list[Fraction]:
    """numpy.quantile's linear method, in exact arithmetic."""
    v = sorted(values)
    out = []
    for q in QS:
        at = Fraction(q) * (len(v) - 1)
        i = int(at)
        j = min(i + 1, len(v) - 1)
        out.append(v[i] + (at - i) * (v[j] - v[i]))
    return out


def _exact_counts(values: list[int], lo: int, hi: int, bins: int = 20) -> list[int]:
    """numpy.histogram's equal-width bins over [lo, hi], in exact arithmetic."""
    counts = [0] * bins
    for v in values:
        counts[min((v - lo) * bins // (hi - lo), bins - 1) if hi > lo else bins - 1] += 1
    return counts


def _check_integer_column(col: dict[str, Any], values: list[int]) -> None:
    lo, hi = min(values), max(values)
    assert (col["min"], col["max"]) == (lo, hi)
    assert isinstance(col["min"], int) and isinstance(col["max"], int)
    qs = list(col["quantiles"].values())
    for got, want in zip(qs, _exact_quantiles(values), strict=True):
        assert got == (int(want) if want.denominator == 1 else float(want))
    h = col["histogram"]
    assert h["edges"][0] == lo and h["edges"][-1] == hi and all(
        isinstance(e, int) for e in h["edges"])
    assert h["edges"] == sorted(h["edges"])
    assert h["counts"] == _exact_counts(values, lo, hi)
    json.loads(json.dumps(col, allow_nan=False))


def test_consecutive_ids_above_2_53_profile_exactly() -> None:
    """Issue 22.2: 1,000 consecutive database IDs from 1.5e18 raised 'Too many bins'."""
    ids = [BIG + i for i in range(1000)]
    t = pa.table({"id": pa.array(ids, pa.int64())})
    for batches in (t.to_batches(), t.to_batches(max_chunksize=77)):
        col = profile_batches(t.schema, batches)["columns"]["id"]
        _check_integer_column(col, ids)
        assert col["distinct"] == 1000 and col["distinct_exact"]
        assert col["std"] == pytest.approx(np.arange(1000).std(ddof=1), rel=1e-12)
        assert col["mean"] == float(Fraction(2 * BIG + 999, 2))
        assert col["histogram"]["counts"] == [50] * 20


def test_int64_and_uint64_extremes() -> None:
    i64 = np.iinfo(np.int64)
    signed = [int(i64.min), int(i64.max), 0, -1, 1, int(i64.min) + 1, int(i64.max) - 7] * 3
    u64 = np.iinfo(np.uint64)
    unsigned = [0, int(u64.max), 1 << 63, (1 << 63) - 1, int(u64.max) - 1, 12345] * 3
    t = pa.table({"s": pa.array(signed, pa.int64()),
                  "u": pa.array(unsigned + [None] * 3, pa.uint64())})
    p = profile_table(t)["columns"]
    _check_integer_column(p["s"], signed)
    _check_integer_column(p["u"], unsigned)
    assert p["u"]["nulls"] == 3 and p["u"]["distinct"] == 6
    assert p["s"]["distinct"] == 7 and p["s"]["mean"] is not None


def test_big_integers_above_the_sample_size_use_an_exact_integer_grid() -> None:
    rng = np.random.default_rng(21)
    near = BIG + rng.integers(0, 3000, 40_000)  # a range narrower than the grid
    wide = BIG + rng.integers(0, 10**12, 40_000)  # grid bins of 2**27 integers
    top = (near - BIG).astype(np.uint64) + np.uint64(1 << 63)  # above int64
    t = pa.table({"near": near, "wide": wide, "u": top})
    p = profile_batches(t.schema, t.to_batches(max_chunksize=3001), sample_size=500)["columns"]
    assert p["near"]["quantiles_exact"] is False
    for name in ("near", "u"):
        col, values = p[name], t[name].to_pylist()
        assert col["histogram"]["exact"] is True
        assert col["histogram"]["counts"] == _exact_counts(values, min(values), max(values))
        assert col["min"] == min(values) and col["max"] == max(values)
    col, values = p["wide"], wide.tolist()
    truth = np.array(_exact_counts(values, min(values), max(values)))
    got = np.array(col["histogram"]["counts"])
    assert col["histogram"]["exact"] is False and got.sum() == len(values)
    assert np.abs(got - truth).max() <= 0.002 * len(values)  # one grid bin per edge at most
    for q, want in zip(col["quantiles"].values(), np.quantile(wide - BIG, QS), strict=True):
        assert abs((q - BIG) - want) < 0.05 * 10**12


def test_floats_close_together_far_from_zero_get_fewer_bins_not_an_error() -> None:
    x = 1e18 + np.array([0.0, 128.0, 256.0, 256.0, 512.0])  # float64 steps of 128 here
    col = profile_table(pa.table({"x": x}))["columns"]["x"]
    edges = col["histogram"]["edges"]
    assert all(a < b for a, b in zip(edges, edges[1:], strict=False))
    assert sum(col["histogram"]["counts"]) == 5 and len(edges) <= 21
    one = profile_table(pa.table({"x": [1e18] * 3}))["columns"]["x"]
    assert sum(one["histogram"]["counts"]) == 3


def test_data_add_of_a_csv_with_big_integer_ids(ws: Any, tmp_path: Path) -> None:
    path = tmp_path / "ids.csv"
    path.write_text("id,x\n" + "".join(f"{BIG + i},{i % 7}\n" for i in range(1000)))
    col = add_dataset("ids", path, workspace=ws).record.profile["columns"]["id"]
    assert (col["min"], col["max"]) == (BIG, BIG + 999)
    assert col["histogram"]["counts"] == [50] * 20
    assert col["quantiles"]["0.5"] == float(BIG + Fraction(999, 2))


def test_data_add_of_a_csv_does_not_import_pandas(tmp_path: Path) -> None:
    """pandas' import is a third of a second of every ``data add`` (issue 22.5): pyarrow
    imports it the first time pa.array, pa.scalar or Array.to_numpy runs, so the read,
    the checks and the profile avoid them (a schema, checked by pandera, still needs it)."""
    path = tmp_path / "t.csv"
    rows = [f"{i},{i * 0.5 if i % 3 else ''},u{i:05d},{'abc'[i % 3]},2024-01-{1 + i % 28:02d},"
            f"{'true' if i % 2 else 'false'},{BIG + i}" for i in range(3000)]
    path.write_text("id,x,user,plan,day,flag,big\n" + "\n".join(rows) + "\n")
    code = textwrap.dedent("""
        import sys
        import reprise
        from reprise.data import add_dataset
        ws = reprise.init(sys.argv[1])
        rec = add_dataset("t", sys.argv[2], workspace=ws).record
        assert rec.rows == 3000, rec.rows
        print(sorted(m for m in sys.modules if m.split(".")[0] == "pandas")[:3])
    """)
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "ws"), str(path)],
                         check=True, capture_output=True, text=True).stdout
    assert out.strip() == "[]"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(alphabet="0123456789+-.eEx \t\u00a0\u3000a-", max_size=12),
                min_size=1, max_size=40))
def test_the_mixed_type_prefilter_never_drops_a_number_or_a_blank(values: list[str]) -> None:
    """The mixed-type check runs its regex only where this cheap test says a value might be
    a number or blank; it must never say no to one of those."""
    maybe = _maybe_number_or_blank(pa.array(values))
    for value, flag in zip(values, maybe.tolist(), strict=True):
        if re.match(_NUMBER, value) or not value.strip():
            assert flag, value


def test_a_column_empty_for_whole_batches_keeps_all_its_values_in_the_sample() -> None:
    """Columns share one priority per row; one that has no value in some batches must not
    follow the table's threshold, which counts rows it never had."""
    rng = np.random.default_rng(33)
    n = 3000
    rows = np.r_[0:500, 2000:2500]  # valid in two batches of 500: 1,000 values in all
    x, k = rng.normal(size=len(rows)), rng.integers(0, 10**9, len(rows))
    xs, ks = np.full(n, np.nan), np.zeros(n, dtype=np.int64)
    xs[rows], ks[rows] = x, k
    missing = np.ones(n, dtype=bool)
    missing[rows] = False
    t = pa.table({"x": pa.array(xs, mask=missing), "k": pa.array(ks, mask=missing),
                  "all": np.arange(n)})
    p = profile_batches(t.schema, t.to_batches(max_chunksize=500), sample_size=1000)["columns"]
    for name, values in (("x", x), ("k", k)):
        col = p[name]
        assert col["count"] == len(rows) and col["quantiles_exact"] is True
        assert list(col["quantiles"].values()) == pytest.approx(np.quantile(values, QS))
        assert col["distinct"] == len(np.unique(values)) and col["distinct_exact"]
        lo, hi = values.min(), values.max()
        counts, _ = np.histogram(values, bins=20, range=(lo, hi))
        assert col["histogram"]["counts"] == counts.tolist()
    assert p["all"]["quantiles_exact"] is False


@pytest.mark.parametrize("width", [1, 7, 8, 9, 36])
def test_strings_of_one_width_hash_as_strings_of_any_width_do(width: int) -> None:
    """IDs of one length take a faster path through the hash; a batch with one string of
    another length takes the general one, and every value must hash the same either way."""
    rng = np.random.default_rng(width)
    chars = np.array(list("abcdefghijklmnopqrstuvwxyz0123456789-é"))
    same = ["".join(rng.choice(chars, width)) for _ in range(300)]
    same = [v.encode()[:width].decode(errors="ignore").ljust(width, "x") for v in same]
    same = [v for v in same if len(v.encode()) == width]
    one = _hash_strings(pa.array(same))
    mixed = _hash_strings(pa.array([*same, "y" * (width + 3)]))
    assert (one == mixed[: len(same)]).all()
    assert (_hash_strings(pa.array(same).slice(5)) == one[5:]).all()  # sliced arrays too


def test_sliced_arrays_profile_as_their_copies() -> None:
    """Values are read straight off Arrow's buffers, so an array's offset must be honoured."""
    rng = np.random.default_rng(41)
    n = 5000
    f = rng.normal(size=n)
    t = pa.table({"f": pa.array(f, mask=rng.random(n) < 0.1),
                  "i": pa.array(rng.integers(-5, 5, n), mask=rng.random(n) < 0.1),
                  "u": pa.array(rng.integers(0, 2**63, n, dtype=np.uint64)),
                  "s": pa.array([f"v{i % 37}" for i in range(n)]),
                  "id": pa.array([f"{i:08d}" for i in range(n)]),
                  "b": pa.array(rng.random(n) < 0.5)})
    part = t.slice(1234, 2500)
    copied = pa.table({name: pa.array(part[name].to_pylist(), part[name].type)
                       for name in part.column_names})
    assert part["f"].chunk(0).offset == 1234
    assert profile_table(part) == profile_table(copied)


def test_an_estimated_distinct_count_never_exceeds_the_values(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_sketches, "DISTINCT_CAP", 100)  # KMV of 100 hashes: 10 % error
    n = 3000
    x = np.arange(n) * 15 * 1_000_003  # whose raw estimate is 3,343: above the 3,000 values
    raw = _sketches._Distinct(100)
    raw.add_numbers(x)
    assert raw.estimate()[0] > n
    t = pa.table({"x": x})
    col = profile_batches(t.schema, t.to_batches(max_chunksize=400), sample_size=100)["columns"]
    assert col["x"]["distinct"] == n and col["x"]["distinct_exact"] is False
