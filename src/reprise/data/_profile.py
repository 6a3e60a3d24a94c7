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
  distinct values the count is exact (``distinct_exact: true``); beyond, the
  :data:`KMV_K` smallest hashes give a K-Minimum-Values estimate (relative standard
  error about ``1/sqrt(KMV_K)``, 0.8 %). KMV is a mergeable sketch like HyperLogLog;
  it is written here rather than taken from a library because no sketch library we
  trust is among the dependencies, and KMV is a few lines of numpy. Numbers hash
  through a bijection, so their exact counts have no collisions. Integers, dates and
  times over a narrow range (at most 2**20 apart) are counted on a bitmap instead,
  exactly and without hashing.
- ``quantiles`` come from a uniform sample of ``sample_size`` values: those of the
  rows with the smallest random priorities (a bottom-k sample). They are exact when a
  column has at most ``sample_size`` finite values and approximate above. A row's
  priority depends only on the seed and its row number, so the same rows give the
  same profile however they are cut into batches, and every column samples the same rows.
- ``histogram``: ``bins`` equal-width bins between ``min`` and ``max``, counted as
  ``numpy.histogram`` counts them. Columns with at most ``sample_size`` finite values
  are binned exactly from the sample. Above, min and max are unknown until the end, so
  the pass counts values exactly on a grid of at most :data:`FINE_BINS` bins of
  power-of-two width, coarsened by merging pairs of bins as the range grows (which
  keeps the counts exact). The final bins are read off that grid; a grid bin that
  straddles a final edge is split in proportion, so each count is off by at most the
  count of one grid bin (a 1/4096 slice of the range). Where float64 has fewer than
  ``bins`` values between min and max (floats close together far from zero), there
  are fewer bins.
- Integer columns stay integers (int64, or uint64 for unsigned types), whatever their
  magnitude: ``min``, ``max`` and the quantiles are exact (a quantile between two
  integers is the float nearest to it), and the histogram's edges are integers (where
  each of numpy's bins starts among the integers), binned by integer shifts, so 1,000
  consecutive IDs from 1.5e18 get 20 bins of 50. ``mean`` and ``std`` are float64,
  taken from each value's exact distance to the first one.
- ``top`` (strings and categoricals): exact counts while there are at most
  :data:`DISTINCT_CAP` distinct values; beyond, a Misra-Gries summary whose counts
  are lower bounds, each short by at most ``rows / (capacity + 1)``
  (``top_exact: false``). In a column of unique values (IDs) no value stands out and
  the list is empty.

NaN is treated as missing: it counts in ``nulls`` (and in ``nan``), as pandas
treats it. Infinities are values: they count in ``count`` (and in ``inf``) and in
``distinct`` but are left out of min, max, mean, std, quantiles and histogram,
which describe the finite values (and could not be written as JSON otherwise).

Memory per column is fixed: at most :data:`DISTINCT_CAP` hashes (or a 1 MiB bitmap),
``2 * sample_size`` sampled values, :data:`FINE_BINS` counts (only for columns with
more than ``sample_size`` values), and for text :data:`DISTINCT_CAP` (later
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
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa

from reprise.core.errors import ConfigError, InvalidNameError, UserError
from reprise.data._formats import DataFormatError
from reprise.data._profile_columns import QUANTILES, _Column, _new_column
from reprise.data._sketches import DISTINCT_CAP, FINE_BINS, _json_safe, _Priorities
from reprise.data._values import _is_text

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "DISTINCT_CAP",
    "FINE_BINS",
    "FORMAT_VERSION",
    "QUANTILES",
    "profile_batches",
    "profile_files",
    "profile_parquet",
    "profile_table",
]

FORMAT_VERSION = 1
_PARALLEL_ROWS = 1 << 15  # smaller batches are profiled on the calling thread

_T = TypeVar("_T")


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
    cols = [_new_column(f.type, bins=bins, top_k=top_k, sample_size=sample_size)
            for f in schema]
    priorities = _Priorities(seed, sample_size) if any(c.sampled for c in cols) else None
    rows = 0
    # Columns are independent and numpy and Arrow release the GIL in their loops, so the
    # columns of a batch are profiled in parallel; each column's state is only ever
    # touched by one thread at a time, so the result does not depend on the scheduling.
    # A stream is read one batch ahead on its own thread (reading a CSV block overlaps
    # profiling the one before).
    workers = min(len(cols), os.cpu_count() or 1)
    stream = _record_batches(batches)
    if not isinstance(batches, (list, tuple, pa.Table)):
        stream = _read_ahead(iter(stream))
    with ThreadPoolExecutor(max_workers=workers) if workers > 1 else nullcontext() as pool:
        for batch in stream:
            if batch.num_columns != len(cols):
                raise UserError(f"a batch has {batch.num_columns} columns but the schema has "
                                f"{len(cols)} ({names}); every batch must match the schema.")
            if batch.num_rows == 0:
                continue
            arrays = [_conform(arr, f.type) for f, arr in zip(schema, batch.columns, strict=True)]
            picked = priorities.batch(rows, batch.num_rows) if priorities else None
            if pool is None or batch.num_rows < _PARALLEL_ROWS:
                for col, arr in zip(cols, arrays, strict=True):
                    col.update(arr, picked)
            else:
                list(pool.map(lambda c, a, p=picked: c.update(a, p), cols, arrays))
            rows += batch.num_rows
    columns = {}
    for i, name in enumerate(names):  # each column's state is let go once summarised
        columns[name] = _json_safe(cols[i].result())
        cols[i] = _Column(schema.field(i).type)
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
    return profile_batches(schema, batches, **kw)  # read ahead there, on a thread


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
