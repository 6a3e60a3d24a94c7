"""Materializers: how Python objects become blobs and come back, without pickle.

Each materializer has a stable ``name`` (stored with the artifact), ``handles(obj)``
and ``save``/``load``. Built-ins cover numpy arrays (``np.save`` with
``allow_pickle=False``), pandas DataFrames and Arrow tables (Parquet), JSON-able
values (canonical JSON), bytes, files (``pathlib.Path`` to a file) and directories
(a deterministic tar). Libraries are imported only when an object of theirs is
seen, so ``import reprise.store`` stays cheap.

An object no materializer handles is an error naming its type: Reprise never
falls back to pickle, because unpickling runs arbitrary code.
"""

from __future__ import annotations

import abc
import importlib
import io
import json
import math
import os
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

from reprise.core._hashing import canonical_json
from reprise.core._types import ArtifactRecord
from reprise.core.errors import MaterializerError

__all__ = [
    "Materializer",
    "load_object",
    "materializer_by_name",
    "materializer_for",
    "materializer_for_type",
    "register_materializer",
    "save_object",
]


class Materializer(abc.ABC):
    """Subclass and register with :func:`reprise.register_materializer`.

    ``types`` (optional) lists classes this materializer stores, so pipelines can
    check step return annotations before running anything.
    """

    name: str = ""
    kind: str = ""
    types: tuple[type, ...] = ()

    def handles(self, obj: Any) -> bool:
        return bool(self.types) and isinstance(obj, self.types)

    def handles_type(self, tp: type) -> bool:
        return bool(self.types) and issubclass(tp, self.types)

    @abc.abstractmethod
    def save(self, obj: Any, store: Any) -> tuple[str, int, dict[str, Any]]:
        """Write ``obj`` to ``store``; return ``(hash, size, meta)``."""

    @abc.abstractmethod
    def load(self, store: Any, h: str, meta: dict[str, Any], dest: Path | None = None) -> Any:
        """Read the object stored under ``h`` back."""


def _mod(name: str) -> Any:
    return sys.modules.get(name)


def _is_instance(obj: Any, module: str, attr: str) -> bool:
    mod = _mod(module)
    cls = getattr(mod, attr, None) if mod is not None else None
    return isinstance(cls, type) and isinstance(obj, cls)


def _type_named(tp: type, *names: str) -> bool:
    return any(f"{c.__module__}.{c.__qualname__}" in names for c in tp.__mro__)


class NumpyMaterializer(Materializer):
    name, kind = "numpy", "array"

    def handles(self, obj: Any) -> bool:
        return _is_instance(obj, "numpy", "ndarray")

    def handles_type(self, tp: type) -> bool:
        return _type_named(tp, "numpy.ndarray")

    def save(self, obj: Any, store: Any) -> tuple[str, int, dict[str, Any]]:
        import numpy as np

        if obj.dtype.hasobject:
            raise MaterializerError(
                f"numpy array of dtype {obj.dtype} holds Python objects, which can only be "
                "stored by pickling; convert it to a numeric or string dtype first.")
        buf = io.BytesIO()
        np.save(buf, np.ascontiguousarray(obj) if not obj.flags.c_contiguous else obj,
                allow_pickle=False)
        h, size = store.put_bytes(buf.getbuffer())
        return h, size, {"dtype": str(obj.dtype), "shape": list(obj.shape)}

    def load(self, store: Any, h: str, meta: dict[str, Any], dest: Path | None = None) -> Any:
        import numpy as np

        return np.load(io.BytesIO(store.get_bytes(h)), allow_pickle=False)


class PandasMaterializer(Materializer):
    name, kind = "pandas", "dataframe"

    def handles(self, obj: Any) -> bool:
        return _is_instance(obj, "pandas", "DataFrame")

    def handles_type(self, tp: type) -> bool:
        return _type_named(tp, "pandas.core.frame.DataFrame")

    def save(self, obj: Any, store: Any) -> tuple[str, int, dict[str, Any]]:
        import pyarrow as pa

        try:
            table = pa.Table.from_pandas(obj, preserve_index=True)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as exc:
            raise MaterializerError(
                f"DataFrame cannot be stored as Parquet ({exc}); object columns must hold "
                "one type each (strings, numbers...).") from None
        h, size = store.put_bytes(_parquet_bytes(table))
        return h, size, {"columns": [str(c) for c in obj.columns], "rows": int(len(obj))}

    def load(self, store: Any, h: str, meta: dict[str, Any], dest: Path | None = None) -> Any:
        import pyarrow.parquet as pq

        return pq.read_table(io.BytesIO(store.get_bytes(h))).to_pandas()


class ArrowMaterializer(Materializer):
    name, kind = "arrow", "table"

    def handles(self, obj: Any) -> bool:
        return _is_instance(obj, "pyarrow", "Table")

    def handles_type(self, tp: type) -> bool:
        return _type_named(tp, "pyarrow.lib.Table")

    def save(self, obj: Any, store: Any) -> tuple[str, int, dict[str, Any]]:
        h, size = store.put_bytes(_parquet_bytes(obj))
        return h, size, {"schema": str(obj.schema), "rows": int(obj.num_rows)}

    def load(self, store: Any, h: str, meta: dict[str, Any], dest: Path | None = None) -> Any:
        import pyarrow.parquet as pq

        return pq.read_table(io.BytesIO(store.get_bytes(h)))


def _parquet_bytes(table: Any) -> bytes:
    """Parquet with settings fixed so equal tables give equal bytes (the writer
    version string is part of the file; it changes only with pyarrow's version)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd", write_statistics=True,
                   use_dictionary=True, version="2.6")
    return bytes(sink.getvalue().to_pybytes())


def _json_able(obj: Any, depth: int = 0) -> bool:
    if depth > 200:
        return False
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return True
    if isinstance(obj, (list, tuple)):
        return all(_json_able(v, depth + 1) for v in obj)
    if isinstance(obj, dict):
        return all(isinstance(k, str) and _json_able(v, depth + 1) for k, v in obj.items())
    return False


def _decode_floats(value: Any) -> Any:
    """Inverse of canonical JSON's tagging of non-finite floats."""
    if isinstance(value, dict):
        if len(value) == 1 and "$float" in value and isinstance(value["$float"], str):
            return float(value["$float"])
        return {k: _decode_floats(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode_floats(v) for v in value]
    return value


class JsonMaterializer(Materializer):
    """JSON-able values (tuples come back as lists, as in JSON itself)."""

    name, kind = "json", "json"

    def handles(self, obj: Any) -> bool:
        return _json_able(obj)

    def handles_type(self, tp: type) -> bool:
        return tp in (bool, int, float, str, list, dict, tuple, type(None))

    def save(self, obj: Any, store: Any) -> tuple[str, int, dict[str, Any]]:
        h, size = store.put_bytes(canonical_json(obj).encode())
        return h, size, {"type": type(obj).__name__}

    def load(self, store: Any, h: str, meta: dict[str, Any], dest: Path | None = None) -> Any:
        return _decode_floats(json.loads(store.get_bytes(h)))


class BytesMaterializer(Materializer):
    name, kind = "bytes", "bytes"

    def handles(self, obj: Any) -> bool:
        return isinstance(obj, (bytes, bytearray, memoryview))

    def handles_type(self, tp: type) -> bool:
        return issubclass(tp, (bytes, bytearray, memoryview))

    def save(self, obj: Any, store: Any) -> tuple[str, int, dict[str, Any]]:
        h, size = store.put_bytes(bytes(obj))
        return h, size, {}

    def load(self, store: Any, h: str, meta: dict[str, Any], dest: Path | None = None) -> Any:
        return store.get_bytes(h)


class FileMaterializer(Materializer):
    """A ``pathlib.Path`` to a regular file; loads as a Path to a copy (in ``dest``,
    or a fresh temporary folder)."""

    name, kind = "file", "file"

    def handles(self, obj: Any) -> bool:
        return isinstance(obj, os.PathLike) and Path(obj).is_file()

    def handles_type(self, tp: type) -> bool:
        return issubclass(tp, os.PathLike)

    def save(self, obj: Any, store: Any) -> tuple[str, int, dict[str, Any]]:
        h, size = store.put_file(Path(obj))
        return h, size, {"name": Path(obj).name}

    def load(self, store: Any, h: str, meta: dict[str, Any], dest: Path | None = None) -> Any:
        folder = Path(dest) if dest is not None else Path(tempfile.mkdtemp(prefix="reprise-"))
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / (meta.get("name") or h)
        store.copy_to(h, target)
        return target


class DirMaterializer(Materializer):
    """A ``pathlib.Path`` to a directory, as an uncompressed tar whose bytes depend
    only on the relative paths, contents and executable bits of its files."""

    name, kind = "dir", "dir"

    def handles(self, obj: Any) -> bool:
        return isinstance(obj, os.PathLike) and Path(obj).is_dir()

    def handles_type(self, tp: type) -> bool:
        return issubclass(tp, os.PathLike)

    def save(self, obj: Any, store: Any) -> tuple[str, int, dict[str, Any]]:
        root = Path(obj)
        files = _walk(root)
        with tempfile.TemporaryFile() as tmp:
            with tarfile.open(fileobj=tmp, mode="w", format=tarfile.PAX_FORMAT) as tar:
                for rel, full in files:
                    st = full.stat()
                    info = tarfile.TarInfo(rel)
                    info.size, info.mtime, info.uid, info.gid = st.st_size, 0, 0, 0
                    info.uname = info.gname = ""
                    info.mode = 0o755 if st.st_mode & 0o111 else 0o644
                    with open(full, "rb") as f:
                        tar.addfile(info, f)
            tmp.seek(0)
            h, size = store.put_stream(iter(lambda: tmp.read(1 << 20), b""))
        return h, size, {"files": len(files), "bytes": sum(p.stat().st_size for _, p in files)}

    def load(self, store: Any, h: str, meta: dict[str, Any], dest: Path | None = None) -> Any:
        folder = Path(dest) if dest is not None else Path(tempfile.mkdtemp(prefix="reprise-"))
        folder.mkdir(parents=True, exist_ok=True)
        with store.open(h) as f, tarfile.open(fileobj=f, mode="r:") as tar:
            tar.extractall(folder, filter="data")  # refuses absolute paths, '..', devices
        return folder


def _walk(root: Path) -> list[tuple[str, Path]]:
    out: list[tuple[str, Path]] = []
    real_root = root.resolve()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            full = Path(dirpath) / name
            if full.is_symlink():
                target = full.resolve()
                if not target.is_relative_to(real_root):
                    raise MaterializerError(
                        f"{full} is a symlink to {target}, outside the directory being stored; "
                        "copy the file in or remove the link.")
            if full.is_file():
                out.append((full.relative_to(root).as_posix(), full))
    return out


_BUILTINS: list[Materializer] = [
    NumpyMaterializer(), PandasMaterializer(), ArrowMaterializer(), BytesMaterializer(),
    FileMaterializer(), DirMaterializer(), JsonMaterializer(),
]
_USER: list[Materializer] = []


def register_materializer(cls_or_instance: Any = None, *, name: str | None = None) -> Any:
    """Register a :class:`Materializer` (class or instance); usable as a decorator.
    User materializers are tried before the built-ins, newest first."""

    def do(obj: Any) -> Any:
        inst = obj() if isinstance(obj, type) else obj
        if not isinstance(inst, Materializer):
            raise MaterializerError(f"{obj!r} is not a reprise.Materializer subclass.")
        if name:
            inst.name = name
        if not inst.name:
            raise MaterializerError(f"materializer {type(inst).__qualname__} needs a name.")
        if any(b.name == inst.name for b in _BUILTINS):
            raise MaterializerError(f"materializer name {inst.name!r} is taken by a built-in.")
        _USER[:] = [m for m in _USER if m.name != inst.name]
        _USER.insert(0, inst)
        return obj

    return do(cls_or_instance) if cls_or_instance is not None else do


def _all() -> list[Materializer]:
    return [*_USER, *_BUILTINS]


def materializer_for(obj: Any) -> Materializer:
    for m in _all():
        if m.handles(obj):
            return m
    tp = type(obj)
    raise MaterializerError(
        f"no safe materializer for an object of type {tp.__module__}.{tp.__qualname__}; "
        "Reprise never pickles. Return numpy arrays, DataFrames, Arrow tables, JSON-able "
        "values, bytes or a pathlib.Path, or register one: subclass reprise.Materializer and "
        "decorate it with @reprise.register_materializer.")


def materializer_for_type(tp: type) -> Materializer | None:
    for m in _all():
        try:
            if m.handles_type(tp):
                return m
        except TypeError:
            continue
    return None


def materializer_by_name(name: str) -> Materializer:
    for m in _all():
        if m.name == name:
            return m
    if ":" in name:  # "package.module:Class" - import it, which registers it
        mod, _, qual = name.partition(":")
        try:
            obj: Any = importlib.import_module(mod)
            for part in qual.split("."):
                obj = getattr(obj, part)
            register_materializer(obj, name=name)
            return materializer_by_name(name)
        except (ImportError, AttributeError):
            pass
    raise MaterializerError(
        f"unknown materializer {name!r}; register it with reprise.register_materializer "
        "before loading this artifact.")


def save_object(store: Any, obj: Any) -> ArtifactRecord:
    """Store ``obj`` with the first materializer that handles it."""
    m = materializer_for(obj)
    h, size, meta = m.save(obj, store)
    return ArtifactRecord(hash=h, size=size, kind=m.kind, materializer=m.name,
                          meta=_finite(meta), created=time.time())


def load_object(store: Any, h: str, materializer: str, meta: dict[str, Any] | None = None,
                dest: str | os.PathLike[str] | None = None) -> Any:
    """Load the object stored under ``h`` with the named materializer."""
    return materializer_by_name(materializer).load(store, h, dict(meta or {}),
                                                   Path(dest) if dest is not None else None)


def _finite(meta: dict[str, Any]) -> dict[str, Any]:
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
            for k, v in meta.items()}


