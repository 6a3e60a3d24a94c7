"""Streaming dataset profiles: one pass over Arrow record batches, memory bounded by the batch.

A profile is a plain JSON document (``json.dumps(profile, allow_nan=False)`` works)
stored with every dataset version and compared by ``reprise data diff``. It is
built in a single pass so a file larger than memory can be profiled: every
per-column summary below has a size fixed by the arguments, never by the row count.

What is exact and what is estimated, and why:

- ``count``, ``nulls``, ``min``, ``max``, ``mean`` and ``std`` are exact (up to
  float64 rounding). Each batch is summarised with numpy (two-pass mean and sum of
  squared deviations) and the summaries are merged with Chan et al.'s parallel
  formula, which stays accurate where a running ``sum(x**2)`` would cancel.
  ``std`` is the *sample* standard deviation (``ddof=1``), as pandas reports it.
- ``distinct`` counts 64-bit hashes of the values. Up to :data:`DISTINCT_CAP`
  distinct values the count is exact (``distinct_exact: true``); beyond, the same
  bottom-k set of hashes gives a K-Minimum-Values estimate (relative standard error
  about ``1/sqrt(DISTINCT_CAP)``, 0.3 %). It is written here rather than taken from
  a library because no sketch library we trust is among the dependencies, and KMV is
  a few lines of numpy. Numbers hash through a bijection, so their exact counts have
  no collisions.
- ``quantiles`` come from a uniform sample of ``sample_size`` values chosen by
  random per-row priorities (a bottom-k sample). They are exact when a column has at
  most ``sample_size`` finite values and approximate above. The priorities depend
  only on the seed and the row number, so the same rows give the same profile however
  they are cut into batches.
- ``histogram``: ``bins`` equal-width bins between ``min`` and ``max``. Min and max
  are unknown until the end, so the pass counts values exactly on a grid of at most
  :data:`FINE_BINS` bins of power-of-two width, coarsened by merging pairs of bins as
  the range grows (which keeps the counts exact). The final bins are read off that
  grid; a grid bin that straddles a final edge is split in proportion, so each
  count is off by at most the count of one grid bin (a 1/4096 slice of the range).
  Columns with at most ``sample_size`` finite values are binned exactly.
- ``top`` (strings and categoricals): exact counts while there are at most
  :data:`DISTINCT_CAP` distinct values; beyond, a Misra-Gries summary whose counts
  are lower bounds, each short by at most ``rows / (capacity + 1)``
  (``top_exact: false``).

NaN is treated as missing: it counts in ``nulls`` (and in ``nan``), as pandas
treats it. Infinities are values: they count in ``count`` (and in ``inf``) and in
``distinct`` but are left out of min, max, mean, std, quantiles and histogram,
which describe the finite values (and could not be written as JSON otherwise).
Integers above 2**53 lose precision in those float64 statistics; their min and max
stay exact.

Memory per column is fixed: at most :data:`DISTINCT_CAP` hashes, ``2 * sample_size``
sampled values, :data:`FINE_BINS` counts, and for text :data:`DISTINCT_CAP` (later
:data:`MG_CAPACITY`) counted values. Beyond that only the batch in flight is held.
The columns of a batch are profiled on a thread pool (numpy and Arrow release the
GIL), and work on a batch is done a cache-sized chunk at a time, because every
numpy pass over a whole batch streams it from memory again.
"""

from __future__ import annotations

import math
import os
import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from reprise.core.errors import ConfigError, InvalidNameError, UserError
from reprise.data._formats import DataFormatError

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "DISTINCT_CAP",
    "FINE_BINS",
    "FORMAT_VERSION",
    "QUANTILES",
    "column_type_changes",
    "diff_profiles",
    "profile_batches",
    "profile_files",
    "profile_parquet",
    "profile_table",
]

FORMAT_VERSION = 1
QUANTILES = (0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99)
DISTINCT_CAP = 100_000  # exact distinct counts and exact top counts up to here
FINE_BINS = 8192  # histogram grid; each grid bin is at most ~1/4096 of the range
MG_CAPACITY = 10_000  # Misra-Gries counters once a text column has too many values
BLOCK_ROWS = 1 << 18  # rows per block of sampling priorities (one RNG per block)
_PARALLEL_ROWS = 1 << 15  # smaller batches are profiled on the calling thread
_CHUNK = 1 << 15  # values per numpy pass where several passes follow: they stay in cache
# Arrow's hash table counts fastest while a column has few values; beyond this many, hashing
# every row and sorting the hashes is faster (both are exact: only speed depends on it).
_FEW_VALUES = 4096

_U64 = np.uint64
_T = TypeVar("_T")
_Array = np.ndarray[Any, Any]


# --------------------------------------------------------------------------- public API


def profile_batches(schema: pa.Schema, batches: Iterable[pa.RecordBatch], *, bins: int = 20,
                    top_k: int = 10, sample_size: int = 100_000, seed: int = 0) -> dict[str, Any]:
    """Profile a stream of record batches in one pass, in memory independent of the row count.

    Args:
        schema: The columns to profile; batches are read by position and cast to these
            types where they differ.
        batches: Record batches (tables are accepted and split into their batches).
        bins: Equal-width histogram bins between each numeric column's min and max.
        top_k: Most frequent values reported for text and categorical columns.
        sample_size: Values kept per numeric column for quantiles (exact up to this).
        seed: Chooses the sampled rows; the same input and seed give the same profile.

    Returns:
        ``{"format_version": 1, "rows": N, "columns": {name: {...}}}``; see the module
        docstring for what each statistic means and when it is exact.

    Example:
        >>> t = pa.table({"x": [1.0, 2.0, None], "s": ["a", "b", "a"]})
        >>> p = profile_batches(t.schema, t.to_batches())
        >>> p["rows"], p["columns"]["x"]["mean"], p["columns"]["s"]["top"][0]
        (3, 1.5, ['a', 2])
    """
    _check_params(bins=bins, top_k=top_k, sample_size=sample_size, seed=seed)
    names = schema.names
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise InvalidNameError(f"column names must be unique to be profiled; {dupes} appear "
                               "more than once. Rename the duplicates first.")
    cols = [_new_column(f.type, bins=bins, top_k=top_k, sample_size=sample_size, seed=seed)
            for f in schema]
    rows = 0
    # Columns are independent and numpy and Arrow release the GIL in their loops, so the
    # columns of a batch are profiled in parallel; each column's state is only ever
    # touched by one thread at a time, so the result does not depend on the scheduling.
    workers = min(len(cols), os.cpu_count() or 1)
    with ThreadPoolExecutor(max_workers=workers) if workers > 1 else nullcontext() as pool:
        for batch in _record_batches(batches):
            if batch.num_columns != len(cols):
                raise UserError(f"a batch has {batch.num_columns} columns but the schema has "
                                f"{len(cols)} ({names}); every batch must match the schema.")
            if batch.num_rows == 0:
                continue
            arrays = [_conform(arr, f.type) for f, arr in zip(schema, batch.columns, strict=True)]
            if pool is None or batch.num_rows < _PARALLEL_ROWS:
                for col, arr in zip(cols, arrays, strict=True):
                    col.update(arr, rows)
            else:
                list(pool.map(lambda c, a, r=rows: c.update(a, r), cols, arrays))
            rows += batch.num_rows
    columns = {name: _json_safe(col.result()) for name, col in zip(names, cols, strict=True)}
    return {"format_version": FORMAT_VERSION, "rows": rows, "columns": columns}


def profile_table(table: pa.Table | pd.DataFrame, **kw: Any) -> dict[str, Any]:
    """Profile an in-memory Arrow table or pandas DataFrame (its index is left out).

    Example:
        >>> profile_table(pa.table({"n": [1, 2, 3]}))["columns"]["n"]["max"]
        3
    """
    if not isinstance(table, pa.Table):
        table = pa.Table.from_pandas(table, preserve_index=False)
    return profile_batches(table.schema, table.to_batches(max_chunksize=1 << 20), **kw)


def profile_parquet(path: str | os.PathLike[str], *, batch_rows: int = 1 << 18,
                    columns: Sequence[str] | None = None, **kw: Any) -> dict[str, Any]:
    """Profile a Parquet file (or some of its ``columns``) batch by batch.

    Memory is bounded by ``batch_rows`` and one row group, whatever the file's size. The
    next batch is decoded on a background thread while the current one is profiled.

    Example:
        >>> import pyarrow.parquet as pq, tempfile
        >>> f = Path(tempfile.mkdtemp()) / "t.parquet"
        >>> pq.write_table(pa.table({"n": [1, 2, 3]}), f)
        >>> profile_parquet(f)["rows"]
        3
    """
    import pyarrow.parquet as pq

    p = Path(path)
    if not p.is_file():
        raise UserError(f"{p} is not a file; give the path of a Parquet file.")
    if batch_rows < 1:
        raise ConfigError(f"batch_rows must be at least 1, not {batch_rows}.")
    try:
        md = pq.read_metadata(p)
        schema = md.schema.to_arrow_schema()
        # Without pre-buffering, and with buffered reads of each column chunk, memory stays
        # at about a batch and a row group; pre-buffering (pyarrow's default) would hold the
        # bytes of every row group at once.
        pf = pq.ParquetFile(p, metadata=md, pre_buffer=False, buffer_size=1 << 20,
                            read_dictionary=_dictionary_columns(md))
    except (pa.ArrowException, OSError) as exc:
        raise DataFormatError(f"{p} cannot be read as Parquet ({exc}). Check that it is a "
                              "complete Parquet file.") from exc
    if columns is not None:
        missing = [c for c in columns if c not in schema.names]
        if missing:
            raise UserError(f"{p} has no column(s) {missing}; its columns are {schema.names}.")
        schema = pa.schema([schema.field(c) for c in columns])
    batches = pf.iter_batches(batch_size=batch_rows, columns=None if columns is None else list(columns))
    return profile_batches(schema, _read_ahead(batches), **kw)


def profile_files(root: str | os.PathLike[str]) -> dict[str, Any]:
    """Profile a directory of opaque files (images, audio, ...): counts and sizes.

    Symbolic links are not followed, so nothing is counted twice.

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp()); _ = (d / "a.PNG").write_bytes(b"12")
        >>> profile_files(d)["extensions"]
        {'.png': 1}
    """
    top = Path(root)
    if not top.is_dir():
        raise UserError(f"{top} is not a directory; profile_files needs a folder of files.")
    n = total = 0
    lo, hi = math.inf, 0
    exts: dict[str, int] = {}
    stack = [top]
    while stack:
        with os.scandir(stack.pop()) as it:
            for entry in it:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(Path(entry.path))
                elif entry.is_file(follow_symlinks=False):
                    size = entry.stat(follow_symlinks=False).st_size
                    n, total = n + 1, total + size
                    lo, hi = min(lo, size), max(hi, size)
                    ext = os.path.splitext(entry.name)[1].lower()
                    exts[ext] = exts.get(ext, 0) + 1
    size_stats = {"min": int(lo), "max": hi, "mean": total / n} if n else None
    return {"format_version": FORMAT_VERSION, "files": n, "bytes": total, "size": size_stats,
            "extensions": dict(sorted(exts.items()))}


def column_type_changes(old: Any, new: Any) -> list[tuple[str, str, str]]:
    """``(column, old_type, new_type)`` for columns in both whose type differs.

    ``old`` and ``new`` may each be an Arrow schema, a profile, or a ``{name: type}``
    mapping (as stored with a dataset version).

    Example:
        >>> column_type_changes({"a": "int64", "b": "string"}, {"a": "double"})
        [('a', 'int64', 'double')]
    """
    a, b = _column_types(old), _column_types(new)
    return [(name, a[name], b[name]) for name in a if name in b and a[name] != b[name]]


def diff_profiles(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """What changed between two profiles, as plain data for ``reprise data diff`` to render.

    Per common column only the statistics that differ are listed, each as
    ``{"old": ..., "new": ...}``; text columns also list ``top_added`` and
    ``top_removed`` (values that entered or left the most frequent list).

    Example:
        >>> a = profile_table(pa.table({"x": [1, 2]}))
        >>> b = profile_table(pa.table({"x": [1, 5], "y": ["a", "b"]}))
        >>> d = diff_profiles(a, b)
        >>> d["columns_added"], d["columns"]["x"]["max"]
        (['y'], {'old': 2, 'new': 5})
    """
    if "columns" not in old or "columns" not in new:
        return _diff_files(old, new)
    oc, nc = old["columns"], new["columns"]
    out: dict[str, Any] = {
        "rows": {"old": old.get("rows"), "new": new.get("rows")},
        "columns_added": [c for c in nc if c not in oc],
        "columns_removed": [c for c in oc if c not in nc],
        "type_changes": [list(t) for t in column_type_changes(old, new)],
        "columns": {},
    }
    for name in oc:
        if name in nc:
            change = _diff_column(oc[name], old.get("rows"), nc[name], new.get("rows"))
            if change:
                out["columns"][name] = change
    return out


# --------------------------------------------------------------------------- helpers of the API


def _check_params(*, bins: int, top_k: int, sample_size: int, seed: int) -> None:
    for name, value, least in (("bins", bins, 1), ("top_k", top_k, 0),
                               ("sample_size", sample_size, 1), ("seed", seed, 0)):
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise ConfigError(f"{name} must be an integer of at least {least}, not {value!r}.")


def _conform(arr: pa.Array, t: pa.DataType) -> pa.Array:
    """``arr`` as type ``t``; dictionary-encoded text stays encoded (it is counted as such)."""
    if arr.type == t or (pa.types.is_dictionary(arr.type) and _is_text(t)
                         and _is_text(arr.type.value_type)):
        return arr
    return arr.cast(t)


def _record_batches(batches: Iterable[Any]) -> Iterable[pa.RecordBatch]:
    for b in batches:
        if isinstance(b, pa.Table):
            yield from b.to_batches()
        else:
            yield b


def _dictionary_columns(md: Any) -> list[str]:
    """Top-level string columns stored as dictionary indices in every row group.

    Under four bytes a value cannot be plain strings (each carries a 4-byte length), so
    such a column is read as Arrow dictionaries and counted without building its strings.
    The profile is the same either way; only the speed depends on this guess.
    """
    out = []
    for j in range(md.num_columns):
        col = md.schema.column(j)
        if col.physical_type != "BYTE_ARRAY" or "." in col.path or col.logical_type.type != "STRING":
            continue
        chunks = [md.row_group(r).column(j) for r in range(md.num_row_groups)]
        if chunks and all(c.has_dictionary_page and c.total_uncompressed_size < 4 * c.num_values
                          for c in chunks):
            out.append(col.path)
    return out


class _Failed:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


def _read_ahead(items: Iterator[_T]) -> Iterator[_T]:
    """Yield ``items`` while a thread produces the next one (one item ahead, so memory holds
    at most three: the one in use, the one waiting, the one being read)."""
    q: queue.Queue[Any] = queue.Queue(maxsize=1)
    stop = threading.Event()
    done = object()

    def put(item: Any) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put(item):
                    return
            put(done)
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, raised there
            put(_Failed(exc))

    worker = threading.Thread(target=produce, name="reprise-profile-read", daemon=True)
    worker.start()
    try:
        while (item := q.get()) is not done:
            if isinstance(item, _Failed):
                raise item.exc
            yield item
    finally:
        stop.set()
        worker.join()


def _column_types(obj: Any) -> dict[str, str]:
    if isinstance(obj, pa.Schema):
        return {f.name: str(f.type) for f in obj}
    if isinstance(obj, Mapping) and isinstance(obj.get("columns"), Mapping):
        return {k: str(v.get("type")) for k, v in obj["columns"].items()}
    if isinstance(obj, Mapping):
        return {str(k): str(v) for k, v in obj.items()}
    raise UserError(f"cannot read column types from a {type(obj).__name__}; give an Arrow "
                    "schema, a profile or a {column: type} mapping.")


_DIFF_STATS = ("mean", "std", "min", "max", "distinct")


def _diff_column(a: Mapping[str, Any], rows_a: int | None, b: Mapping[str, Any],
                 rows_b: int | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    fa, fb = _null_fraction(a, rows_a), _null_fraction(b, rows_b)
    if fa != fb:
        out["nulls_fraction"] = {"old": fa, "new": fb}
    for stat in _DIFF_STATS:
        if a.get(stat) != b.get(stat):
            out[stat] = {"old": a.get(stat), "new": b.get(stat)}
    if "top" in a and "top" in b:
        va, vb = [v for v, _ in a["top"] or []], [v for v, _ in b["top"] or []]
        added, removed = [v for v in vb if v not in va], [v for v in va if v not in vb]
        if added:
            out["top_added"] = added
        if removed:
            out["top_removed"] = removed
    return out


def _null_fraction(col: Mapping[str, Any], rows: int | None) -> float | None:
    return None if not rows else col.get("nulls", 0) / rows


def _diff_files(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in ("files", "bytes"):
        if old.get(key) != new.get(key):
            out[key] = {"old": old.get(key), "new": new.get(key)}
    ea, eb = old.get("extensions") or {}, new.get("extensions") or {}
    ext = {e: {"old": ea.get(e, 0), "new": eb.get(e, 0)} for e in sorted({*ea, *eb})
           if ea.get(e, 0) != eb.get(e, 0)}
    if ext:
        out["extensions"] = ext
    return out


def _json_safe(value: Any) -> Any:
    """Plain Python all the way down; non-finite floats become None (JSON has no NaN)."""
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    if value is None or isinstance(value, str):
        return value
    if hasattr(value, "isoformat"):
        return str(value.isoformat())
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


# --------------------------------------------------------------------------- column profilers


def _new_column(t: pa.DataType, *, bins: int, top_k: int, sample_size: int,
                seed: int) -> _Column:
    if pa.types.is_boolean(t):
        return _BooleanColumn(t)
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t):
        return _NumericColumn(t, bins=bins, sample_size=sample_size, seed=seed)
    if _is_temporal(t):
        return _TemporalColumn(t)
    if _is_text(t) or (pa.types.is_dictionary(t) and _hashable(t.value_type)):
        return _TextColumn(t, top_k=top_k)
    return _Column(t)


def _is_text(t: pa.DataType) -> bool:
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t)
                or pa.types.is_string_view(t))


def _is_temporal(t: pa.DataType) -> bool:
    """Dates, times, timestamps and durations: one integer each (intervals are not)."""
    return bool(pa.types.is_temporal(t) and not pa.types.is_interval(t))


def _hashable(t: pa.DataType) -> bool:
    return bool(_is_text(t) or pa.types.is_integer(t) or pa.types.is_floating(t)
                or pa.types.is_boolean(t) or _is_temporal(t) or pa.types.is_decimal(t))


class _Column:
    """Counts only: the profile of a type with no better summary (lists, structs, binary)."""

    kind = "other"

    def __init__(self, t: pa.DataType) -> None:
        self.type = t
        self.count = 0
        self.nulls = 0

    def update(self, arr: pa.Array, row0: int) -> None:
        self.nulls += arr.null_count
        self.count += len(arr) - arr.null_count

    def result(self) -> dict[str, Any]:
        return {"kind": self.kind, "type": str(self.type), "count": self.count,
                "nulls": self.nulls}


class _BooleanColumn(_Column):
    kind = "boolean"

    def __init__(self, t: pa.DataType) -> None:
        super().__init__(t)
        self.true = 0

    def update(self, arr: pa.Array, row0: int) -> None:
        super().update(arr, row0)
        self.true += int(pc.sum(arr).as_py() or 0)

    def result(self) -> dict[str, Any]:
        false = self.count - self.true
        return {**super().result(), "distinct": int(self.true > 0) + int(false > 0),
                "distinct_exact": True, "true": self.true,
                "mean": self.true / self.count if self.count else None}


class _TemporalColumn(_Column):
    """Dates, times, timestamps, durations: range (as ISO text) and distinct values."""

    kind = "temporal"

    def __init__(self, t: pa.DataType) -> None:
        super().__init__(t)
        self.distinct = _Distinct(DISTINCT_CAP)
        self.lo: int | None = None
        self.hi: int | None = None

    def update(self, arr: pa.Array, row0: int) -> None:
        super().update(arr, row0)
        if arr.null_count == len(arr):
            return
        ints = _int64_values(arr.drop_null() if arr.null_count else arr)
        lo, hi = int(ints.min()), int(ints.max())
        self.lo = lo if self.lo is None else min(lo, self.lo)
        self.hi = hi if self.hi is None else max(hi, self.hi)
        self.distinct.add_numbers(ints)

    def result(self) -> dict[str, Any]:
        d, exact = self.distinct.estimate()
        return {**super().result(), "distinct": d, "distinct_exact": exact,
                "min": _temporal_text(self.lo, self.type), "max": _temporal_text(self.hi, self.type)}


def _int64_values(arr: pa.Array) -> _Array:
    width = pa.int32() if arr.type.bit_width == 32 else pa.int64()
    return np.asarray(arr.view(width).to_numpy(), dtype=np.int64)


def _temporal_text(v: int | None, t: pa.DataType) -> str | None:
    if v is None:
        return None
    try:
        obj = pa.scalar(v, pa.int32() if t.bit_width == 32 else pa.int64()).cast(t).as_py()
    except (ValueError, OverflowError, pa.ArrowException):
        return str(v)  # outside what Python's datetime can hold: show the raw count
    return str(obj.isoformat()) if hasattr(obj, "isoformat") else str(obj)


class _NumericColumn(_Column):
    """Integers, floats and decimals (as float64): moments, range, quantiles, histogram."""

    kind = "numeric"

    def __init__(self, t: pa.DataType, *, bins: int, sample_size: int, seed: int) -> None:
        super().__init__(t)
        self.floating = not pa.types.is_integer(t)
        self.bins = bins
        self.nan = self.inf = 0
        self.n, self.mean, self.m2 = 0, 0.0, 0.0  # finite values, Chan et al.'s merge
        self.lo: float | int | None = None
        self.hi: float | int | None = None
        self.distinct = _Distinct(DISTINCT_CAP)
        self.sample = _RowSample(sample_size, seed)
        self.grid = _FineHistogram()

    def update(self, arr: pa.Array, row0: int) -> None:
        n, nulls = len(arr), arr.null_count
        xf = _float64_values(arr)  # NaN where null
        finite = np.isfinite(xf)
        n_fin = int(np.count_nonzero(finite))
        present: _Array | None = None  # mask of non-null, non-NaN values (None: all rows)
        nan = inf = 0
        if n_fin < n:
            present = finite
            if self.floating and n_fin < n - nulls:  # NaN or infinities beyond the nulls
                present = ~np.isnan(xf)
                nan = n - nulls - int(np.count_nonzero(present))
                inf = n - nulls - nan - n_fin
        self.nulls += nulls + nan
        self.count += n - nulls - nan
        self.nan, self.inf = self.nan + nan, self.inf + inf
        if n - nulls - nan == 0:
            return
        if self.floating:
            self.distinct.add_numbers(xf if present is None else xf[present])
        else:
            ints = (arr.drop_null() if nulls else arr).to_numpy()
            self._range(int(ints.min()), int(ints.max()))
            self.distinct.add_numbers(ints)
        if not n_fin:
            return
        x = xf if n_fin == n else xf[finite]
        if self.floating:
            self._range(float(x.min()), float(x.max()))
        assert self.lo is not None and self.hi is not None
        self.grid.regrid(float(self.lo), float(self.hi))
        self._summarise(x)
        self.sample.add(row0, xf, None if n_fin == n else finite)

    def _range(self, lo: float | int, hi: float | int) -> None:
        self.lo = lo if self.lo is None else min(lo, self.lo)
        self.hi = hi if self.hi is None else max(hi, self.hi)

    def _summarise(self, x: _Array) -> None:
        """Moments and grid counts of finite values, one cache-sized chunk at a time.

        Each chunk's mean and squared deviations (two passes, in cache) are merged with
        Chan et al.'s formula; every numpy pass over a whole batch would instead stream
        it from memory again.
        """
        tmp = np.empty(min(len(x), _CHUNK))
        idx = np.empty(len(x), dtype=np.int64)
        for i in range(0, len(x), _CHUNK):
            c = x[i : i + _CHUNK]
            t = tmp[: len(c)]
            with np.errstate(over="ignore", invalid="ignore"):  # |x| near 1e308: inf -> None
                mean = float(c.mean())
                np.subtract(c, mean, out=t)
                self._merge_moments(len(c), mean, float(t @ t))
            self.grid.bin(c, idx[i : i + len(c)], t)
        self.grid.counts += np.bincount(idx, minlength=FINE_BINS)

    def _merge_moments(self, nb: int, mb: float, m2b: float) -> None:
        n = self.n + nb
        delta = mb - self.mean
        self.mean += delta * nb / n
        self.m2 += m2b + delta * delta * self.n * nb / n
        self.n = n

    def result(self) -> dict[str, Any]:
        d, exact = self.distinct.estimate()
        out: dict[str, Any] = {**super().result()}
        if self.floating:
            out.update(nan=self.nan, inf=self.inf)
        out.update(distinct=d, distinct_exact=exact, min=self.lo, max=self.hi,
                   mean=self.mean if self.n else None,
                   std=math.sqrt(self.m2 / (self.n - 1)) if self.n > 1 else None,
                   quantiles=None, quantiles_exact=None, histogram=None)
        if self.n and self.lo is not None and self.hi is not None:
            values = self.sample.values()
            with np.errstate(over="ignore", invalid="ignore"):
                qs = np.quantile(values, QUANTILES)
            out["quantiles"] = {str(q): float(v) for q, v in zip(QUANTILES, qs, strict=True)}
            out["quantiles_exact"] = len(values) == self.n
            out["histogram"] = self._histogram(values, float(self.lo), float(self.hi))
        return out

    def _histogram(self, values: _Array, lo: float, hi: float) -> dict[str, Any] | None:
        if not math.isfinite(hi - lo):
            return None  # a range wider than float64 holds has no finite bins
        if len(values) < self.n:
            return self.grid.histogram(lo, hi, self.bins)
        counts, edges = np.histogram(values, bins=self.bins, range=(lo, hi))
        return {"edges": edges.tolist(), "counts": counts.tolist(), "exact": True}


def _float64_values(arr: pa.Array) -> _Array:
    """The values as float64, NaN where null (zero-copy for a float64 array without nulls)."""
    if arr.null_count == 0 and (pa.types.is_integer(arr.type) or pa.types.is_floating(arr.type)):
        return np.asarray(arr.to_numpy(), dtype=np.float64)  # numpy converts faster than Arrow
    if not pa.types.is_float64(arr.type):
        arr = arr.cast(pa.float64())
    return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=np.float64)


class _TextColumn(_Column):
    """Strings and dictionary-encoded (categorical) columns: top values, distinct, lengths."""

    def __init__(self, t: pa.DataType, *, top_k: int) -> None:
        super().__init__(t)
        self.kind = "categorical" if pa.types.is_dictionary(t) else "string"
        self.text = _is_text(t.value_type if pa.types.is_dictionary(t) else t)
        self.top_k = top_k
        self.distinct = _Distinct(DISTINCT_CAP)
        self.top = _TopCounts(DISTINCT_CAP, max(MG_CAPACITY, 10 * top_k))
        self.len_lo: int | None = None
        self.len_hi: int | None = None
        self.len_sum = 0

    def update(self, arr: pa.Array, row0: int) -> None:
        super().update(arr, row0)
        if arr.null_count == len(arr):
            return
        if pa.types.is_dictionary(arr.type):
            values, counts = _dictionary_counts(arr)
            if not len(values):
                return
            if self.text:
                self._lengths(_char_lengths(values), counts)
            keys = _hash_values(values)
            self.distinct.add(keys)
            self.top.add_counted(keys, counts, values)
            return
        if pa.types.is_string_view(arr.type):
            arr = arr.cast(pa.large_string())
        if arr.null_count:
            arr = arr.drop_null()
        self._lengths(_char_lengths(arr), None)
        if self._few_values(arr):
            vc = pc.value_counts(arr)
            values = vc.field("values")
            keys = _hash_strings(values)
            self.distinct.add(keys)
            self.top.add_counted(keys, vc.field("counts").to_numpy().astype(np.int64), values)
        else:
            h = _hash_strings(arr)
            self.distinct.add(h)
            self.top.add_rows(h, arr)

    def _few_values(self, arr: pa.Array) -> bool:
        """Whether Arrow's value counts will be faster than hashing (a guess; same result)."""
        if not self.top.exact or len(self.top.keys) > _FEW_VALUES:
            return False
        head = arr.slice(0, 4 * _FEW_VALUES)
        return len(head) == len(arr) or len(pc.unique(head)) <= _FEW_VALUES // 2

    def _lengths(self, lengths: _Array, weights: _Array | None) -> None:
        lo, hi = int(lengths.min()), int(lengths.max())
        self.len_lo = lo if self.len_lo is None else min(lo, self.len_lo)
        self.len_hi = hi if self.len_hi is None else max(hi, self.len_hi)
        self.len_sum += int(lengths.sum() if weights is None else lengths @ weights)

    def result(self) -> dict[str, Any]:
        d, exact = self.distinct.estimate()
        out = {**super().result(), "distinct": d, "distinct_exact": exact,
               "top": self.top.most_common(self.top_k), "top_exact": self.top.exact}
        if self.text:
            out.update(min_length=self.len_lo, max_length=self.len_hi,
                       mean_length=self.len_sum / self.count if self.count else None)
        return out


def _dictionary_counts(arr: pa.Array) -> tuple[pa.Array, _Array]:
    """The distinct values of a dictionary array and how often each occurs."""
    idx = arr.indices
    idx = idx.drop_null() if idx.null_count else idx
    counts = np.bincount(idx.to_numpy(), minlength=len(arr.dictionary))
    used = np.flatnonzero(counts)
    values = arr.dictionary.take(pa.array(used))
    if values.null_count:  # a null stored in the dictionary itself: not a value
        keep = np.asarray(values.is_valid().to_numpy(zero_copy_only=False))
        values, used = values.filter(pa.array(keep)), used[keep]
    return values, counts[used].astype(np.int64)


# --------------------------------------------------------------------------- sketches


class _Distinct:
    """The k smallest distinct 64-bit hashes seen: an exact count below k, KMV above."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.hashes: _Array = np.empty(0, dtype=_U64)
        self.overflowed = False

    def add(self, h: _Array) -> None:
        if self.overflowed:
            h = h[h < self.hashes[-1]]
        if not len(h):
            return
        h = np.sort(h)
        merged = np.concatenate((self.hashes, h))
        merged.sort(kind="stable")  # two sorted runs: Timsort merges them in linear time
        merged = merged[np.concatenate(([True], merged[1:] != merged[:-1]))]
        if len(merged) > self.k:
            merged, self.overflowed = merged[: self.k], True
        self.hashes = merged

    def add_numbers(self, values: _Array) -> None:
        """Add integers or floats (no NaN), hashing them a cache-sized chunk at a time."""
        if not self.overflowed and len(self.hashes) <= _FEW_VALUES and _few(values):
            values = pc.unique(pa.array(values)).to_numpy()  # fewer to hash: same result
        below = self.hashes[-1] if self.overflowed else None
        self.add(_hash_numbers(values, below))

    def estimate(self) -> tuple[int, bool]:
        """(count, exact): KMV's ``(k - 1) / u_k`` once more than k values were seen."""
        if not self.overflowed:
            return len(self.hashes), True
        u_k = (float(self.hashes[-1]) + 1.0) / 2.0**64
        return round((self.k - 1) / u_k), False


def _few(values: _Array) -> bool:
    """Whether a batch looks like it holds few distinct values (a guess that only affects
    speed: Arrow's hash table is fastest then, sorting hashes when values are many)."""
    head = values[: 4 * _FEW_VALUES]
    return len(pc.unique(pa.array(head))) <= _FEW_VALUES // 4


class _TopCounts:
    """Value counts keyed by hash: exact up to ``cap`` keys, then a Misra-Gries summary.

    Misra-Gries is mergeable (Agarwal et al., 2012): adding a batch's exact counts and
    subtracting the (capacity+1)-th largest count from every counter keeps each count
    a lower bound short by at most ``rows / (capacity + 1)``.
    """

    def __init__(self, cap: int, capacity: int) -> None:
        self.cap, self.capacity = cap, capacity
        self.keys: _Array = np.empty(0, dtype=_U64)  # sorted
        self.counts: _Array = np.empty(0, dtype=np.int64)
        self.reps: pa.Array | None = None  # one value per key
        self.exact = True

    def add_counted(self, keys: _Array, counts: _Array, values: pa.Array) -> None:
        """Merge a batch given as its distinct values (hashed to ``keys``) and their counts."""
        self._merge(keys, counts, lambda i: values.take(pa.array(i)))

    def add_rows(self, h: _Array, arr: pa.Array) -> None:
        """Merge a batch given as one hash per row of ``arr`` (for batches of many values)."""
        s = np.sort(h)
        start = np.flatnonzero(np.concatenate(([True], s[1:] != s[:-1])))
        keys, counts = s[start], np.diff(np.append(start, len(s)))
        floor = 0 if self.exact else _kth_largest(counts, self.capacity + 1)
        if floor > 0:  # a key new to the summary at or below floor cannot survive the merge
            keep = counts > floor
            at = np.minimum(np.searchsorted(keys, self.keys), len(keys) - 1)
            keep[at[keys[at] == self.keys]] = True
            keys, counts = keys[keep], counts[keep]

        def reps(i: _Array) -> pa.Array:
            return arr.take(pa.array(_rows_of(h, keys[i])))

        self._merge(keys, counts, reps, floor)

    def _merge(self, bkeys: _Array, bcounts: _Array, reps_of: Callable[[_Array], pa.Array],
               floor: int = 0) -> None:
        n_old = len(self.keys)
        keys = np.concatenate((self.keys, bkeys))
        order = np.argsort(keys, kind="stable")
        keys, counts = keys[order], np.concatenate((self.counts, bcounts))[order]
        start = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))
        keys, counts, src = keys[start], np.add.reduceat(counts, start), order[start]
        if self.exact and len(keys) > self.cap:
            self.exact = False
        if not self.exact:
            delta = max(floor, _kth_largest(counts, self.capacity + 1))
            if delta:
                keep = counts > delta
                keys, counts, src = keys[keep], counts[keep] - delta, src[keep]
        old = src < n_old
        parts = [reps_of(src[~old] - n_old)]
        if self.reps is not None and old.any():
            parts.insert(0, self.reps.take(pa.array(src[old])))
        n_kept_old = int(np.count_nonzero(old))
        pos = np.empty(len(keys), dtype=np.int64)
        pos[old] = np.arange(n_kept_old)
        pos[~old] = n_kept_old + np.arange(len(keys) - n_kept_old)
        if len(parts) == 2 and parts[1].type != parts[0].type:
            parts[1] = parts[1].cast(parts[0].type)
        self.keys, self.counts = keys, counts
        self.reps = pa.concat_arrays(parts).take(pa.array(pos))

    def most_common(self, k: int) -> list[list[Any]]:
        if self.reps is None or not k or not len(self.keys):
            return []
        t = pa.table({"c": self.counts, "v": self.reps})
        t = t.sort_by([("c", "descending"), ("v", "ascending")]).slice(0, k)
        return [[_json_safe(v), int(c)] for v, c in zip(t["v"].to_pylist(),
                                                          t["c"].to_pylist(), strict=True)]


def _kth_largest(counts: _Array, k: int) -> int:
    """The k-th largest of some positive counts, or 0 when there are fewer than k."""
    if len(counts) < k:
        return 0
    top = int(counts.max())
    if top <= 4 * len(counts):  # counting beats partitioning when counts are small
        at_least = np.cumsum(np.bincount(counts, minlength=top + 1)[::-1])[::-1]
        return int(np.flatnonzero(at_least >= k)[-1])
    return int(np.partition(counts, len(counts) - k)[len(counts) - k])


def _rows_of(h: _Array, wanted: _Array) -> _Array:
    """One row index for each wanted hash (any row holding it: they hold the same value)."""
    idx = pc.index_in(pa.array(h), value_set=pa.array(wanted))
    valid = np.asarray(idx.is_valid().to_numpy(zero_copy_only=False))
    rows = np.empty(len(wanted), dtype=np.int64)
    rows[idx.drop_null().to_numpy()] = np.flatnonzero(valid)
    return rows


class _RowSample:
    """A uniform sample of up to k values: the k rows with the smallest random priority.

    Each row's priority is uniform in [0, 1), drawn from an RNG seeded by (seed, block
    of :data:`BLOCK_ROWS` rows), so the sample depends on the rows, not on how they
    were batched. Only priorities below the threshold tau (an upper bound on the k-th
    smallest seen, refreshed at block starts) can enter, so a block draws just those:
    each row is below tau with probability tau, which picks the rows (as Bernoulli
    trials, or as geometric gaps when tau is small), and their priorities are uniform
    below tau. The cost per row falls as ``k / rows``; the pool holds at most ``2k``
    values between prunings.
    """

    def __init__(self, k: int, seed: int) -> None:
        self.k, self.seed = k, seed
        self.tau = 1.0
        self.keys: list[_Array] = []
        self.vals: list[_Array] = []
        self.pooled = 0
        self.block = -1
        self.rng = np.random.default_rng([seed, 0])
        self.pos: _Array | None = None  # candidate rows of the current block (None: all)
        self.prio: _Array = np.empty(0)

    def add(self, row0: int, xf: _Array, valid: _Array | None) -> None:
        row1 = row0 + len(xf)
        b = row0 // BLOCK_ROWS
        while b * BLOCK_ROWS < row1:
            if b != self.block:
                self._start_block(b)
            base = b * BLOCK_ROWS
            lo, hi = max(row0, base) - base, min(row1, base + BLOCK_ROWS) - base
            if self.pos is None:  # every row is a candidate: draw priorities in row order
                rows, prio = np.arange(lo, hi) + (base - row0), self.rng.random(hi - lo)
            else:
                i, j = np.searchsorted(self.pos, [lo, hi])
                rows, prio = self.pos[i:j] + (base - row0), self.prio[i:j]
            if valid is not None:
                ok = valid[rows]
                rows, prio = rows[ok], prio[ok]
            self.keys.append(prio)
            self.vals.append(xf[rows])
            self.pooled += len(rows)
            b += 1

    def _start_block(self, b: int) -> None:
        if self.pooled > 2 * self.k:
            self._prune()
        self.rng = rng = np.random.default_rng([self.seed, b])
        if self.tau >= 1.0:
            self.pos = None  # drawn row by row in add(): a small table draws only its rows
        else:  # each row is below tau with probability tau: Bernoulli trials, or their gaps
            if self.tau > 1 / 16:
                self.pos = np.flatnonzero(rng.random(BLOCK_ROWS) < self.tau)
            else:
                self.pos = _bernoulli_positions(rng, self.tau, BLOCK_ROWS)
            self.prio = rng.random(len(self.pos)) * self.tau
        self.block = b

    def _prune(self) -> None:
        keys, vals = np.concatenate(self.keys), np.concatenate(self.vals)
        if len(keys) > self.k:
            keep = np.argpartition(keys, self.k - 1)[: self.k]
            keys, vals = keys[keep], vals[keep]
            self.tau = float(keys.max())
        self.keys, self.vals, self.pooled = [keys], [vals], len(keys)

    def values(self) -> _Array:
        if not self.keys:
            return np.empty(0)
        self._prune()
        return np.sort(self.vals[0])


def _bernoulli_positions(rng: np.random.Generator, p: float, n: int) -> _Array:
    """Positions below n of successes in Bernoulli(p) trials, drawn as geometric gaps."""
    pos = np.cumsum(rng.geometric(p, size=int(n * p * 1.5) + 16)) - 1
    while pos[-1] < n:
        more = np.cumsum(rng.geometric(p, size=int(n * p * 0.5) + 16)) + pos[-1]
        pos = np.concatenate((pos, more))
    return pos[: np.searchsorted(pos, n)]


class _FineHistogram:
    """Exact counts on a grid of at most :data:`FINE_BINS` bins of width ``2**e``.

    Bin i holds ``[i * 2**e, (i+1) * 2**e)``. Scaling by a power of two and flooring is
    exact in floating point, so every value lands in its true bin; when the range
    outgrows the grid, ``e`` rises and bins merge by integer shifts, still exactly.
    ``e`` depends only on the range, so the counts do not depend on the batching.
    """

    def __init__(self) -> None:
        self.e: int | None = None
        self.offset = 0
        self.scale = 1.0
        self.small = True
        self.counts: _Array = np.zeros(FINE_BINS, dtype=np.int64)

    def regrid(self, lo: float, hi: float) -> None:
        """Widen the grid to cover [lo, hi] (a range that only ever grows)."""
        e = _grid_exponent(lo, hi) if self.e is None else max(self.e, _grid_exponent(lo, hi))
        offset = math.floor(math.ldexp(lo, -e))
        if self.e is not None and (e, offset) != (self.e, self.offset):
            nz = np.flatnonzero(self.counts)
            moved = ((nz + self.offset) >> (e - self.e)) - offset
            counts = np.zeros(FINE_BINS, dtype=np.int64)
            np.add.at(counts, moved, self.counts[nz])
            self.counts = counts
        self.e, self.offset = e, offset
        self.scale = math.ldexp(1.0, -e)
        # below 2**52 the scaled values and the offset are exact floats and so is their
        # difference; above, floor first and subtract as integers
        self.small = max(abs(lo), abs(hi)) * self.scale < 2.0**52

    def bin(self, x: _Array, out: _Array, tmp: _Array) -> None:
        """Write the grid bin of each of ``x`` (within the range last given) into ``out``."""
        np.multiply(x, self.scale, out=tmp)  # exact: a power of two
        if self.small:
            tmp -= self.offset
            out[...] = tmp  # >= 0, so truncation is the floor
        else:
            np.floor(tmp, out=tmp)
            out[...] = tmp
            out -= self.offset

    def add(self, x: _Array, lo: float, hi: float) -> None:
        """Count ``x``, all within [lo, hi]."""
        self.regrid(lo, hi)
        idx = np.empty(len(x), dtype=np.int64)
        self.bin(x, idx, np.empty(len(x)))
        self.counts += np.bincount(idx, minlength=FINE_BINS)

    def histogram(self, lo: float, hi: float, bins: int) -> dict[str, Any]:
        """``bins`` equal bins over [lo, hi]; grid bins straddling an edge are split pro rata."""
        total = int(self.counts.sum())
        if lo == hi:
            counts, edges = np.histogram([lo], bins=bins, weights=[total])
            return {"edges": edges.tolist(), "counts": counts.astype(np.int64).tolist(),
                    "exact": True}
        assert self.e is not None
        edges = np.linspace(lo, hi, bins + 1)
        used = int(np.flatnonzero(self.counts)[-1]) + 1
        # offset and steps scaled apart: an offset above 2**53 is not exact as a float
        grid = math.ldexp(self.offset, self.e) + np.ldexp(np.arange(used + 1.0), self.e)
        np.clip(grid, lo, hi, out=grid)
        cdf = np.concatenate(([0], np.cumsum(self.counts[:used])))
        inner = np.rint(np.interp(edges[1:-1], grid, cdf)).astype(np.int64)
        counts = np.diff(np.concatenate(([0], inner, [total])))
        return {"edges": edges.tolist(), "counts": counts.tolist(), "exact": False}


def _grid_exponent(lo: float, hi: float) -> int:
    """The smallest e whose grid spans [lo, hi] in FINE_BINS bins with |x| / 2**e < 2**62."""
    mag = max(abs(lo), abs(hi))
    least = max(math.frexp(mag)[1] - 62, -1000) if mag > 0 else -1000

    def fits(e: int) -> bool:
        return math.floor(math.ldexp(hi, -e)) - math.floor(math.ldexp(lo, -e)) < FINE_BINS

    span = hi / (FINE_BINS - 1) - lo / (FINE_BINS - 1)  # divided first: cannot overflow
    e = max(least, math.frexp(span)[1]) if span > 0 else least
    while e > least and fits(e - 1):
        e -= 1
    while not fits(e):
        e += 1
    return e


# --------------------------------------------------------------------------- hashing

_M1, _M2 = _U64(0xBF58476D1CE4E5B9), _U64(0x94D049BB133111EB)
_GOLDEN = _U64(0x9E3779B97F4A7C15)
_S27, _S30, _S31 = _U64(27), _U64(30), _U64(31)
_TAIL_MASKS = np.array([(1 << (8 * i)) - 1 for i in range(8)] + [(1 << 64) - 1], dtype=_U64)


def _mix64(h: _Array) -> _Array:
    """SplitMix64's finaliser, in place: a bijection on 64 bits that scatters nearby inputs."""
    h ^= h >> _S30
    h *= _M1
    h ^= h >> _S27
    h *= _M2
    h ^= h >> _S31
    return h


def _hash_numbers(values: _Array, below: Any = None) -> _Array:
    """Hashes of integers or floats (bit patterns, -0.0 folded into 0.0), keeping only those
    ``< below`` when given; computed a cache-sized chunk at a time."""
    scratch = np.empty(min(len(values), _CHUNK), dtype=_U64)
    floats = values.dtype.kind == "f"
    out = []
    for i in range(0, len(values), _CHUNK):
        c = values[i : i + _CHUNK]
        h = scratch[: len(c)]
        if floats:
            np.add(c, 0.0, out=h.view(np.float64))
        else:
            np.copyto(h.view(np.int64), c, casting="unsafe")  # uint64 wraps: still one-to-one
        _mix64(h)
        out.append(h[h < below] if below is not None else h.copy())
    return np.concatenate(out) if out else np.empty(0, dtype=_U64)


def _hash_values(values: pa.Array) -> _Array:
    """64-bit hashes of the non-null values of any hashable type (consistent per type)."""
    t = values.type
    if _is_text(t):
        return _hash_strings(values)
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        return _hash_numbers(np.asarray(values.to_numpy(zero_copy_only=False)).astype(np.int64))
    if _is_temporal(t):
        return _hash_numbers(_int64_values(values))
    return _hash_numbers(_float64_values(values))


def _hash_strings(arr: pa.Array) -> _Array:
    """A 64-bit hash per string, vectorised over the Arrow buffers eight bytes at a time.

    Each string's words (the last one masked to its length) are folded into a state
    seeded with the length, then finalised with SplitMix64. Strings are taken a
    cache-sized chunk at a time. Nulls hash as empty strings; callers drop them first.
    """
    if pa.types.is_string_view(arr.type):
        arr = arr.cast(pa.large_string())
    parts = [_hash_string_chunk(arr.slice(i, _CHUNK // 2)) for i in range(0, len(arr), _CHUNK // 2)]
    return np.concatenate(parts) if parts else np.empty(0, dtype=_U64)


def _string_offsets(arr: pa.Array) -> _Array:
    width = np.int64 if pa.types.is_large_string(arr.type) else np.int32
    return np.frombuffer(arr.buffers()[1], dtype=width, count=len(arr) + 1,
                         offset=arr.offset * np.dtype(width).itemsize)


def _hash_string_chunk(arr: pa.Array) -> _Array:
    off = _string_offsets(arr)
    base, end = int(off[0]), int(off[-1])
    data = np.zeros(end - base + 8, dtype=np.uint8)  # 8 spare bytes: every word read is whole
    if end > base:
        data[: end - base] = np.frombuffer(arr.buffers()[2], dtype=np.uint8, count=end - base,
                                           offset=base)
    words = np.ndarray(shape=(len(data) - 7,), dtype="<u8", buffer=data, strides=(1,))
    starts, lens = (off[:-1] - base).astype(np.int64), np.diff(off).astype(np.int64)
    h = lens.astype(_U64) * _GOLDEN
    rows: _Array | None = None  # the strings still being folded (None: all)
    for k in range((int(lens.max()) + 7) // 8):
        if k:
            live = lens > 8 * k
            if not live.all():
                sel = np.flatnonzero(live)
                rows = sel if rows is None else rows[sel]
                starts, lens = starts[sel], lens[sel]
        w = words[starts + 8 * k] & _TAIL_MASKS[np.minimum(lens - 8 * k, 8)]
        g = h if rows is None else h[rows]
        g ^= w
        g *= _M1
        g ^= g >> _S27
        if rows is not None:
            h[rows] = g
    return _mix64(h)


def _char_lengths(arr: pa.Array) -> _Array:
    """Length in characters of each (non-null) string: byte lengths when all are ASCII."""
    if pa.types.is_string_view(arr.type):
        return np.asarray(pc.utf8_length(arr).to_numpy())
    off = _string_offsets(arr)
    base, end = int(off[0]), int(off[-1])
    data = np.frombuffer(arr.buffers()[2], dtype=np.uint8, count=end - base, offset=base) \
        if end > base else np.zeros(1, dtype=np.uint8)
    if int(data.max()) < 0x80:
        return np.diff(off)
    return np.asarray(pc.utf8_length(arr).to_numpy())
