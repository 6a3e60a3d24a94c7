"""Materializers for values: numpy arrays, pandas and Arrow tables (Parquet), JSON and bytes.

None of them pickles: arrays are saved with ``allow_pickle=False``, tables as Parquet,
small values as canonical JSON (NaN and infinities tagged).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO

from reprise.core._hashing import canonical_json
from reprise.core.errors import MaterializerError
from reprise.store import _materializer as _base
from reprise.store._artifacts import BaseArtifactStore
from reprise.store._materializer import (
    Materializer,
    _instance_of,
    _put_written,
    _type_named,
    _verified_file,
)

# Imported here, not at the top: _ml subclasses Materializer and uses the helpers above.


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
                                   spill=arr.nbytes > _base._SPILL_BYTES)
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
                               spill=table.nbytes > _base._SPILL_BYTES)
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
                               spill=obj.nbytes > _base._SPILL_BYTES)
        return h, size, {"schema": str(obj.schema), "rows": int(obj.num_rows)}

    def load(self, store: BaseArtifactStore, h: str, meta: dict[str, Any],
             dest: Path | None = None) -> Any:
        return _read_parquet(store, h)


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
