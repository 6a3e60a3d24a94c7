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

import contextlib
import importlib
import json
import os
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar, overload

from reprise.core._hashing import is_hash
from reprise.core._types import ArtifactRecord
from reprise.core.errors import MaterializerError
from reprise.store._artifacts import BaseArtifactStore
from reprise.store._materializer import Materializer
from reprise.store._ml import SklearnMaterializer
from reprise.store._path_materializers import DirMaterializer, FileMaterializer
from reprise.store._torch import TorchModuleMaterializer, TorchTensorMaterializer
from reprise.store._tree import TreeMaterializer
from reprise.store._value_materializers import (
    ArrowMaterializer,
    BytesMaterializer,
    JsonMaterializer,
    NumpyMaterializer,
    PandasMaterializer,
)

__all__ = [
    "Materializer",
    "load_object",
    "materializer_by_name",
    "materializer_for",
    "materializer_for_type",
    "register_materializer",
    "save_object",
]


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
