"""Materializers: how Python objects become blobs and come back, without pickle.

A :class:`Materializer` has a stable ``name`` (stored with the artifact so the
right one reads it back), an artifact ``kind``, ``handles(obj)`` and
``save``/``load``. The built-ins, tried in this order after any user-registered
ones (newest first):

================  =============  ===========================================================
name              kind           objects
================  =============  ===========================================================
``numpy``         ``array``      ``numpy.ndarray`` (``np.save``, ``allow_pickle=False``)
``pandas``        ``dataframe``  ``pandas.DataFrame`` (Parquet, index kept)
``arrow``         ``table``      ``pyarrow.Table`` (Parquet)
``bytes``         ``bytes``      ``bytes``, ``bytearray``, ``memoryview`` (load: ``bytes``)
``dir``           ``dir``        a ``pathlib.Path`` to a directory (deterministic tar)
``file``          ``file``       a ``pathlib.Path`` to a file (load: ``Path`` to a copy)
``sklearn``       ``model``      a scikit-learn estimator or pipeline (``skops.io``, types
                                 checked against an allow-list before loading)
``torch-module``  ``model``      ``torch.nn.Module`` (safetensors state dict, class path
                                 and constructor args; load: CPU, same train/eval mode)
``torch-tensor``  ``array``      ``torch.Tensor``, ``nn.Parameter`` (safetensors; load: CPU)
``json``          ``json``       None, bool, int, float, str, list, tuple, str-keyed dict
================  =============  ===========================================================

A ``str`` is always JSON, never a path: pass a ``pathlib.Path`` to store a file.
Libraries are imported only when one of their objects is seen, so
``import reprise.store`` loads neither numpy, pandas, pyarrow, torch nor
sklearn. An object no materializer handles is an error naming its type:
Reprise never falls back to pickle, because unpickling runs arbitrary code.
"""

from __future__ import annotations

import abc
import contextlib
import importlib
import io
import json
import os
import stat
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO, TypeVar, overload

from reprise.core._hashing import canonical_json, is_hash
from reprise.core._types import ArtifactRecord
from reprise.core.errors import IntegrityError, MaterializerError
from reprise.store._artifacts import BaseArtifactStore

__all__ = [
    "Materializer",
    "load_object",
    "materializer_by_name",
    "materializer_for",
    "materializer_for_type",
    "register_materializer",
    "save_object",
]

# Above this many bytes an object is serialised to a temp file and stored with
# put_file, instead of being held in memory a second (and third) time.
_SPILL_BYTES = 32 << 20


class Materializer(abc.ABC):
    """How one family of objects is stored; subclass and :func:`register_materializer` it.

    Contract:

    * ``name`` is stored with every artifact and picks the materializer that
      loads it, so it must never change once data was written. A registered
      class without a name gets ``"module:QualName"``, which lets a fresh
      process import it when loading.
    * ``handles(obj)`` is cheap and never imports a library: test
      ``sys.modules`` (an object of a library that is not imported cannot exist).
    * ``save`` writes through the store's ``put_*`` methods and returns
      ``(hash, size, meta)``; ``meta`` must be JSON-able (it goes to the
      metadata store) and is handed back to ``load``.
    * ``load`` rebuilds the object; ``dest`` is a folder for materializers that
      produce files. The built-ins check the blob's hash before decoding and
      raise ``IntegrityError`` for corrupt bytes.

    Example:
        >>> class SetMaterializer(Materializer):
        ...     name, kind, types = "example-set", "json", (frozenset,)
        ...     def save(self, obj, store):
        ...         h, size = store.put_bytes(repr(sorted(obj)).encode())
        ...         return h, size, {}
        ...     def load(self, store, h, meta, dest=None):
        ...         import ast
        ...         return frozenset(ast.literal_eval(store.get_bytes(h).decode()))
        >>> SetMaterializer().handles(frozenset({1}))
        True
    """

    name: str = ""
    kind: str = "object"
    types: tuple[type, ...] = ()
    """Classes this materializer stores; the default ``handles`` checks against them."""

    def handles(self, obj: Any) -> bool:
        """True when this materializer can store ``obj``."""
        return bool(self.types) and isinstance(obj, self.types)

    def handles_type(self, tp: type) -> bool:
        """True when objects of class ``tp`` can be stored (for checking annotations)."""
        return bool(self.types) and issubclass(tp, self.types)

    @abc.abstractmethod
    def save(self, obj: Any, store: BaseArtifactStore) -> tuple[str, int, dict[str, Any]]:
        """Write ``obj`` to ``store``; return ``(hash, size, meta)``."""

    @abc.abstractmethod
    def load(
        self, store: BaseArtifactStore, h: str, meta: dict[str, Any], dest: Path | None = None
    ) -> Any:
        """Rebuild the object stored as blob ``h``."""


# -- helpers ----------------------------------------------------------------------------------


def _instance_of(obj: Any, module: str, *attrs: str) -> bool:
    mod = sys.modules.get(module)
    if mod is None:  # the library was never imported, so obj cannot be one of its objects
        return False
    classes = tuple(c for a in attrs if isinstance(c := getattr(mod, a, None), type))
    return bool(classes) and isinstance(obj, classes)


def _type_named(tp: type, *names: str, subclasses: bool = True) -> bool:
    mro = tp.__mro__ if subclasses else (tp,)
    return any(f"{c.__module__}.{c.__qualname__}" in names for c in mro)


def _put_written(store: BaseArtifactStore, write: Callable[[BinaryIO], None],
                 *, spill: bool) -> tuple[str, int]:
    """Serialise with ``write`` into memory, or into a temp file when ``spill``."""
    if not spill:
        buf = io.BytesIO()
        write(buf)
        return store.put_bytes(buf.getvalue())
    with tempfile.TemporaryDirectory(prefix="reprise-") as tmp:
        path = Path(tmp) / "blob"
        with open(path, "wb") as f:
            write(f)
        return store.put_file(path)


def _corrupt(store: BaseArtifactStore, h: str) -> IntegrityError:
    return IntegrityError(
        f"Blob {h} in artifact store {store.url} is corrupt: its bytes do not hash to its "
        "name. Run `reprise fsck` to remove corrupt blobs, then re-run what produced it."
    )


@contextlib.contextmanager
def _verified_file(store: BaseArtifactStore, h: str) -> Iterator[Path]:
    """A local file holding blob ``h``, hash-checked: the blob itself or a temp copy."""
    local = store.local_path(h)
    if local is not None:
        if not store.verify(h):
            raise _corrupt(store, h)
        yield local
        return
    with tempfile.TemporaryDirectory(prefix="reprise-") as tmp:
        yield store.copy_to(h, Path(tmp) / "blob", verify=True)


def _as_path(obj: Any) -> Path | None:
    if not isinstance(obj, os.PathLike):
        return None
    raw = os.fspath(obj)
    return Path(raw) if isinstance(raw, str) else None


def _dest_folder(dest: Path | None) -> Path:
    folder = Path(dest) if dest is not None else Path(tempfile.mkdtemp(prefix="reprise-"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


# -- arrays and tables ------------------------------------------------------------------------


class NumpyMaterializer(Materializer):
    """Plain ``numpy.ndarray`` (and ``memmap``) as ``.npy``; object arrays are refused.

    Subclasses that carry more than the data (masked arrays, matrices) are not
    handled, rather than silently dropping what they add.
    """

    name, kind = "numpy", "array"

    def handles(self, obj: Any) -> bool:
        np = sys.modules.get("numpy")
        return np is not None and (type(obj) is np.ndarray or isinstance(obj, np.memmap))

    def handles_type(self, tp: type) -> bool:
        return _type_named(tp, "numpy.ndarray", "numpy.memmap", subclasses=False)

    def save(self, obj: Any, store: BaseArtifactStore) -> tuple[str, int, dict[str, Any]]:
        import numpy as np

        if obj.dtype.hasobject:
            raise MaterializerError(
                f"a numpy array of dtype {obj.dtype} holds Python objects, which only pickle "
                "can store, and Reprise never pickles; convert it to a numeric, string or "
                "structured dtype first (e.g. arr.astype(str)).")
        # C order always, so a Fortran-ordered copy of the same data has the same hash.
        arr = obj if obj.flags.c_contiguous else np.copy(obj, order="C")
        try:
            h, size = _put_written(store, lambda f: np.save(f, arr, allow_pickle=False),
                                   spill=arr.nbytes > _SPILL_BYTES)
        except ValueError as exc:
            raise MaterializerError(
                f"numpy array of dtype {obj.dtype} cannot be saved without pickle ({exc}); "
                "convert it to a fixed-width dtype first.") from None
        return h, size, {"dtype": str(obj.dtype), "shape": [int(n) for n in obj.shape]}

    def load(self, store: BaseArtifactStore, h: str, meta: dict[str, Any],
             dest: Path | None = None) -> Any:
        import numpy as np

        with _verified_file(store, h) as path:
            return np.load(path, allow_pickle=False)


def _write_parquet(table: Any, f: BinaryIO) -> None:
    """Parquet with every setting pinned, so equal tables give equal bytes.

    The writer's version is part of the file, so hashes change only when pyarrow does.
    """
    import pyarrow.parquet as pq

    pq.write_table(table, f, compression="zstd", version="2.6", use_dictionary=True,
                   write_statistics=True, store_schema=True)


def _read_parquet(store: BaseArtifactStore, h: str) -> Any:
    import pyarrow.parquet as pq

    with _verified_file(store, h) as path, open(path, "rb") as f:
        return pq.read_table(f)


class PandasMaterializer(Materializer):
    """``pandas.DataFrame`` as Parquet; the index (and its name) comes back too."""

    name, kind = "pandas", "dataframe"

    def handles(self, obj: Any) -> bool:
        return _instance_of(obj, "pandas", "DataFrame")

    def handles_type(self, tp: type) -> bool:
        return _type_named(tp, "pandas.DataFrame", "pandas.core.frame.DataFrame")

    def save(self, obj: Any, store: BaseArtifactStore) -> tuple[str, int, dict[str, Any]]:
        import pyarrow as pa

        try:
            # preserve_index=None: a RangeIndex is kept as metadata, any other as a column.
            table = pa.Table.from_pandas(obj, preserve_index=None)
        except (pa.ArrowException, ValueError, TypeError) as exc:
            raise MaterializerError(
                f"this DataFrame cannot be stored as Parquet ({exc}); give every column "
                "one type (numbers, strings, datetimes...) and unique string names.") from None
        h, size = _put_written(store, lambda f: _write_parquet(table, f),
                               spill=table.nbytes > _SPILL_BYTES)
        return h, size, {"columns": [str(c) for c in obj.columns], "rows": int(len(obj))}

    def load(self, store: BaseArtifactStore, h: str, meta: dict[str, Any],
             dest: Path | None = None) -> Any:
        return _read_parquet(store, h).to_pandas()


class ArrowMaterializer(Materializer):
    """``pyarrow.Table`` as Parquet."""

    name, kind = "arrow", "table"

    def handles(self, obj: Any) -> bool:
        return _instance_of(obj, "pyarrow", "Table")

    def handles_type(self, tp: type) -> bool:
        return _type_named(tp, "pyarrow.lib.Table")

    def save(self, obj: Any, store: BaseArtifactStore) -> tuple[str, int, dict[str, Any]]:
        h, size = _put_written(store, lambda f: _write_parquet(obj, f),
                               spill=obj.nbytes > _SPILL_BYTES)
        return h, size, {"schema": str(obj.schema), "rows": int(obj.num_rows)}

    def load(self, store: BaseArtifactStore, h: str, meta: dict[str, Any],
             dest: Path | None = None) -> Any:
        return _read_parquet(store, h)


# -- JSON and bytes ---------------------------------------------------------------------------

_FLOAT_TAG = "$float"  # how reprise.core._hashing.canonical_json writes NaN and infinities


def _decode_floats(value: Any) -> Any:
    """Inverse of canonical JSON's ``{"$float": repr}`` tagging of non-finite floats."""
    if isinstance(value, dict):
        if len(value) == 1 and isinstance(value.get(_FLOAT_TAG), str):
            return float(value[_FLOAT_TAG])
        return {k: _decode_floats(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode_floats(v) for v in value]
    return value


def _has_float_tag(value: Any) -> bool:
    if isinstance(value, Mapping):
        return (len(value) == 1 and _FLOAT_TAG in value) or any(
            _has_float_tag(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_has_float_tag(v) for v in value)
    return False


class JsonMaterializer(Materializer):
    """JSON-able values as canonical JSON (NaN and infinities included).

    Loading gives an equal value with JSON's types: tuples come back as lists,
    numpy scalars as Python numbers, dict subclasses as dicts.
    """

    name, kind = "json", "json"
    _TOP = (type(None), bool, int, float, str, list, tuple, dict)

    def handles(self, obj: Any) -> bool:
        # Containers are accepted here and checked in depth by save, so that an
        # unstorable item is reported precisely instead of as "no materializer".
        return isinstance(obj, self._TOP) or _instance_of(obj, "numpy", "generic")

    def handles_type(self, tp: type) -> bool:
        return issubclass(tp, self._TOP) or _type_named(tp, "numpy.generic")

    def save(self, obj: Any, store: BaseArtifactStore) -> tuple[str, int, dict[str, Any]]:
        try:
            text = canonical_json(obj)
        except (TypeError, ValueError, RecursionError) as exc:
            raise MaterializerError(
                f"cannot store this {type(obj).__name__} as JSON: {exc}. Reprise never "
                "pickles; convert the value, or register a materializer for it with "
                "@reprise.register_materializer.") from None
        if _has_float_tag(obj):
            raise MaterializerError(
                f"a dict whose only key is {_FLOAT_TAG!r} is reserved by Reprise's canonical "
                "JSON (it encodes NaN and infinities); rename the key.")
        h, size = store.put_bytes(text.encode())
        return h, size, {"type": type(obj).__name__}

    def load(self, store: BaseArtifactStore, h: str, meta: dict[str, Any],
             dest: Path | None = None) -> Any:
        return _decode_floats(json.loads(store.get_bytes(h, verify=True)))


class BytesMaterializer(Materializer):
    """Raw bytes; ``bytearray`` and ``memoryview`` come back as ``bytes``."""

    name, kind, types = "bytes", "bytes", (bytes, bytearray, memoryview)

    def save(self, obj: Any, store: BaseArtifactStore) -> tuple[str, int, dict[str, Any]]:
        h, size = store.put_bytes(bytes(obj))
        return h, size, {}

    def load(self, store: BaseArtifactStore, h: str, meta: dict[str, Any],
             dest: Path | None = None) -> Any:
        return store.get_bytes(h, verify=True)


# -- files and directories --------------------------------------------------------------------


class FileMaterializer(Materializer):
    """A path to a regular file (symlinks followed).

    Loading copies the file (hash-checked) into ``dest``, or into a fresh
    temporary folder, under its original name, and returns that ``Path``: the
    caller may change or delete the copy without touching the store.
    """

    name, kind = "file", "file"

    def handles(self, obj: Any) -> bool:
        path = _as_path(obj)
        return path is not None and not path.is_dir()

    def handles_type(self, tp: type) -> bool:
        return issubclass(tp, os.PathLike)

    def save(self, obj: Any, store: BaseArtifactStore) -> tuple[str, int, dict[str, Any]]:
        path = _as_path(obj)
        if path is None or not path.is_file():
            raise MaterializerError(
                f"cannot store {obj!r}: it does not exist or is not a regular file. Write the "
                "file first and return its pathlib.Path.")
        h, size = store.put_file(path)
        return h, size, {"name": path.name}

    def load(self, store: BaseArtifactStore, h: str, meta: dict[str, Any],
             dest: Path | None = None) -> Any:
        name = Path(str(meta.get("name") or "")).name or h  # never a path from the database
        return store.copy_to(h, _dest_folder(dest) / name, verify=True)


class DirMaterializer(Materializer):
    """A path to a directory, as an uncompressed tar whose bytes depend only on the tree.

    Entries are sorted, with mtime 0, owner 0/"" and modes 0o755 (directories,
    executable files) or 0o644, so equal trees have equal hashes whatever their
    timestamps. Symlinks are kept as relative links if they stay inside the
    directory; one pointing outside it, or nowhere, is an error. Loading extracts
    into ``dest`` (or a fresh temporary folder) with tarfile's ``data`` filter
    and returns the folder.
    """

    name, kind = "dir", "dir"

    def handles(self, obj: Any) -> bool:
        path = _as_path(obj)
        return path is not None and path.is_dir()

    def handles_type(self, tp: type) -> bool:
        return issubclass(tp, os.PathLike)

    def save(self, obj: Any, store: BaseArtifactStore) -> tuple[str, int, dict[str, Any]]:
        root = Path(os.fspath(obj))
        members = list(_tar_members(root))  # all checks pass before anything is written
        files, total = 0, 0
        with tempfile.TemporaryDirectory(prefix="reprise-") as tmp:
            tar_path = Path(tmp) / "dir.tar"
            with tarfile.open(tar_path, mode="w", format=tarfile.PAX_FORMAT) as tar:
                for info, full in members:
                    if not info.isreg():
                        tar.addfile(info)
                        continue
                    with open(full, "rb") as f:
                        if os.fstat(f.fileno()).st_size != info.size:
                            raise MaterializerError(
                                f"{full} changed while {root} was being stored; store it again "
                                "once nothing writes to it.")
                        tar.addfile(info, f)
                    files, total = files + 1, total + info.size
            h, size = store.put_file(tar_path)
        return h, size, {"files": files, "bytes": total}

    def load(self, store: BaseArtifactStore, h: str, meta: dict[str, Any],
             dest: Path | None = None) -> Any:
        folder = _dest_folder(dest)
        with _verified_file(store, h) as path, tarfile.open(path, mode="r:") as tar:
            tar.extractall(folder, filter="data")  # refuses absolute paths, '..', devices
        return folder


def _tar_members(root: Path) -> Iterator[tuple[tarfile.TarInfo, Path]]:
    """Normalised tar headers for everything below ``root``, in sorted order."""

    def fail(exc: OSError) -> None:
        raise MaterializerError(f"cannot read {exc.filename} while storing {root}: {exc}")

    real_root = root.resolve()
    entries: list[tuple[str, Path]] = []
    for dirpath, dirnames, filenames in os.walk(root, onerror=fail):  # never follows links
        for name in (*dirnames, *filenames):
            full = Path(dirpath) / name
            entries.append((full.relative_to(root).as_posix(), full))
    for rel, full in sorted(entries):
        yield _tar_info(rel, full, real_root), full


def _tar_info(rel: str, full: Path, real_root: Path) -> tarfile.TarInfo:
    st = full.lstat()
    info = tarfile.TarInfo(rel)
    info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
    if stat.S_ISLNK(st.st_mode):
        try:
            target = full.resolve(strict=True)
        except (OSError, RuntimeError):
            raise MaterializerError(
                f"{full} is a broken or looping symlink; fix or remove it before storing "
                "the directory.") from None
        if not target.is_relative_to(real_root):
            raise MaterializerError(
                f"{full} is a symlink to {target}, outside the directory being stored "
                f"({real_root}); copy the target in or remove the link.")
        info.type, info.mode = tarfile.SYMTYPE, 0o777
        info.linkname = os.path.relpath(target, full.parent.resolve())
    elif stat.S_ISDIR(st.st_mode):
        info.type, info.mode = tarfile.DIRTYPE, 0o755
    elif stat.S_ISREG(st.st_mode):
        info.size = st.st_size
        info.mode = 0o755 if st.st_mode & 0o111 else 0o644
    else:
        raise MaterializerError(
            f"{full} is not a regular file, directory or symlink (a socket, FIFO or device); "
            "remove it before storing the directory.")
    return info


# -- registry ---------------------------------------------------------------------------------

# Imported here, not at the top: _ml subclasses Materializer and uses the helpers above.
from reprise.store._ml import (  # noqa: E402
    SklearnMaterializer,
    TorchModuleMaterializer,
    TorchTensorMaterializer,
)
from reprise.store._tree import TreeMaterializer  # noqa: E402

_BUILTINS: tuple[Materializer, ...] = (
    NumpyMaterializer(), PandasMaterializer(), ArrowMaterializer(), BytesMaterializer(),
    DirMaterializer(), FileMaterializer(), SklearnMaterializer(), TorchModuleMaterializer(),
    TorchTensorMaterializer(), JsonMaterializer(), TreeMaterializer(),
)
_BUILTIN_NAMES = frozenset(m.name for m in _BUILTINS)
_user: list[Materializer] = []  # newest first
_lock = threading.Lock()

_M = TypeVar("_M", bound="type[Materializer] | Materializer")


@overload
def register_materializer(cls_or_instance: _M, *, name: str | None = None) -> _M: ...


@overload
def register_materializer(
    cls_or_instance: None = None, *, name: str | None = None
) -> Callable[[_M], _M]: ...


def register_materializer(cls_or_instance: Any = None, *, name: str | None = None) -> Any:
    """Register a :class:`Materializer` subclass (or instance); usable as a decorator.

    User materializers are tried before the built-ins, newest first. Registering
    a name again replaces the earlier one; the built-ins' names are reserved. A
    class without a ``name`` is registered as ``"module:QualName"``.

    Example:
        >>> @register_materializer
        ... class Tagged(Materializer):
        ...     name, types = "doc-tagged", (complex,)
        ...     def save(self, obj, store):
        ...         return (*store.put_bytes(repr(obj).encode()), {})
        ...     def load(self, store, h, meta, dest=None):
        ...         return complex(store.get_bytes(h).decode())
        >>> materializer_for(1j).name
        'doc-tagged'
    """

    def register(obj: Any) -> Any:
        is_cls = isinstance(obj, type) and issubclass(obj, Materializer)
        inst = obj() if is_cls else obj
        if not isinstance(inst, Materializer):
            raise MaterializerError(
                f"{obj!r} is not a reprise.Materializer; subclass reprise.Materializer and "
                "implement save and load.")
        cls = type(inst)
        inst.name = name or inst.name or f"{cls.__module__}:{cls.__qualname__}"
        if inst.name in _BUILTIN_NAMES:
            raise MaterializerError(
                f"materializer name {inst.name!r} belongs to a built-in; give "
                f"{cls.__qualname__} another name (its artifacts are found by this name).")
        with _lock:
            _user[:] = [inst, *(m for m in _user if m.name != inst.name)]
        return obj

    return register(cls_or_instance) if cls_or_instance is not None else register


def _registered() -> tuple[Materializer, ...]:
    with _lock:
        return (*_user, *_BUILTINS)


def materializer_for(obj: Any) -> Materializer:
    """The first materializer (user-registered, then built-in) that handles ``obj``.

    Example:
        >>> materializer_for({"a": [1, 2.5]}).name
        'json'
    """
    for m in _registered():
        if m.handles(obj):
            return m
    tp = type(obj)
    raise MaterializerError(
        f"Reprise cannot store an object of type {tp.__module__}.{tp.__qualname__}: no "
        "materializer handles it, and Reprise never pickles (unpickling runs arbitrary code). "
        "Convert it to a numpy array, DataFrame, Arrow table, JSON-able value or bytes; or "
        "save it to a file yourself and return a pathlib.Path; or register a materializer: "
        "subclass reprise.Materializer and decorate it with @reprise.register_materializer.")


def materializer_for_type(tp: Any) -> Materializer | None:
    """The materializer for objects of class ``tp``, or None (for checking annotations)."""
    if not isinstance(tp, type):
        return None
    for m in _registered():
        with contextlib.suppress(TypeError):
            if m.handles_type(tp):
                return m
    return None


def materializer_by_name(name: str) -> Materializer:
    """The materializer registered as ``name``; ``"module:QualName"`` is imported if needed.

    Example:
        >>> materializer_by_name("numpy").kind
        'array'
    """
    for m in _registered():
        if m.name == name:
            return m
    problem = ""
    if ":" in name:
        module, _, qualname = name.partition(":")
        try:
            obj: Any = importlib.import_module(module)
            for part in qualname.split("."):
                obj = getattr(obj, part)
        except (ImportError, AttributeError) as exc:
            problem = f" (importing it failed: {exc})"
        else:
            if isinstance(obj, Materializer) or (
                isinstance(obj, type) and issubclass(obj, Materializer)
            ):
                register_materializer(obj, name=name)
                return materializer_by_name(name)
            problem = f" ({name} is not a reprise.Materializer)"
    raise MaterializerError(
        f"Unknown materializer {name!r}{problem}; register it with "
        "reprise.register_materializer before loading this artifact.")


# -- saving and loading -----------------------------------------------------------------------


def save_object(store: BaseArtifactStore, obj: Any) -> ArtifactRecord:
    """Store ``obj`` with the first materializer that handles it; return its record.

    Example:
        >>> import tempfile
        >>> from reprise.store import open_artifact_store
        >>> rec = save_object(open_artifact_store(tempfile.mkdtemp()), [1, 2])
        >>> rec.materializer, rec.kind, rec.size
        ('json', 'json', 5)
    """
    m = materializer_for(obj)
    h, size, meta = m.save(obj, store)
    if not (isinstance(h, str) and is_hash(h) and isinstance(size, int)
            and isinstance(meta, dict)):
        raise MaterializerError(
            f"materializer {m.name!r} returned {(h, size, type(meta).__name__)!r} from save; "
            "it must return (hash, size, meta) as given by the store's put_* methods.")
    try:
        json.dumps(meta, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise MaterializerError(
            f"materializer {m.name!r} returned meta that is not JSON-able ({exc}); use "
            "str, int, finite float, bool, None, lists and str-keyed dicts.") from None
    return ArtifactRecord(hash=h, size=size, kind=m.kind, materializer=m.name, meta=meta,
                          created=time.time())


def load_object(store: BaseArtifactStore, h: str, materializer: str,
                meta: Mapping[str, Any] | None = None,
                dest: str | os.PathLike[str] | None = None) -> Any:
    """Load blob ``h`` with the materializer named ``materializer``.

    ``dest`` is the folder that ``file`` and ``dir`` artifacts are written to
    (default: a fresh temporary folder); other kinds ignore it.

    Example:
        >>> import tempfile
        >>> from reprise.store import open_artifact_store
        >>> store = open_artifact_store(tempfile.mkdtemp())
        >>> rec = save_object(store, {"a": float("nan")})
        >>> load_object(store, rec.hash, rec.materializer, rec.meta)
        {'a': nan}
    """
    m = materializer_by_name(materializer)
    return m.load(store, h, dict(meta or {}), Path(dest) if dest is not None else None)
