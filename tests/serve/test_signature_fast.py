"""The two-stage validation (pure-Python check, then one conversion to numpy) gives the
same answers as the original single-stage implementation, and is fast."""

from __future__ import annotations

import timeit
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from reprise.registry import Field, Signature
from tests.serve import _signature_reference as ref

SIG = Signature(
    inputs=[Field("f", "float", min=0.0, max=1.0), Field("i", "int", min=-5, max=5),
            Field("b", "bool"), Field("s", "string", categories=("a", "b")),
            Field("n", "float", nullable=True, min=0.0, max=10.0),
            Field("t", "float", shape=(2,))])
NAMES = ["f", "i", "b", "s", "n", "t", "extra"]

values = st.one_of(
    st.none(), st.booleans(), st.integers(-10, 10), st.floats(-2, 12, allow_nan=False),
    st.sampled_from(["a", "b", "c"]), st.just(1.0).map(float),
    st.lists(st.floats(0, 1), min_size=1, max_size=3), st.dictionaries(st.just("k"),
                                                                       st.integers()))
records = st.lists(st.dictionaries(st.sampled_from(NAMES), values, max_size=7), max_size=4)


def _same(new: Any, old: Any) -> None:
    assert new.errors == old.errors
    assert new.rows == old.rows
    assert new.out_of_range == old.out_of_range
    assert new.columns.keys() == old.columns.keys()
    for name, arr in old.columns.items():
        if arr is None:
            assert new.columns[name] is None
        else:
            assert new.columns[name].dtype == arr.dtype
            np.testing.assert_array_equal(new.columns[name], arr)


@settings(max_examples=300, deadline=None)
@given(records, st.sampled_from(["reject", "ignore"]), st.sampled_from(["flag", "reject"]))
def test_records_agree_with_the_reference(recs: list[dict[str, Any]], extra: str,
                                          out: str) -> None:
    sig = SIG.with_policy(extra_columns=extra, out_of_range=out)
    _same(sig.validate_records(recs), ref.validate_records(sig, recs))


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(NAMES), st.lists(values, max_size=3), max_size=7))
def test_columns_agree_with_the_reference(cols: dict[str, list[Any]]) -> None:
    _same(SIG.validate_columns(cols), ref.validate_columns(SIG, cols))


def test_numpy_columns_agree_with_the_reference() -> None:
    cols = {"f": np.array([0.5, 2.0]), "i": np.array([1, 9]), "b": np.array([True, False]),
            "s": np.array(["a", "z"], dtype=object), "n": np.array([np.nan, 3.0]),
            "t": np.zeros((2, 2))}
    _same(SIG.validate_columns(cols), ref.validate_columns(SIG, cols))
    bad = {**cols, "t": np.zeros((2, 3)), "i": np.array([0.5, 1.5])}
    _same(SIG.validate_columns(bad), ref.validate_columns(SIG, bad))


def test_check_keeps_lists_and_to_arrays_converts_once() -> None:
    checked = SIG.check_records([{"f": 0.5, "i": 1, "b": True, "s": "a", "n": None,
                                  "t": [0.0, 1.0]}])
    assert checked.ok and all(isinstance(v, list) for v in checked.columns.values())
    arrays = SIG.to_arrays(checked.columns)
    assert arrays["f"].dtype == np.float64 and arrays["i"].dtype == np.int64
    assert np.isnan(arrays["n"][0]) and arrays["t"].shape == (1, 2)


def test_integers_beyond_int64_are_a_type_error_not_a_crash() -> None:
    v = SIG.validate_records([{"f": 0.5, "i": 2**70, "b": True, "s": "a", "n": 1.0,
                               "t": [0.0, 1.0]}])
    assert [(e.field, e.problem) for e in v.errors] == [("i", "type")]
    assert "int64" in v.errors[0].got


def test_a_twenty_column_row_checks_in_microseconds() -> None:
    sig = Signature([Field(f"c{i}", "float", min=0.0, max=1.0) for i in range(20)])
    rec = [{f"c{i}": 0.5 for i in range(20)}]
    per_call = min(timeit.repeat(lambda: sig.check_records(rec), number=200, repeat=5)) / 200
    assert per_call < 200e-6  # ~12 µs on the 2-core machine; generous for slow CI


FLAT = Signature(inputs=[f for f in SIG.inputs if not f.shape])  # no tensor: the row path
FLAT_NAMES = ["f", "i", "b", "s", "n", "extra"]
flat_values = st.one_of(values, st.floats(allow_nan=True), st.integers(-2**64, 2**64),
                        st.sampled_from([float("nan"), float("inf"), True, False]))


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.sampled_from(FLAT_NAMES), flat_values, max_size=6),
       st.sampled_from(["reject", "ignore"]), st.sampled_from(["flag", "reject"]))
def test_a_single_record_checks_as_its_columns_do(rec: dict[str, Any], extra: str,
                                                  out_of_range: str) -> None:
    sig = FLAT.with_policy(extra_columns=extra, out_of_range=out_of_range)
    one, general = sig.check_records([rec]), sig.check_columns({k: [v] for k, v in
                                                                  rec.items()})
    assert (one.errors, one.rows, one.out_of_range) == \
        (general.errors, general.rows, general.out_of_range)
    assert one.columns.keys() == general.columns.keys()
    for name, col in general.columns.items():
        assert repr(one.columns[name]) == repr(col)  # NaN != NaN: compare as written


def test_a_clean_single_record_takes_the_one_loop_path() -> None:
    from reprise.registry._checks import _clean_row

    rec = {"f": 0.5, "i": 3, "b": True, "s": "a", "n": 2}
    assert _clean_row(FLAT._row, rec) == {k: [v] for k, v in rec.items()}
    for bad in ({**rec, "f": 1.5}, {**rec, "s": "c"}, {**rec, "n": None}, {**rec, "b": 1},
                {**rec, "extra": 1}, {k: v for k, v in rec.items() if k != "i"}):
        assert _clean_row(FLAT._row, bad) is None
