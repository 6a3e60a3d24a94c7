"""The response cache (opt-in, ``--cache-mb``): answers of recent rows, per model version.

Written by hand: the key is Reprise's own idea (the row *after* the signature's checks
and coercion, so ``{"a": 1, "b": 2}`` and ``{"b": 2.0, "a": 1}`` for float columns are one
row) and the cache must be per row (a batch request is served partly from it), bounded
in bytes, and dropped when the versions a name answers with change.

* Key: ``(name, version, blake2b of the row's canonical encoding)``. The version is the
  one that answered, so versions never share answers (a rollout's candidate answers come
  from the candidate) and an immutable version's answers stay true while it is served.
* Bound: the bytes of each entry (its outputs, measured with ``sys.getsizeof`` through
  lists and tuples, plus the key and the bookkeeping of one entry) are counted; storing
  beyond ``max_bytes`` evicts the least recently used entries first. An entry larger than
  the whole bound is not stored.
* Invalidation (``invalidate``): the server drops a name's entries when its alias moves
  (hot swap), when a rollout of it starts, changes weight or phase, or ends, and a
  version's entries when it is released.
* Thread-safe: one lock around the table; hashing runs outside it.
* Invisible to the cyclic garbage collector: an entry is stored as tuples of atoms (a
  row's nested lists, such as its probabilities, become tuples; a hit gets lists back),
  which CPython stops tracking once they survive a collection. As lists, a full 64 MB
  cache held ~370,000 tracked objects and every full collection walked them (25 ms a
  pass: bench_cache at a 0 % repeat rate saw p99 1.5-2x and +10 % CPU per answer).
"""

from __future__ import annotations

import struct
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from hashlib import blake2b
from operator import itemgetter
from typing import Any

__all__ = ["InputDtypes", "ResponseCache", "input_dtypes", "row_keys"]

# What one entry costs beyond its outputs: the OrderedDict's node and hash slot, the key
# tuple (name and version are shared strings/ints), the 16-byte digest, the entry tuple.
# Measured with tracemalloc in tests/serve/test_cache.py (test_bound_is_real_memory).
_ENTRY_OVERHEAD = 360
_Key = tuple[str, int, bytes]
_Entry = tuple[tuple[Any, ...], int]  # (one row of each output column, its bytes)
# a version's output description: output names, kinds, row shapes
_Meta = tuple[tuple[str, ...], dict[str, str], dict[str, tuple[int, ...]]]
_WHAT = ("hit", "miss", "evict", "drop")  # what the counters of a version count, in order
_HIT, _MISS, _EVICT, _DROP = range(4)


# a scalar field's dtype -> (the numpy dtype the model gets it as, the Python type alike)
_NATIVE: dict[str, tuple[str, type]] = {"float": ("<f8", float), "int": ("<i8", int),
                                        "bool": ("|b1", bool)}
_FLOAT = _NATIVE["float"]
_NUMBERS = frozenset((float, int))  # struct packs an int as float() would convert it
_PLAIN = frozenset((float, int, str, bool, type(None)))  # their repr is exact and tagged


def _canonical(value: Any, native: tuple[str, type] | None) -> Any:
    """``value`` as the model will get it (``Signature.to_arrays``), as something whose
    ``repr`` is exact and says its type: a number of a float field as a float (``1`` and
    ``1.0`` are one value), of an int field as an int; a numpy scalar of the model's own
    dtype (the OIP's tensors) as the Python value; an array as (dtype, shape, bytes).
    Left apart when unsure: two keys for one value only miss, one key for two would lie."""
    t = type(value)
    if native is not None and (t is float or t is int or t is bool):
        return native[1](value)
    if t in _PLAIN:
        return value
    if t is list or t is tuple:
        return (t.__name__, *(_canonical(v, None) for v in value))
    dtype = getattr(value, "dtype", None)
    if dtype is not None and hasattr(value, "tobytes"):
        shape = getattr(value, "shape", ())
        if native is not None and shape == () and dtype.str == native[0]:
            return value.item()
        return ("ndarray", dtype.str, tuple(shape), value.tobytes())
    return ("object", f"{t.__module__}.{t.__qualname__}", repr(value))


class InputDtypes(dict[str, str]):
    """The dtype of each scalar input field (a dict), which also remembers, per set of
    column names, how :func:`row_keys` lays those rows out (sorted names, the digest's
    head, the packer of all-float rows): worked out once per version, not per request."""

    __slots__ = ("layouts",)

    def __init__(self, dtypes: Mapping[str, str]) -> None:
        super().__init__(dtypes)
        self.layouts: dict[tuple[str, ...], _Layout] = {}


class _Layout:
    """How rows of one set of column names become digest inputs (see :func:`row_keys`)."""

    __slots__ = ("cols", "fast", "head", "names", "packer", "prefix", "take")

    def __init__(self, names: Sequence[str], dtypes: Mapping[str, str]) -> None:
        self.names = sorted(names)
        # the columns in this order, in one C call (a list comprehension costs twice as much)
        take = itemgetter(*self.names)
        self.take: Callable[[Mapping[str, Any]], Sequence[Any]] = take if len(
            self.names) > 1 else (lambda columns: (take(columns),))
        self.head = repr(self.names).encode("utf-8", "surrogatepass")
        self.cols = [_NATIVE.get(dtypes.get(n, "")) for n in self.names]
        self.fast = all(native is _FLOAT for native in self.cols)  # all float fields
        self.packer = struct.Struct(f"<{len(self.names)}d")
        self.prefix = self.head + ("f" * len(self.names)).encode()


_MAX_LAYOUTS = 64  # distinct sets of column names remembered per version


def input_dtypes(signature: Any) -> InputDtypes:
    """The dtype of each scalar input field of ``signature`` (for :func:`row_keys`)."""
    return InputDtypes({f.name: f.dtype for f in signature.inputs if not f.shape})


def row_keys(columns: dict[str, Any], rows: int,
             dtypes: Mapping[str, str] | None = None) -> list[bytes]:
    """The digest of each row of checked ``columns`` (column order does not matter), its
    values canonical for the fields' ``dtypes`` (:func:`input_dtypes`) as the model will
    get them.

    The digest's input: the column names, one tag per value, the floats packed (8 bytes
    each; ``repr`` of 20 floats costs ten times more), then ``repr`` of the other values
    (exact and typed for :func:`_canonical`'s results). The tags fix the layout, so two
    different rows never give the same input. The layout of a set of column names is
    remembered by an :class:`InputDtypes` (a server's requests share a few)."""
    dtypes = dtypes if dtypes is not None else {}
    layouts = getattr(dtypes, "layouts", None)
    layout = None
    if layouts is not None:
        names = tuple(columns)
        layout = layouts.get(names)
        if layout is None:
            layout = _Layout(names, dtypes)
            if len(layouts) < _MAX_LAYOUTS:
                layouts[names] = layout
    else:
        layout = _Layout(list(columns), dtypes)
    cols = layout.take(columns)
    if not layout.fast:
        pairs = list(zip(cols, layout.cols, strict=True))
        return [_row_key(layout.head, pairs, i) for i in range(rows)]
    prefix, pack = layout.prefix, layout.packer.pack  # all float fields: packed at once
    keys = []
    for i in range(rows):
        values = [c[i] for c in cols]
        if set(map(type, values)) <= _NUMBERS:
            keys.append(blake2b(prefix + pack(*values), digest_size=16).digest())
        else:
            keys.append(_row_key(layout.head, list(zip(cols, layout.cols, strict=True)), i))
    return keys


def _row_key(head: bytes, cols: list[tuple[Any, tuple[str, type] | None]], i: int) -> bytes:
    """One row's digest, value by value (see :func:`row_keys`)."""
    tags: list[str] = []
    floats: list[float] = []
    others: list[Any] = []
    for col, native in cols:
        value = col[i]
        if native is _FLOAT and (type(value) is float or type(value) is int):
            tags.append("f")  # the common case, inline
            floats.append(float(value))
            continue
        value = _canonical(value, native)
        if type(value) is float:
            tags.append("f")
            floats.append(value)
        else:
            tags.append("o")
            others.append(value)
    data = b"".join((head, "".join(tags).encode(), struct.pack(f"<{len(floats)}d", *floats),
                     repr(others).encode("utf-8", "surrogatepass") if others else b""))
    return blake2b(data, digest_size=16).digest()


def _frozen(value: Any) -> Any:
    """``value`` with its lists, at any depth, as tuples (see the module's docstring)."""
    return tuple(map(_frozen, value)) if type(value) is list else value


def _thaw(value: Any) -> Any:
    return list(map(_thaw, value)) if type(value) is tuple else value


def _thawed(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """A stored row with its tuples as lists again, as the model's answer had them."""
    for v in row:
        if type(v) is tuple:
            return tuple(map(_thaw, row))
    return row


def _sizeof(value: Any) -> int:
    size = sys.getsizeof(value)
    t = type(value)
    if t is list or t is tuple:
        for v in value:
            tv = type(v)
            size += _sizeof(v) if tv is list or tv is tuple or tv is dict else sys.getsizeof(v)
    elif t is dict:
        size += sum(_sizeof(k) + _sizeof(v) for k, v in value.items())
    return size


class ResponseCache:
    """A bounded, thread-safe LRU of output rows keyed by model version and input row."""

    def __init__(self, max_bytes: int, registry: Any = None) -> None:
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be 1 or more; got {max_bytes}")
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._table: OrderedDict[_Key, _Entry] = OrderedDict()
        self._bytes = 0
        # (name, version) -> (output names, kinds, row shapes) of its last answer
        self._meta: dict[tuple[str, int], _Meta] = {}
        # (name, version) -> [hits, misses, evictions, drops]; plain ints under the lock,
        # read at scrape time (a prometheus_client child's lock per increment costs more
        # than the lookup)
        self._counts: dict[tuple[str, int], list[int]] = {}
        if registry is not None:
            registry.register(_Collector(self))

    def _count(self, what: int, name: str, version: int, n: int = 1) -> None:
        """Count ``n`` of ``what`` (an index of ``_WHAT``; call with the lock held)."""
        if n:
            counts = self._counts.get((name, version))
            if counts is None:
                counts = self._counts[(name, version)] = [0, 0, 0, 0]
            counts[what] += n

    @property
    def size(self) -> int:
        """The bytes held, as the bound counts them."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._table)

    def get(self, name: str, version: int, keys: Sequence[bytes]
            ) -> tuple[list[tuple[Any, ...] | None], _Meta | None]:
        """Each key's output row (``None``: a miss; hits become most recently used) and the
        version's output description (names, kinds, row shapes)."""
        found: list[tuple[Any, ...] | None] = []
        hits = 0
        with self._lock:
            table = self._table
            for key in keys:
                entry = table.get((name, version, key))
                if entry is None:
                    found.append(None)
                else:
                    table.move_to_end((name, version, key))
                    found.append(_thawed(entry[0]))
                    hits += 1
            meta = self._meta.get((name, version))
            if hits and meta is None:  # cannot be (dropped together): treat as misses
                found, hits = [None] * len(keys), 0
            self._count(_HIT, name, version, hits)
            self._count(_MISS, name, version, len(keys) - hits)
        return found, meta

    def put(self, name: str, version: int, keys: Sequence[bytes],
            outputs: dict[str, list[Any]], kinds: dict[str, str],
            shapes: dict[str, tuple[int, ...]]) -> None:
        """Store one answer's rows (``outputs[col][i]`` is the answer to ``keys[i]``)."""
        names = tuple(outputs)
        cols = [outputs[n] for n in names]
        rows = [tuple([_frozen(c[i]) for c in cols]) for i in range(len(keys))]
        sizes = [_ENTRY_OVERHEAD + _sizeof(row) for row in rows]
        with self._lock:
            meta = self._meta.get((name, version))
            if meta is None or meta[0] != names or meta[1] != kinds or meta[2] != shapes:
                if meta is not None:  # answers of another shape (output dtype, say): the
                    # rows stored are described by one meta per version, so drop them
                    self._drop_locked(lambda k: k[0] == name and k[1] == version)
                self._meta[(name, version)] = (names, dict(kinds), dict(shapes))
            table = self._table
            for key, row, size in zip(keys, rows, sizes, strict=True):
                if size > self.max_bytes:
                    continue
                full = (name, version, key)
                old = table.pop(full, None)
                if old is not None:
                    self._bytes -= old[1]
                while self._bytes + size > self.max_bytes:  # room first: never over
                    (ename, eversion, _), (_, esize) = table.popitem(last=False)
                    self._bytes -= esize
                    self._count(_EVICT, ename, eversion)
                table[full] = (row, size)
                self._bytes += size

    def _drop_locked(self, match: Any) -> dict[tuple[str, int], int]:
        dropped: dict[tuple[str, int], int] = {}
        for full in [k for k in self._table if match(k)]:
            self._bytes -= self._table.pop(full)[1]
            dropped[(full[0], full[1])] = dropped.get((full[0], full[1]), 0) + 1
        return dropped

    def invalidate(self, name: str, version: int | None = None) -> int:
        """Drop the entries of ``name`` (of one ``version``, or of all); return how many."""
        with self._lock:
            dropped = self._drop_locked(
                lambda k: k[0] == name and (version is None or k[1] == version))
            for key in [k for k in self._meta
                        if k[0] == name and (version is None or k[1] == version)]:
                del self._meta[key]
            for (dname, dversion), n in dropped.items():
                self._count(_DROP, dname, dversion, n)
        return sum(dropped.values())


_FAMILIES = {
    "hit": ("reprise_cache_hits", "Rows answered from the response cache."),
    "miss": ("reprise_cache_misses", "Rows looked up in the response cache and computed by "
             "the model."),
    "evict": ("reprise_cache_evictions", "Entries evicted to keep the response cache within "
              "its bound (least recently used first)."),
    "drop": ("reprise_cache_invalidations", "Entries dropped because the versions a model "
             "answers with changed."),
}


class _Collector:
    """The cache's series in /metrics, read from its counts at scrape time."""

    def __init__(self, cache: ResponseCache) -> None:
        self.cache = cache

    def collect(self) -> Any:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        cache = self.cache
        with cache._lock:
            counts = {k: list(v) for k, v in cache._counts.items()}
            size, entries = cache._bytes, len(cache._table)
        families = {what: CounterMetricFamily(name, text, labels=["model", "version"])
                    for what, (name, text) in _FAMILIES.items()}
        for (name, version), ns in sorted(counts.items()):
            for what, n in zip(_WHAT, ns, strict=True):
                if n:
                    families[what].add_metric([name, str(version)], n)
        yield from families.values()
        yield GaugeMetricFamily("reprise_cache_bytes", "Bytes the response cache holds "
                                "(counted as its bound counts them).", value=size)
        yield GaugeMetricFamily("reprise_cache_max_bytes", "The response cache's bound.",
                                value=cache.max_bytes)
        yield GaugeMetricFamily("reprise_cache_entries", "Rows in the response cache.",
                                value=entries)
