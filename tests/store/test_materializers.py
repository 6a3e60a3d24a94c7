"""Materializers: every built-in round-trips, hashes are stable, nothing is ever pickled."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from reprise.core.errors import IntegrityError, MaterializerError
from reprise.store import (
    BaseArtifactStore,
    FsspecArtifactStore,
    LocalArtifactStore,
    Materializer,
    _materializer,
    load_object,
    materializer_by_name,
    materializer_for,
    open_artifact_store,
    register_materializer,
    save_object,
)
from reprise.store import _materializers as mat


@pytest.fixture
def store(tmp_path: Path) -> BaseArtifactStore:
    return LocalArtifactStore(tmp_path / "artifacts")


@pytest.fixture(autouse=True)
def _fresh_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """User registrations made by a test do not leak into the next one."""
    monkeypatch.setattr(mat, "_user", [])


def roundtrip(store: BaseArtifactStore, obj: Any, dest: Path | None = None) -> tuple[Any, Any]:
    rec = save_object(store, obj)
    assert store.exists(rec.hash) and store.size(rec.hash) == rec.size
    json.dumps(rec.meta)  # meta goes to the metadata store as JSON
    return rec, load_object(store, rec.hash, rec.materializer, rec.meta, dest=dest)


# -- numpy, pandas, arrow ---------------------------------------------------------------------


@pytest.mark.parametrize("arr", [
    np.arange(12, dtype=np.int64).reshape(3, 4),
    np.linspace(0, 1, 7, dtype=np.float32),
    np.array([[1 + 2j]], dtype=np.complex128),
    np.array([True, False]),
    np.array(["a", "bcd"]),
    np.array(3.5),
    np.zeros((0, 3), dtype=np.uint8),
    np.array([(1, 2.0)], dtype=[("a", "i4"), ("b", "f8")]),
    np.array(["2024-01-01"], dtype="datetime64[D]"),
])
def test_numpy_roundtrip(store: BaseArtifactStore, arr: Any) -> None:
    rec, back = roundtrip(store, arr)
    assert (rec.materializer, rec.kind) == ("numpy", "array")
    assert rec.meta == {"dtype": str(arr.dtype), "shape": list(arr.shape)}
    assert back.dtype == arr.dtype and back.shape == arr.shape
    np.testing.assert_array_equal(back, arr)


def test_numpy_memory_layout_does_not_change_the_hash(store: BaseArtifactStore) -> None:
    arr = np.arange(20.0).reshape(4, 5)
    assert save_object(store, arr).hash == save_object(store, np.asfortranarray(arr)).hash
    view = arr[:, ::2]
    _, back = roundtrip(store, view)
    np.testing.assert_array_equal(back, view)


def test_numpy_object_array_is_refused(store: BaseArtifactStore) -> None:
    with pytest.raises(MaterializerError, match="never pickles"):
        save_object(store, np.array([{"a": 1}, None], dtype=object))
    assert list(store.iter_hashes()) == []


def test_numpy_subclass_is_not_silently_flattened(store: BaseArtifactStore) -> None:
    with pytest.raises(MaterializerError, match="numpy.ma.MaskedArray"):
        save_object(store, np.ma.masked_array([1, 2], mask=[False, True]))


@pytest.fixture
def frame() -> pd.DataFrame:
    return pd.DataFrame(
        {"x": [1, 2, 3], "y": [0.5, float("nan"), 2.5], "s": ["a", "b", None],
         "t": pd.to_datetime(["2024-01-01", "2024-01-02", "2024-01-03"]),
         "c": pd.Categorical(["u", "v", "u"])},
        index=pd.Index([10, 20, 30], name="id"))


def test_dataframe_roundtrip_keeps_index(store: BaseArtifactStore, frame: pd.DataFrame) -> None:
    rec, back = roundtrip(store, frame)
    assert (rec.materializer, rec.kind) == ("pandas", "dataframe")
    assert rec.meta == {"columns": ["x", "y", "s", "t", "c"], "rows": 3}
    pd.testing.assert_frame_equal(back, frame)


@pytest.mark.parametrize("index", [pd.RangeIndex(3), pd.Index(["a", "b", "c"]),
                                   pd.MultiIndex.from_tuples([(1, "a"), (1, "b"), (2, "a")],
                                                             names=["k", "j"])])
def test_dataframe_index_kinds(store: BaseArtifactStore, index: pd.Index) -> None:
    df = pd.DataFrame({"v": [1.0, 2.0, 3.0]}, index=index)
    _, back = roundtrip(store, df)
    pd.testing.assert_frame_equal(back, df)


def test_equal_dataframes_have_one_hash(store: BaseArtifactStore, frame: pd.DataFrame) -> None:
    first = save_object(store, frame)
    assert save_object(store, frame.copy(deep=True)).hash == first.hash
    assert save_object(store, frame.assign(x=[1, 2, 4])).hash != first.hash
    # ...and in another process, which shares no caches with this one.
    code = ("import sys, pandas as pd; from reprise.store import LocalArtifactStore, save_object;"
            "df = pd.read_json(sys.stdin, orient='table');"
            "print(save_object(LocalArtifactStore(sys.argv[1]), df).hash)")
    small = pd.DataFrame({"a": [1, 2], "b": ["x", "y"]})
    out = subprocess.run([sys.executable, "-c", code, str(Path(store.url))], check=True,
                         input=small.to_json(orient="table"), capture_output=True, text=True)
    assert out.stdout.strip() == save_object(store, small).hash


def test_arrow_table_roundtrip(store: BaseArtifactStore) -> None:
    table = pa.table({"a": pa.array([1, None, 3], pa.int32()), "b": ["x", "y", "z"],
                      "l": pa.array([[1], [], [2, 3]], pa.list_(pa.int64()))})
    rec, back = roundtrip(store, table)
    assert (rec.materializer, rec.kind, rec.meta["rows"]) == ("arrow", "table", 3)
    assert "a: int32" in rec.meta["schema"]
    assert back.equals(table)
    assert save_object(store, table).hash == rec.hash


# -- JSON and bytes ---------------------------------------------------------------------------


@pytest.mark.parametrize("value", [
    None, True, 0, -7, 2**80, 1.5, "", "héllo", [], {},
    {"b": [1, 2, {"c": None}], "a": {"deep": [[["x"]]]}},
])
def test_json_roundtrip(store: BaseArtifactStore, value: Any) -> None:
    rec, back = roundtrip(store, value)
    assert (rec.materializer, rec.kind) == ("json", "json")
    assert back == value and type(back) is type(value)


def test_json_non_finite_floats(store: BaseArtifactStore) -> None:
    _, back = roundtrip(store, {"nan": float("nan"), "l": [float("inf"), -math.inf, 1.0]})
    assert math.isnan(back["nan"]) and back["l"] == [math.inf, -math.inf, 1.0]


def test_json_types_come_back_as_json_types(store: BaseArtifactStore) -> None:
    _, back = roundtrip(store, {"t": (1, (2, 3)), "n": np.int64(4), "f": np.float32(0.5)})
    assert back == {"t": [1, [2, 3]], "n": 4, "f": 0.5}
    assert type(back["n"]) is int


def test_json_str_is_never_a_path(store: BaseArtifactStore, tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("content")
    assert materializer_for(str(tmp_path / "f.txt")).name == "json"


def test_equal_json_values_have_one_hash(store: BaseArtifactStore) -> None:
    assert save_object(store, {"a": 1, "b": 2}).hash == save_object(store, {"b": 2, "a": 1}).hash


@pytest.mark.parametrize(("value", "match"), [
    ({1: "a"}, "string keys"),
    ([1, {2, 3}], "builtins.set"),
    ({"x": object()}, "builtins.object"),
    ({"$float": "nan"}, "reserved"),
])
def test_json_unstorable_values(store: BaseArtifactStore, value: Any, match: str) -> None:
    with pytest.raises(MaterializerError, match=match):
        save_object(store, value)


@pytest.mark.parametrize("value", [b"\x00\xffraw", bytearray(b"ba"), memoryview(b"mv")])
def test_bytes_roundtrip(store: BaseArtifactStore, value: Any) -> None:
    rec, back = roundtrip(store, value)
    assert (rec.materializer, rec.kind) == ("bytes", "bytes")
    assert back == bytes(value) and type(back) is bytes


def test_corrupt_blob_is_not_decoded(store: BaseArtifactStore) -> None:
    assert isinstance(store, LocalArtifactStore)
    for obj in ({"k": "v"}, np.arange(4)):
        rec = save_object(store, obj)
        blob = store.local_path(rec.hash)
        assert blob is not None
        blob.chmod(0o644)
        blob.write_bytes(blob.read_bytes()[:-1] + b"!")
        with pytest.raises(IntegrityError):
            load_object(store, rec.hash, rec.materializer, rec.meta)


def test_large_objects_spill_to_a_temp_file(store: BaseArtifactStore, frame: pd.DataFrame,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    objs = [np.arange(1000.0).reshape(10, 100), frame, pa.table({"a": list(range(100))})]
    in_memory = [save_object(store, o).hash for o in objs]
    monkeypatch.setattr(_materializer, "_SPILL_BYTES", 0)
    for obj, h in zip(objs, in_memory, strict=True):
        rec, back = roundtrip(store, obj)
        assert rec.hash == h
        assert type(back) is type(obj)


@pytest.fixture
def memory_store() -> Iterator[BaseArtifactStore]:
    pytest.importorskip("fsspec")
    remote = open_artifact_store(f"memory://reprise-test-{uuid.uuid4().hex}")
    assert isinstance(remote, FsspecArtifactStore)
    yield remote
    remote.fs.rm(remote.root, recursive=True)


def test_builtins_on_a_remote_store(memory_store: BaseArtifactStore, frame: pd.DataFrame,
                                    tmp_path: Path) -> None:
    _, arr = roundtrip(memory_store, np.arange(5))
    np.testing.assert_array_equal(arr, np.arange(5))
    _, df = roundtrip(memory_store, frame)
    pd.testing.assert_frame_equal(df, frame)
    assert roundtrip(memory_store, {"k": [1, None]})[1] == {"k": [1, None]}
    src = tmp_path / "src"
    _make_tree(src)
    _, back = roundtrip(memory_store, src, dest=tmp_path / "out")
    assert _tree(back) == _tree(src)
    _, copy = roundtrip(memory_store, src / "a.txt", dest=tmp_path / "file")
    assert copy.read_text() == "alpha"


# -- files and directories --------------------------------------------------------------------


def test_file_roundtrip(store: BaseArtifactStore, tmp_path: Path) -> None:
    src = tmp_path / "model.bin"
    src.write_bytes(b"weights" * 1000)
    rec, back = roundtrip(store, src, dest=tmp_path / "out")
    assert (rec.materializer, rec.kind, rec.meta) == ("file", "file", {"name": "model.bin"})
    assert back == tmp_path / "out" / "model.bin" and back.read_bytes() == src.read_bytes()
    fresh = load_object(store, rec.hash, "file", rec.meta)  # no dest: a fresh temp folder
    assert fresh.read_bytes() == src.read_bytes() and fresh.parent != src.parent


def test_file_name_from_meta_cannot_escape_dest(store: BaseArtifactStore, tmp_path: Path) -> None:
    src = tmp_path / "a.txt"
    src.write_text("a")
    rec = save_object(store, src)
    back = load_object(store, rec.hash, "file", {"name": "../../evil.txt"}, dest=tmp_path / "d")
    assert back == tmp_path / "d" / "evil.txt"


def test_missing_file_is_an_error(store: BaseArtifactStore, tmp_path: Path) -> None:
    with pytest.raises(MaterializerError, match="does not exist"):
        save_object(store, tmp_path / "nope.txt")


def _make_tree(root: Path) -> None:
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "empty").mkdir()
    (root / "a.txt").write_text("alpha")
    (root / "sub" / "b.bin").write_bytes(os.urandom(5000))
    (root / "sub" / "deeper" / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (root / "sub" / "deeper" / "run.sh").chmod(0o755)
    (root / "link.txt").symlink_to("sub/b.bin")


def _tree(root: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_symlink():
            out[rel] = ("link", os.readlink(p))
        elif p.is_dir():
            out[rel] = "dir"
        else:
            out[rel] = (p.read_bytes(), bool(p.stat().st_mode & 0o100))
    return out


def test_directory_roundtrip(store: BaseArtifactStore, tmp_path: Path) -> None:
    src = tmp_path / "src"
    _make_tree(src)
    rec, back = roundtrip(store, src, dest=tmp_path / "out")
    assert (rec.materializer, rec.kind) == ("dir", "dir")
    assert rec.meta == {"files": 3, "bytes": 5 + 5000 + 18}
    assert back == tmp_path / "out"
    assert _tree(back) == _tree(src)
    assert (back / "link.txt").read_bytes() == (src / "sub" / "b.bin").read_bytes()
    fresh = load_object(store, rec.hash, "dir", rec.meta)
    assert _tree(fresh) == _tree(src)


def test_directory_hash_ignores_mtimes_and_owner_bits(store: BaseArtifactStore,
                                                      tmp_path: Path) -> None:
    src = tmp_path / "src"
    _make_tree(src)
    first = save_object(store, src).hash
    for p in src.rglob("*"):
        os.utime(p, (1_000_000, 1_000_000), follow_symlinks=False)
    (src / "a.txt").chmod(0o600)
    assert save_object(store, src).hash == first
    copy = tmp_path / "copy"
    _make_tree(copy)
    (copy / "sub" / "b.bin").write_bytes((src / "sub" / "b.bin").read_bytes())
    assert save_object(store, copy).hash == first
    (copy / "a.txt").write_text("changed")
    assert save_object(store, copy).hash != first


@pytest.mark.parametrize("target", ["../outside.txt", "/etc/hostname", "missing.txt"])
def test_directory_with_escaping_or_broken_symlink_is_refused(
        store: BaseArtifactStore, tmp_path: Path, target: str) -> None:
    (tmp_path / "outside.txt").write_text("secret")
    src = tmp_path / "src"
    src.mkdir()
    (src / "link").symlink_to(target)
    with pytest.raises(MaterializerError, match="symlink"):
        save_object(store, src)
    assert list(store.iter_hashes()) == []


# -- registry ---------------------------------------------------------------------------------


class Point:
    def __init__(self, x: int, y: int) -> None:
        self.x, self.y = x, y


@pytest.mark.parametrize("obj", [Point(1, 2), lambda: 1, {1, 2}])
def test_unknown_object_error_says_how_to_fix_it(store: BaseArtifactStore, obj: Any) -> None:
    tp = type(obj)
    with pytest.raises(MaterializerError) as info:
        save_object(store, obj)
    msg = str(info.value)
    assert f"{tp.__module__}.{tp.__qualname__}" in msg
    assert "never pickles" in msg and "register_materializer" in msg and "pathlib.Path" in msg


def _point_materializer(tag: str) -> type[Materializer]:
    class PointMaterializer(Materializer):
        name, kind, types = f"test-point-{tag}", "json", (Point,)

        def save(self, obj: Any, store: BaseArtifactStore) -> tuple[str, int, dict[str, Any]]:
            h, size = store.put_bytes(f"{obj.x},{obj.y}".encode())
            return h, size, {"tag": tag}

        def load(self, store: BaseArtifactStore, h: str, meta: dict[str, Any],
                 dest: Path | None = None) -> Any:
            x, y = store.get_bytes(h).decode().split(",")
            return Point(int(x), int(y))

    return PointMaterializer


def test_user_materializer_roundtrip(store: BaseArtifactStore) -> None:
    cls = _point_materializer("a")
    assert register_materializer(cls) is cls  # usable as a plain decorator
    rec, back = roundtrip(store, Point(3, 4))
    assert (rec.materializer, rec.kind, rec.meta) == ("test-point-a", "json", {"tag": "a"})
    assert (back.x, back.y) == (3, 4)
    assert isinstance(materializer_by_name("test-point-a"), cls)


def test_user_materializers_come_first_newest_first(store: BaseArtifactStore) -> None:
    class Shout(Materializer):
        name, types = "test-shout", (str,)

        def save(self, obj: Any, store: BaseArtifactStore) -> tuple[str, int, dict[str, Any]]:
            return (*store.put_bytes(obj.upper().encode()), {})

        def load(self, store: BaseArtifactStore, h: str, meta: dict[str, Any],
                 dest: Path | None = None) -> Any:
            return store.get_bytes(h).decode()

    register_materializer(name="test-shout-renamed")(Shout)
    assert materializer_for("hi").name == "test-shout-renamed"
    _, back = roundtrip(store, "hi")
    assert back == "HI"
    register_materializer(_point_materializer("old"))
    register_materializer(_point_materializer("new"))
    assert materializer_for(Point(0, 0)).name == "test-point-new"


def test_registering_a_name_again_replaces_it() -> None:
    first, second = _point_materializer("same")(), _point_materializer("same")()
    register_materializer(first)
    register_materializer(second)
    assert materializer_by_name("test-point-same") is second
    assert [m.name for m in mat._user] == ["test-point-same"]


def test_registration_errors() -> None:
    with pytest.raises(MaterializerError, match="built-in"):
        register_materializer(_point_materializer("x"), name="numpy")
    with pytest.raises(MaterializerError, match="not a reprise.Materializer"):
        register_materializer(Point)  # type: ignore[type-var]


def test_unnamed_class_is_registered_by_import_path() -> None:
    cls = _point_materializer("anon")
    cls.name = ""
    register_materializer(cls)
    assert mat._user[0].name == f"{__name__}:_point_materializer.<locals>.PointMaterializer"


def test_materializer_by_name_imports_module_qualname(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys.modules[__name__], "ImportedPoint", _point_materializer("imp"),
                        raising=False)
    m = materializer_by_name(f"{__name__}:ImportedPoint")
    assert m.name == f"{__name__}:ImportedPoint" and m.handles(Point(1, 1))


@pytest.mark.parametrize("name", ["no-such-materializer", "no_such_module_xyz:Thing",
                                  "os:path", f"{__name__}:Point"])
def test_materializer_by_name_unknown(name: str) -> None:
    with pytest.raises(MaterializerError, match="register it with reprise.register_materializer"):
        materializer_by_name(name)


def test_builtin_names_are_stable() -> None:
    assert [(m.name, m.kind) for m in mat._BUILTINS] == [
        ("numpy", "array"), ("pandas", "dataframe"), ("arrow", "table"), ("bytes", "bytes"),
        ("dir", "dir"), ("file", "file"), ("sklearn", "model"), ("torch-module", "model"),
        ("torch-tensor", "array"), ("json", "json"), ("tree", "dir")]


@pytest.mark.parametrize(("tp", "name"), [
    (np.ndarray, "numpy"), (pd.DataFrame, "pandas"), (pa.Table, "arrow"), (int, "json"),
    (dict, "json"), (bytes, "bytes"), (Path, "dir"), (Point, None), (list[int], None)])
def test_materializer_for_type(tp: Any, name: str | None) -> None:
    m = mat.materializer_for_type(tp)
    assert (m.name if m else None) == name


def test_import_reprise_store_is_lean() -> None:
    code = ("import sys, reprise.store; "
            "print(sorted({m.split('.')[0] for m in sys.modules}))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True).stdout
    loaded = set(json.loads(out.strip().replace("'", '"')))
    assert not loaded & {"numpy", "pandas", "pyarrow", "fsspec"}
