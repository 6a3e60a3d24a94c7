"""Deterministic train/validation/test splits that survive appends and platforms.

A row's split is a pure function of its key, the seed and the fractions, so the
same data gives the same splits on every machine, and (in the default hash mode)
a row keeps its split when other rows are added. Python's ``hash()`` is salted
per process and numpy's random streams may change between versions, so neither
is used: the key is hashed with BLAKE3 over a byte encoding fixed here.

The encoding (version 1.1; changing it would move rows between splits)::

    digest = BLAKE3(b"reprise.split.v1" 0x00 TAG 0x00 ascii(decimal(seed)) 0x00 PAYLOAD)
    u      = (int.from_bytes(digest[:8], "big") >> 11) / 2**53        # uniform in [0, 1)

======================  =========  ===============================================
value                   TAG        PAYLOAD
======================  =========  ===============================================
integer (any width)     ``int``    decimal ASCII (``-12``)
float with an integer   ``int``    decimal ASCII of that integer (``3.0`` → ``3``)
value (any width)
other float             ``float``  ``repr`` of the value as a float64 (``0.1``)
boolean                 ``bool``   ``true`` / ``false``
string                  ``str``    UTF-8
binary                  ``bytes``  the bytes
timestamp (any unit)    ``ts``     decimal nanoseconds since the epoch, UTC
date                    ``date``   decimal days since 1970-01-01
dictionary/categorical  the tag and payload of the decoded value
======================  =========  ===============================================

Numbers hash by value, not by spelling: an integer key re-read as float (``3``
as ``3.0``, as pandas reads an integer column with a missing value, or as a CSV
column that gains one ``2.5``) keeps its split. The tag makes ``1`` and ``"1"``
different keys: an id column that changes to text reshuffles the splits. With no
key column the key is the whole row: TAG is ``row`` followed, per column in
code-point order of the names, by 0x00, the UTF-8 name, 0x00 and the column's tag
(``int`` for integer and float columns alike); PAYLOAD is, per column in the same
order, ``0x00`` for a null, or ``0x01``, the value's payload length as 8 big-endian
bytes and the payload. Identical rows share a split.

Version 1.1 changed only floats (version 1 hashed every float as tag ``float``
and its ``repr``, so ``3.0`` and ``3`` were different keys): float keys with an
integer value, and whole-row keys of tables with a float column, were assigned
differently by version 1. Integer, text, boolean, binary, date and timestamp
keys, and floats with a fraction used as keys, keep their splits.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import blake3
import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.types as pat

from reprise.core.errors import UserError

__all__ = ["DEFAULT_FRACTIONS", "assign_splits", "split"]

DEFAULT_FRACTIONS: Mapping[str, float] = MappingProxyType(
    {"train": 0.8, "validation": 0.1, "test": 0.1})
_DOMAIN = b"reprise.split.v1"
_FRACTION_TOLERANCE = 1e-9


def split(data: Any, *, by: str | None = None,
          fractions: Mapping[str, float] = DEFAULT_FRACTIONS, stratify: str | None = None,
          group: str | None = None, time: str | None = None, seed: int = 0) -> dict[str, Any]:
    """Split ``data`` into named parts; see :func:`assign_splits` for the modes.

    Returns a dict from split name (in the order of ``fractions``) to the rows of
    that split in their original order: DataFrames for a DataFrame (index kept),
    ``pyarrow.Table`` otherwise.

    Example:
        >>> import pyarrow as pa
        >>> parts = split(pa.table({"id": list(range(100))}), by="id")
        >>> sorted(parts), sum(len(t) for t in parts.values())
        (['test', 'train', 'validation'], 100)
    """
    codes = assign_splits(data, by=by, fractions=fractions, stratify=stratify, group=group,
                          time=time, seed=seed, as_indices=True)
    rows = {name: np.flatnonzero(codes == i) for i, name in enumerate(fractions)}
    if _is_pandas(data):
        return {name: data.iloc[idx] for name, idx in rows.items()}
    table = _to_table(data, None)
    return {name: table.take(pa.array(idx, type=pa.int64())) for name, idx in rows.items()}


def assign_splits(data: Any, *, by: str | None = None,
                  fractions: Mapping[str, float] = DEFAULT_FRACTIONS, stratify: str | None = None,
                  group: str | None = None, time: str | None = None, seed: int = 0,
                  as_indices: bool = False) -> npt.NDArray[Any]:
    """The split of every row: an array of split names, or of their positions.

    Modes:

    * **hash** (default): each row's key (column ``by``; column ``group`` when
      given, so no group straddles two splits; the whole row when neither is
      given) is hashed to ``u`` in [0, 1) (encoding in the module docstring) and
      lands in the split whose cumulative-fraction interval holds ``u``. Adding
      rows never moves existing ones; split sizes are binomial around the
      fractions.
    * **stratified** (``stratify=col``): within each class, keys are ordered by
      hash and cut at the rounded cumulative counts, so every split holds each
      class within one row of its share. With ``group``, whole groups are placed,
      each in the class of its most frequent label (ties: the smallest label).
      The price of exact proportions: appending rows can move a few keys that sit
      at the cut points.
    * **time** (``time=col``): rows ordered by time (ties by key hash); the
      earliest rows go to the first split named in ``fractions``, and so on. With
      ``group``, each group is placed by its earliest time.

    Args:
        data: a ``pyarrow.Table``, a ``pandas.DataFrame``, or anything with
            ``to_arrow()`` (a Reprise dataset version).
        by: the key column (ids); rows sharing a key share a split.
        fractions: split name → fraction; positive, summing to 1.
        stratify: class column to balance across splits (not with ``time``).
        group: column whose values must not straddle splits; it is the key.
        time: column to order by for a temporal split.
        seed: changes every assignment; the same seed gives the same splits.
        as_indices: return positions into ``fractions`` (int8) instead of names.

    Example:
        >>> import pyarrow as pa
        >>> assign_splits(pa.table({"id": [1, 2, 3, 4]}), by="id", fractions={"a": .5, "b": .5})
        array(['a', 'a', 'a', 'b'], dtype='<U1')
    """
    names, cuts = _check_fractions(fractions)
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise UserError(f"seed must be an integer; got {seed!r}")
    if by is not None and group is not None and by != group:
        raise UserError(f"give either by= or group=, not both (got by={by!r}, group={group!r}); "
                        "group is the key, so no group straddles two splits")
    if stratify is not None and time is not None:
        raise UserError("stratify= and time= cannot be combined: a time split is ordered by time")
    key = group if group is not None else by
    table = _to_table(data, [c for c in (key, stratify, time) if c is not None] or None)
    _check_columns(table, {"by": by, "group": group, "stratify": stratify, "time": time})
    hashes = _key_hashes(table, key, seed)
    if time is not None:
        codes = _time_codes(table, time, hashes, grouped=group is not None, cuts=cuts)
    elif stratify is not None:
        codes = _stratified_codes(table.column(stratify), stratify, hashes, cuts, len(names))
    else:
        codes = np.searchsorted(cuts, _uniform(hashes), side="right")
    codes = codes.astype(np.int8 if len(names) < 128 else np.int64)
    return codes if as_indices else np.asarray(names)[codes]


def _check_fractions(fractions: Mapping[str, float]) -> tuple[list[str], npt.NDArray[np.float64]]:
    """Names in order and the inner cut points (cumulative fractions but the last)."""
    if not isinstance(fractions, Mapping) or not fractions:
        raise UserError(f"fractions must be a non-empty mapping of split name to fraction, "
                        f"like {dict(DEFAULT_FRACTIONS)}; got {fractions!r}")
    names = list(fractions)
    values = []
    for name in names:
        value = fractions[name]
        if not isinstance(name, str) or not name:
            raise UserError(f"split names must be non-empty strings; got {name!r}")
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
                or value <= 0:
            raise UserError(f"fraction of split {name!r} must be a positive number; got {value!r}")
        values.append(float(value))
    total = math.fsum(values)
    if abs(total - 1.0) > _FRACTION_TOLERANCE:
        raise UserError(f"fractions must sum to 1; {dict(fractions)} sums to {total!r}")
    return names, np.cumsum(values)[:-1]


def _is_pandas(data: Any) -> bool:
    return type(data).__module__.startswith("pandas") and hasattr(data, "iloc")


def _to_table(data: Any, columns: list[str] | None) -> pa.Table:
    """An Arrow table of ``data`` (only ``columns`` of a DataFrame, to save converting)."""
    if isinstance(data, pa.Table):
        return data
    if _is_pandas(data):
        if columns is not None and all(c in data.columns for c in columns):
            data = data[list(dict.fromkeys(columns))]
        try:
            return pa.Table.from_pandas(data, preserve_index=False)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise UserError(f"cannot read the DataFrame's columns as typed data ({exc}); "
                            "give mixed-type object columns one type first") from exc
    if hasattr(data, "to_arrow"):
        table = data.to_arrow()
        if isinstance(table, pa.Table):
            return table
    raise UserError(f"cannot split a {type(data).__name__}: give a pyarrow.Table, a "
                    "pandas.DataFrame or a dataset version (anything with to_arrow())")


def _check_columns(table: pa.Table, given: Mapping[str, str | None]) -> None:
    available = table.column_names
    for param, column in given.items():
        if column is not None and column not in available:
            raise UserError(f"column {column!r} (given as {param}=) is not in the data; "
                            f"columns are: {', '.join(map(repr, available))}")


def _encode(column: pa.ChunkedArray, name: str) -> tuple[bytes, list[bytes | None]]:
    """The tag of ``column``'s type and every value's payload (None for nulls)."""
    kind = column.type
    if pat.is_dictionary(kind):
        column, kind = column.cast(kind.value_type), kind.value_type
    if pat.is_integer(kind):
        return b"int", column.cast(pa.string()).cast(pa.binary()).to_pylist()
    if pat.is_boolean(kind):
        return b"bool", column.cast(pa.string()).cast(pa.binary()).to_pylist()
    if pat.is_floating(kind):  # by value: tag int, with the fractional ones told apart
        return b"int", [None if v is None else _float_payload(v) for v in
                        column.cast(pa.float64()).to_pylist()]
    if pat.is_string(kind) or pat.is_large_string(kind) or pat.is_string_view(kind):
        return b"str", column.cast(pa.large_binary()).to_pylist()
    if pat.is_binary(kind) or pat.is_large_binary(kind) or pat.is_fixed_size_binary(kind) \
            or pat.is_binary_view(kind):
        return b"bytes", column.cast(pa.large_binary()).to_pylist()
    if pat.is_timestamp(kind):
        nanos = column.cast(pa.timestamp("ns", tz=kind.tz)).cast(pa.int64())
        return b"ts", nanos.cast(pa.string()).cast(pa.binary()).to_pylist()
    if pat.is_date(kind):
        days = column.cast(pa.date32()).cast(pa.int32())
        return b"date", days.cast(pa.string()).cast(pa.binary()).to_pylist()
    raise UserError(f"column {name!r} has type {kind}, which cannot be a split key; use an "
                    "integer, string, float, boolean, binary, date or timestamp column")


def _float_payload(value: float) -> bytes:
    """An integral float as the integer's decimal (``3.0`` -> ``3``, as the integer 3
    is hashed), any other (a fraction, inf, nan) as its ``repr``."""
    return b"%d" % int(value) if value.is_integer() else repr(value).encode()


def _key_digests(tag: bytes, seed: int, payloads: Sequence[bytes],
                 floating: bool) -> npt.NDArray[np.uint64]:
    """:func:`_digest_all` of a key column; a float column's values without an integer
    value take the tag ``float`` (their payloads are a ``repr``, never a decimal)."""
    if not floating:
        return _digest_all(tag, seed, payloads)
    integral = np.fromiter((p.lstrip(b"-").isdigit() for p in payloads), dtype=bool,
                           count=len(payloads))
    out = np.empty(len(payloads), dtype=np.uint64)
    pairs = list(zip(payloads, integral, strict=True))
    out[integral] = _digest_all(b"int", seed, [p for p, i in pairs if i])
    out[~integral] = _digest_all(b"float", seed, [p for p, i in pairs if not i])
    return out


def _digest_all(tag: bytes, seed: int, payloads: Sequence[bytes]) -> npt.NDArray[np.uint64]:
    """First 8 digest bytes of every payload as big-endian uint64 (the hot loop)."""
    prefix = b"%s\x00%s\x00%d\x00" % (_DOMAIN, tag, seed)
    hasher = blake3.blake3
    # One constructor call per key on prefix + payload beats copying a pre-fed hasher.
    digests = b"".join([hasher(prefix + payload).digest(8) for payload in payloads])
    return np.frombuffer(digests, dtype=">u8").astype(np.uint64)


def _key_hashes(table: pa.Table, key: str | None, seed: int) -> npt.NDArray[np.uint64]:
    if key is not None:
        column = table.column(key)
        if column.null_count:
            raise UserError(f"column {key!r} has {column.null_count} null value(s) of "
                            f"{table.num_rows} rows; a split key must be present in every row: "
                            "fill or drop those rows first")
        tag, payloads = _encode(column, key)
        floating = pat.is_floating(column.type) or (
            pat.is_dictionary(column.type) and pat.is_floating(column.type.value_type))
        return _key_digests(tag, seed, payloads, floating)  # type: ignore[arg-type]
    names = sorted(table.column_names)
    if not names:
        raise UserError("the data has no columns to split on")
    encoded = [_encode(table.column(name), name) for name in names]
    header = [b"\x00%s\x00%s" % (name.encode(), tag)
              for name, (tag, _) in zip(names, encoded, strict=True)]
    tag = b"row" + b"".join(header)
    framed = [[b"\x00" if v is None else b"\x01" + len(v).to_bytes(8, "big") + v for v in values]
              for _, values in encoded]
    return _digest_all(tag, seed, [b"".join(parts) for parts in zip(*framed, strict=True)])


def _uniform(hashes: npt.NDArray[np.uint64]) -> npt.NDArray[np.float64]:
    """Top 53 bits as a float in [0, 1): exact, so identical on every platform."""
    return (hashes >> np.uint64(11)).astype(np.float64) * 2.0**-53


def _cut_ordered(sizes: npt.NDArray[np.int64], totals: npt.NDArray[np.int64],
                 before: npt.NDArray[np.int64], cuts: npt.NDArray[np.float64]) -> npt.NDArray[np.intp]:
    """Split of ordered units: where each unit's middle row falls among the rounded cut rows.

    ``before`` counts the rows ahead of the unit in its stratum of ``totals`` rows;
    with units of one row, a split gets exactly its rounded cumulative count.
    """
    bounds = np.floor(cuts[None, :] * totals[:, None].astype(np.float64) + 0.5)
    middle = before.astype(np.float64) + sizes.astype(np.float64) / 2.0
    codes: npt.NDArray[np.intp] = np.count_nonzero(middle[:, None] >= bounds, axis=1).astype(np.intp)
    return codes


def _label_ranks(column: pa.ChunkedArray) -> tuple[npt.NDArray[np.int64], list[Any]]:
    """Rank of every row's label in sorted label order (null last), and the labels."""
    encoded = column.combine_chunks().dictionary_encode(null_encoding="encode")
    labels = encoded.dictionary
    order = np.asarray(pc.sort_indices(labels))  # nulls sort last
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    return rank[np.asarray(encoded.indices)], labels.take(pa.array(order)).to_pylist()


def _stratified_codes(column: pa.ChunkedArray, name: str, hashes: npt.NDArray[np.uint64],
                      cuts: npt.NDArray[np.float64], n_splits: int) -> npt.NDArray[np.intp]:
    unit_hash, unit_of_row, sizes = np.unique(hashes, return_inverse=True, return_counts=True)
    row_label, labels = _label_ranks(column)
    per_class = np.bincount(row_label, minlength=len(labels))
    small = [labels[i] for i in np.flatnonzero(per_class < n_splits)]
    if small:
        warnings.warn(f"stratify column {name!r} has {len(small)} class(es) with fewer rows "
                      f"than the {n_splits} splits (e.g. {small[:5]}); some splits will miss "
                      "them", UserWarning, stacklevel=4)
    # Most frequent label per unit; lexsort puts the largest count of each unit last,
    # and among equal counts the smallest label rank last.
    pair, pair_count = np.unique(unit_of_row * len(labels) + row_label, return_counts=True)
    pair_unit, pair_label = pair // len(labels), pair % len(labels)
    last = np.lexsort((-pair_label, pair_count, pair_unit))
    unit_label = np.empty(len(unit_hash), dtype=np.int64)
    unit_label[pair_unit[last]] = pair_label[last]
    order = np.argsort(unit_label, kind="stable")  # units are already in hash order
    codes = _cut_strata(sizes[order], unit_label[order], cuts)
    unit_code = np.empty(len(unit_hash), dtype=np.intp)
    unit_code[order] = codes
    return unit_code[unit_of_row]


def _cut_strata(sizes: npt.NDArray[np.int64], strata: npt.NDArray[np.int64],
                cuts: npt.NDArray[np.float64]) -> npt.NDArray[np.intp]:
    """:func:`_cut_ordered` for units sorted by stratum, every stratum cut on its own."""
    ends = np.cumsum(sizes)
    first = np.flatnonzero(np.r_[True, strata[1:] != strata[:-1]])
    offset = np.repeat(ends[first] - sizes[first], np.diff(np.r_[first, len(sizes)]))
    stratum_end = np.repeat(ends[np.r_[first[1:] - 1, len(sizes) - 1]],
                            np.diff(np.r_[first, len(sizes)]))
    return _cut_ordered(sizes, stratum_end - offset, ends - sizes - offset, cuts)


def _time_codes(table: pa.Table, time: str, hashes: npt.NDArray[np.uint64], *, grouped: bool,
                cuts: npt.NDArray[np.float64]) -> npt.NDArray[np.intp]:
    when = table.column(time)
    if when.null_count:
        raise UserError(f"time column {time!r} has {when.null_count} null value(s) of "
                        f"{table.num_rows} rows; fill or drop them before a time split")
    if grouped:
        unit_hash, unit_of_row, sizes = np.unique(hashes, return_inverse=True, return_counts=True)
        first = pa.table({"u": unit_of_row, "t": when}).group_by("u").aggregate([("t", "min")])
        unit_time = pa.table({"u": first.column("u"), "t": first.column("t_min"),
                              "h": unit_hash[np.asarray(first.column("u"))]})
        sorted_units = np.asarray(unit_time.column("u"))[np.asarray(
            pc.sort_indices(unit_time, sort_keys=[("t", "ascending"), ("h", "ascending")]))]
    else:
        unit_of_row, sizes = np.arange(table.num_rows), np.ones(table.num_rows, dtype=np.int64)
        sorted_units = np.asarray(pc.sort_indices(
            pa.table({"t": when, "h": hashes}), sort_keys=[("t", "ascending"), ("h", "ascending")]))
    ordered = sizes[sorted_units]
    totals = np.full(len(ordered), ordered.sum(), dtype=np.int64)
    codes = np.empty(len(ordered), dtype=np.intp)
    codes[sorted_units] = _cut_ordered(ordered, totals, np.cumsum(ordered) - ordered, cuts)
    return codes[unit_of_row]
