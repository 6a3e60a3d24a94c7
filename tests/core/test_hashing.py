from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reprise.core import canonical_json, hash_bytes, hash_file, hash_value, is_hash

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=5), children, max_size=4),
    max_leaves=20,
)


def _strict_equal(a: Any, b: Any) -> bool:
    """Equality in the JSON data model: types matter (1 != 1.0 != True), NaN == NaN."""
    if type(a) is not type(b) and not (isinstance(a, (list, tuple)) and isinstance(b, (list, tuple))):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or repr(a) == repr(b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_strict_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_strict_equal(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _shuffled(value: Any, rnd: Any) -> Any:
    if isinstance(value, dict):
        items = list(value.items())
        rnd.shuffle(items)
        return {k: _shuffled(v, rnd) for k, v in items}
    if isinstance(value, list):
        return [_shuffled(v, rnd) for v in value]
    return value


@given(json_values, st.randoms())
def test_equal_values_hash_equal_regardless_of_dict_order(value: Any, rnd: Any) -> None:
    assert hash_value(value) == hash_value(_shuffled(value, rnd))


@given(json_values, json_values)
def test_different_values_hash_differently(a: Any, b: Any) -> None:
    if _strict_equal(a, b):
        assert hash_value(a) == hash_value(b)
    else:
        assert hash_value(a) != hash_value(b)


@pytest.mark.parametrize(("a", "b"), [(1, 1.0), (1, True), (0, False), ("1", 1), ([1], (1, 2)),
                                      ({"a": None}, {}), (float("inf"), "inf")])
def test_types_are_part_of_the_value(a: Any, b: Any) -> None:
    assert hash_value(a) != hash_value(b)


def test_canonical_json_is_compact_and_sorted() -> None:
    assert canonical_json({"b": 1, "a": [1.5, None, True]}) == '{"a":[1.5,null,true],"b":1}'


@pytest.mark.parametrize("bad", [{1: "a"}, {"x": {1, 2}}, b"bytes", object()])
def test_canonical_json_rejects_ambiguous_values(bad: Any) -> None:
    with pytest.raises(TypeError):
        canonical_json(bad)


def test_numpy_scalars_hash_like_python_numbers() -> None:
    np = pytest.importorskip("numpy")
    assert hash_value({"x": np.float64(0.5)}) == hash_value({"x": 0.5})
    assert hash_value(np.int64(3)) == hash_value(3)


@pytest.mark.parametrize("size", [0, 10, 9 * 1024 * 1024 + 7])
def test_hash_file_matches_hash_bytes(tmp_path: Path, size: int) -> None:
    data = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    path = tmp_path / "f.bin"
    path.write_bytes(data)
    assert hash_file(path) == hash_bytes(data)
    assert is_hash(hash_file(path))


def test_is_hash() -> None:
    assert is_hash("a" * 64)
    assert not is_hash("A" * 64)
    assert not is_hash("../" + "a" * 61)


def test_large_files_are_hashed_window_by_window(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Mapped pages count as the process's memory: a file is mapped one window at a
    time, and the windows' hash is the whole file's (sizes around window edges)."""
    from reprise.core import _hashing

    monkeypatch.setattr(_hashing, "_MMAP_THRESHOLD", 1)
    monkeypatch.setattr(_hashing, "_MMAP_WINDOW", 1 << 16)  # a multiple of the page size
    for size in (1, (1 << 16) - 1, 1 << 16, (3 << 16) + 5):
        data = (bytes(range(251)) * (size // 251 + 1))[:size]
        (tmp_path / "f.bin").write_bytes(data)
        assert hash_file(tmp_path / "f.bin") == hash_bytes(data)
