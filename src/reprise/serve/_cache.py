"""The response cache (opt-in, ``--cache-mb``): answers of recent rows, per model version.

Written by hand: the key is Reprise's own idea (the row *after* the signature's checks
and coercion, so ``{"a": 1, "b": 2}`` and ``{"b": 2.0, "a": 1}`` for float columns are one
row) and the cache must be per row (a batch request is served partly from it), bounded
in bytes, and dropped when the versions a name answers with change.

* Key: ``(name, version, row key)``, the row key being an all-float row's values packed
  (:func:`row_keys`), else a blake2b of its canonical encoding. The version is the one
  that answered, so versions never share answers (a rollout's candidate answers come
  from the candidate) and an immutable version's answers stay true while it is served.
* Bound: the bytes of each entry (its key's and its row's bytes objects, plus the
  bookkeeping of one entry) are counted, and the doorkeeper's bit array; storing beyond
  ``max_bytes`` evicts the least recently used entries first. An entry larger than the
  whole bound is not stored.
* Admission and bypass: see :class:`ResponseCache`.
* Invalidation (``invalidate``): the server drops a name's entries when its alias moves
  (hot swap), when a rollout of it starts, changes weight or phase, or ends, and a
  version's entries when it is released.
* Thread-safe: one lock around the table; hashing runs outside it.
* One bytes object per row: its outputs in ``marshal``'s format (CPython's own, in C:
  lists, floats, ints, strings, exact; not pickle: it cannot make arbitrary objects,
  and only rows this process wrote are ever read back, from memory). A stored row is
  then invisible to the cyclic garbage collector (bytes are never tracked), counted
  exactly (``sys.getsizeof``), and a few dozen bytes instead of the ~250 of a tuple of
  Python floats; a hit gets fresh lists. As lists, a full 64 MB cache held ~370,000
  tracked objects and every full collection walked them; as tuples of atoms it held
  ~4 objects a row, interleaved in the heap with every request's objects.
"""

from __future__ import annotations

import logging
import marshal
import struct
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from hashlib import blake2b
from itertools import chain
from operator import itemgetter
from typing import Any

__all__ = ["InputDtypes", "ResponseCache", "input_dtypes", "row_keys"]

_logger = logging.getLogger(__name__)

# What one entry costs beyond its two bytes objects (key and row): the OrderedDict's node
# and hash slot, the key tuple (name and version are shared strings/ints). Measured with
# tracemalloc in tests/serve/test_cache.py (test_bound_is_real_memory).
_ENTRY_OVERHEAD = 240
_Key = tuple[str, int, bytes]  # an entry's value: marshal.dumps(one row of each column)
# a version's output description: output names, kinds, row shapes
_Meta = tuple[tuple[str, ...], dict[str, str], dict[str, tuple[int, ...]]]
# what the counters of a version count, in order
_WHAT = ("hit", "miss", "evict", "drop", "skip", "bypass")
_HIT, _MISS, _EVICT, _DROP, _SKIP, _BYPASS = range(6)
_WINDOW = 2048  # rows looked up per verdict on a version's hit rate
# while a version is bypassed, one request in this many is still looked up: at 1 in 16,
# the sampled lookups still cost ~3 % of a LogisticRegression's requests/s (bench_cache)
_SAMPLE = 64
_SAMPLED_WINDOW = 128  # sampled lookups per verdict while bypassed (2 hits: 1.6 %)


# a scalar field's dtype -> (the numpy dtype the model gets it as, the Python type alike)
_NATIVE: dict[str, tuple[str, type]] = {"float": ("<f8", float), "int": ("<i8", int),
                                        "bool": ("|b1", bool)}
_FLOAT = _NATIVE["float"]
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
    """How rows of one set of column names become keys (see :func:`row_keys`)."""

    __slots__ = ("cols", "fast", "head", "names", "packer", "tag", "take")

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
        # a packed row's first bytes: which names, in which order (a digest, so that the
        # key stays short however long the names)
        self.tag = blake2b(self.head + b"f" * len(self.names), digest_size=16).digest()


_MAX_LAYOUTS = 64  # distinct sets of column names remembered per version


def input_dtypes(signature: Any) -> InputDtypes:
    """The dtype of each scalar input field of ``signature`` (for :func:`row_keys`)."""
    return InputDtypes({f.name: f.dtype for f in signature.inputs if not f.shape})


def row_keys(columns: dict[str, Any], rows: int,
             dtypes: Mapping[str, str] | None = None) -> list[bytes]:
    """The key of each row of checked ``columns`` (column order does not matter), its
    values canonical for the fields' ``dtypes`` (:func:`input_dtypes`) as the model will
    get them.

    A row of float fields only (the usual tabular row) is keyed by its values themselves,
    packed as the model's float64 (``struct``: exact, ``-0.0`` apart from ``0.0``, ``1``
    and ``1.0`` one value), after a 16-byte tag of its column names: no digest to compute
    (blake2b was a third of a key's cost), and the table's own comparison makes a wrong
    hit impossible. Any other row (or a value ``struct`` refuses, such as a string or
    ``None``) is keyed by a 16-byte blake2b of: the column names, one tag per value, the
    floats packed, then ``repr`` of the other values (exact and typed for
    :func:`_canonical`'s results). The tags fix the layout, so two different rows never
    give the same input; a packed key is never 16 bytes long, so the two kinds never meet.
    The layout of a set of column names is remembered by an :class:`InputDtypes` (a
    server's requests share a few)."""
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
    # packed only from lists (JSON's values, and the OIP's once decoded): numpy columns
    # (programmatic use) keep _canonical's care for dtypes (a float32 or longdouble value
    # is not the float64 it packs as)
    if not (layout.fast and layout.names) or set(map(type, cols)) != _LIST:
        pairs = list(zip(cols, layout.cols, strict=True))
        return [_row_key(layout.head, pairs, i) for i in range(rows)]
    tag, pack = layout.tag, layout.packer.pack  # all float fields: packed, in C
    try:
        if rows == 1:
            return [tag + pack(*chain.from_iterable(cols))]
        return [tag + pack(*values) for values in zip(*cols, strict=True)]
    except _UNPACKED:  # not all numbers (None, a string, ...): row by row
        pairs = list(zip(cols, layout.cols, strict=True))
        keys = []
        for i, values in enumerate(zip(*cols, strict=True)):
            try:
                keys.append(tag + pack(*values))
            except _UNPACKED:
                keys.append(_row_key(layout.head, pairs, i))
        return keys


_UNPACKED = (struct.error, TypeError, OverflowError, ValueError)  # what pack may raise
_LIST = {list}


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


# numpy kinds whose tolist() gives exact plain values: bool, int, uint, float, complex,
# bytes, str (not "O" objects as they are, nor "M"/"m" datetimes)
_TOLIST_PLAIN = frozenset("biufcSU")


def _plain(value: Any) -> bool:
    """Whether ``marshal`` writes ``value`` as what it is (exact types: a numpy float64 is
    a float subclass that marshal would write as its buffer's bytes)."""
    t = type(value)
    if t is list or t is tuple:
        return all(map(_plain, value))
    return t in _PLAIN


def _entry_size(key: bytes, blob: bytes) -> int:
    """What an entry costs, as the bound counts it (see ``_ENTRY_OVERHEAD``)."""
    return _ENTRY_OVERHEAD + sys.getsizeof(key) + sys.getsizeof(blob)


class _Doorkeeper:
    """Which keys have missed before: TinyLFU's doorkeeper (Einziger, Friedman and Manes,
    2017), a Bloom filter of two probes in a bytearray, cleared after ``slots / 8`` marks
    (so it forgets rows seen long ago and false positives stay under ~5 %, ~1.5 % on
    average). Written by hand: two index operations per key (its ``hash`` is already
    cached by the table's lookup) cost less than any library call would."""

    __slots__ = ("bits", "limit", "marked", "mask")

    def __init__(self, slots: int) -> None:
        self.bits = bytearray(slots)
        self.mask = slots - 1
        self.limit = max(1, slots // 8)
        self.marked = 0

    def seen(self, key: bytes) -> bool:
        """Whether ``key`` was marked (since the last clearing); mark it if not."""
        h = hash(key)
        bits, mask = self.bits, self.mask
        i, j = h & mask, (h >> 32) & mask
        if bits[i] and bits[j]:
            return True
        bits[i] = bits[j] = 1
        self.marked += 1
        if self.marked >= self.limit:
            self.bits = bytearray(len(bits))
            self.marked = 0
        return False


_MIN_DOOR = 64  # a bound under 64 x this many bytes has no doorkeeper: it admits all


class ResponseCache:
    """A bounded, thread-safe LRU of output rows keyed by model version and input row.

    With ``doorkeeper`` (the server's default, ``--cache-admit second``), once the table
    is full (storing has had to evict since entries were last dropped), and for a
    bypassed version, a row is stored only when it misses a second time: a row asked once
    (most rows of most traffic) then costs a probe of a bit array instead of a store (half
    of what a miss cost) and evicts no row that may be asked again. While the table has
    room, every miss of a version looked up in full is stored (as W-TinyLFU admits freely
    until full: storing evicts nothing, and a row repeated once is a hit at once). The
    doorkeeper's bytes (1/64 of the bound) count in the bound.

    With ``min_hit_rate`` (the server's default: 0.01), a version whose rows hit less
    often than that over a window of 2,048 lookups is *bypassed*: only requests whose
    ``sample`` (the server passes the hash of the request's body, so a repeated request is
    always in or always out) falls in one of 64 are still looked up (:meth:`looks`), the
    others go straight to the model, so traffic that never repeats stops paying for keys
    and lookups (~10 % of a LogisticRegression's answer); the sampled lookups go on
    judging, in windows of 128 (~8,192 requests), and the version is looked up in full
    again as soon as a window hits as often as ``min_hit_rate``. A bypassed request is
    answered by the model, as without the cache: only the cache's use changes, never an
    answer."""

    def __init__(self, max_bytes: int, registry: Any = None,
                 doorkeeper: bool = False, min_hit_rate: float = 0.0) -> None:
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be 1 or more; got {max_bytes}")
        if not 0 <= min_hit_rate < 1:
            raise ValueError(f"min_hit_rate must be in [0, 1); got {min_hit_rate}")
        self.max_bytes = max_bytes
        self.min_hit_rate = min_hit_rate
        self._bypassed: set[tuple[str, int]] = set()  # versions whose lookups are sampled
        self._salt = 0  # which 64th of request bodies is sampled (turns every window)
        # (name, version) -> [rows looked up, hits] when its current window began
        self._window: dict[tuple[str, int], list[int]] = {}
        self._door: _Doorkeeper | None = None
        slots = 1 << max(0, (max_bytes // 64).bit_length() - 1)
        if doorkeeper and slots >= _MIN_DOOR:
            self._door = _Doorkeeper(slots)
        self._room = max_bytes - (slots if self._door is not None else 0)  # for entries
        self._lock = threading.Lock()
        self._table: OrderedDict[_Key, bytes] = OrderedDict()
        self._bytes = 0
        # whether storing has had to evict since entries were last dropped: the table is
        # full, and the doorkeeper guards it
        self._full = False
        # (name, version) -> (output names, kinds, row shapes) of its last answer
        self._meta: dict[tuple[str, int], _Meta] = {}
        # (name, version) -> [hits, misses, evictions, drops, unadmitted, bypassed]; ints
        # under the lock, read at scrape time (a prometheus_client child's lock per
        # increment costs more than the lookup)
        self._counts: dict[tuple[str, int], list[int]] = {}
        if registry is not None:
            registry.register(_Collector(self))

    def _counters(self, name: str, version: int) -> list[int]:
        """The counters of a version (call with the lock held)."""
        counts = self._counts.get((name, version))
        if counts is None:
            counts = self._counts[(name, version)] = [0] * len(_WHAT)
        return counts

    def looks(self, name: str, version: int, sample: int, rows: int) -> bool:
        """Whether to look up a request of ``rows`` rows for this version: yes unless the
        version is bypassed and ``sample`` falls outside the sampled 64th (then the
        rows are counted as bypassed)."""
        if (name, version) not in self._bypassed or (sample + self._salt) % _SAMPLE == 0:
            return True
        with self._lock:
            self._counters(name, version)[_BYPASS] += rows
        return False

    def _judge(self, name: str, version: int, counts: list[int], rows: int,
               hits: int) -> None:
        """After a lookup of ``rows`` rows (``hits`` of them hits), at the end of a window
        of lookups: bypass the version or stop bypassing it (with the lock held)."""
        looked = counts[_HIT] + counts[_MISS]
        window = self._window.get((name, version))
        if window is None:  # the first window (or the first after a release) began with
            # this lookup, not with the version's lifetime counts
            window = self._window[(name, version)] = [looked - rows, counts[_HIT] - hits]
        bypassed = (name, version) in self._bypassed
        # bypassed: a window of 128 sampled lookups (~8,192 requests); at the default
        # minimum of 1 %, two hits in a window bring every lookup back
        size = looked - window[0]
        if size < (_SAMPLED_WINDOW if bypassed else _WINDOW):
            return
        rate = (counts[_HIT] - window[1]) / size
        window[0], window[1] = looked, counts[_HIT]
        bypass = rate < self.min_hit_rate
        if bypass and bypassed:  # another 64th of the bodies next: hot requests
            self._salt = (self._salt + 1) % _SAMPLE  # outside this one are seen too
        if bypass == bypassed:
            return
        if bypass:
            self._bypassed.add((name, version))
            _logger.info("response cache: %s version %d hit %.2f %% of its last %d rows "
                         "(minimum %.2f %%): looking up one request in %d until they hit "
                         "again", name, version, 100 * rate, size, 100 * self.min_hit_rate,
                         _SAMPLE)
        else:
            self._bypassed.discard((name, version))
            _logger.info("response cache: %s version %d hits again (%.2f %% of the last "
                         "%d rows looked up): looking up every request", name, version,
                         100 * rate, size)

    def bypassed(self, name: str, version: int) -> bool:
        """Whether the version's lookups are sampled (its rows hit too rarely)."""
        return (name, version) in self._bypassed

    @property
    def size(self) -> int:
        """The bytes held, as the bound counts them (the doorkeeper's included)."""
        return self._bytes + (self.max_bytes - self._room)

    def __len__(self) -> int:
        return len(self._table)

    def get(self, name: str, version: int, keys: Sequence[bytes]
            ) -> tuple[list[tuple[Any, ...] | None], _Meta | None]:
        """Each key's output row (``None``: a miss; hits become most recently used) and the
        version's output description (names, kinds, row shapes)."""
        loads = marshal.loads
        with self._lock:
            table = self._table
            entries = [table.get((name, version, key)) for key in keys]
            hits = len(entries) - entries.count(None)
            meta = self._meta.get((name, version))
            counts = self._counters(name, version)
            if hits and meta is None:  # cannot be (dropped together): treat as misses
                hits = 0
            counts[_HIT] += hits
            counts[_MISS] += len(keys) - hits
            if self.min_hit_rate:
                self._judge(name, version, counts, len(keys), hits)
            if not hits:
                return [None] * len(keys), meta
            found: list[tuple[Any, ...] | None] = []
            for key, entry in zip(keys, entries, strict=True):
                if entry is None:
                    found.append(None)
                else:
                    table.move_to_end((name, version, key))
                    found.append(loads(entry))
        return found, meta

    def put(self, name: str, version: int, keys: Sequence[bytes],
            outputs: dict[str, list[Any]], kinds: dict[str, str],
            shapes: dict[str, tuple[int, ...]]) -> None:
        """Store one answer's rows (``outputs[col][i]`` is the answer to ``keys[i]``); with
        the doorkeeper, only those that missed before."""
        names = tuple(outputs)
        cols = [outputs[n] for n in names]
        index: Sequence[int] = range(len(keys))
        door = self._door
        # the doorkeeper guards a full table (as W-TinyLFU's admission: a row stored in
        # free room evicts nothing, so it costs no other row its place) and a bypassed
        # version (its rows hardly repeat: a probe instead of a store per sampled row);
        # read without the lock: a race only changes what is stored
        if door is not None and (self._full or (name, version) in self._bypassed):
            index = [i for i in index if door.seen(keys[i])]
            if len(index) < len(keys):
                with self._lock:
                    self._counters(name, version)[_SKIP] += len(keys) - len(index)
                if not index:
                    return
        # a column of a numeric or string numpy kind came from tolist(): plain Python values;
        # the others (object, datetime, no kind) are checked, since marshal would write a
        # numpy scalar (a buffer) as its bytes, and refuses a datetime or a Decimal
        unsure = [c for n, c in zip(names, cols, strict=True)
                  if kinds.get(n, "O")[:1] not in _TOLIST_PLAIN]
        blobs: list[tuple[int, bytes]] = []
        dumps = marshal.dumps
        for i in index:
            if unsure and not all(_plain(c[i]) for c in unsure):
                continue  # not stored: answered by the model each time
            try:
                blobs.append((i, dumps(tuple([c[i] for c in cols]))))
            except ValueError:  # cannot be after the checks; never fail an answer for it
                continue
        room = self._room
        with self._lock:
            meta = self._meta.get((name, version))
            if meta is None or meta[0] != names or meta[1] != kinds or meta[2] != shapes:
                if meta is not None:  # answers of another shape (output dtype, say): the
                    # rows stored are described by one meta per version, so drop them
                    self._drop_locked(lambda k: k[0] == name and k[1] == version)
                self._meta[(name, version)] = (names, dict(kinds), dict(shapes))
            table = self._table
            for i, blob in blobs:
                key = keys[i]
                size = _entry_size(key, blob)
                if size > room:
                    continue
                full = (name, version, key)
                old = table.pop(full, None)
                if old is not None:
                    self._bytes -= _entry_size(key, old)
                while self._bytes + size > room:  # room first: never over
                    (ename, eversion, ekey), eblob = table.popitem(last=False)
                    self._bytes -= _entry_size(ekey, eblob)
                    self._counters(ename, eversion)[_EVICT] += 1
                    self._full = True
                table[full] = blob
                self._bytes += size

    def _drop_locked(self, match: Any) -> dict[tuple[str, int], int]:
        dropped: dict[tuple[str, int], int] = {}
        for full in [k for k in self._table if match(k)]:
            self._bytes -= _entry_size(full[2], self._table.pop(full))
            dropped[(full[0], full[1])] = dropped.get((full[0], full[1]), 0) + 1
        if dropped:  # room again: stored rows evict nothing until it is filled
            self._full = False
        return dropped

    def invalidate(self, name: str, version: int | None = None) -> int:
        """Drop the entries of ``name`` (of one ``version``, or of all); return how many."""
        with self._lock:
            dropped = self._drop_locked(
                lambda k: k[0] == name and (version is None or k[1] == version))
            for key in [k for k in self._meta
                        if k[0] == name and (version is None or k[1] == version)]:
                del self._meta[key]
            if version is not None:  # a released version: its verdict goes with it
                self._window.pop((name, version), None)
                self._bypassed.discard((name, version))
            for (dname, dversion), n in dropped.items():
                self._counters(dname, dversion)[_DROP] += n
        return sum(dropped.values())


_FAMILIES = {
    "hit": ("reprise_cache_hits", "Rows answered from the response cache."),
    "miss": ("reprise_cache_misses", "Rows looked up in the response cache and computed by "
             "the model."),
    "evict": ("reprise_cache_evictions", "Entries evicted to keep the response cache within "
              "its bound (least recently used first)."),
    "drop": ("reprise_cache_invalidations", "Entries dropped because the versions a model "
             "answers with changed."),
    "skip": ("reprise_cache_unadmitted", "Rows computed and not stored: their first miss "
             "(once the cache is full, or while its version is bypassed, the doorkeeper stores "
             "a row when it misses again)."),
    "bypass": ("reprise_cache_bypasses", "Rows answered by the model without a lookup: "
               "their version hit less often than the minimum hit rate (one request in 64 "
               "is still looked up)."),
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
            size, entries = cache.size, len(cache._table)
            bypassed = set(cache._bypassed)
        families = {what: CounterMetricFamily(name, text, labels=["model", "version"])
                    for what, (name, text) in _FAMILIES.items()}
        for (name, version), ns in sorted(counts.items()):
            for what, n in zip(_WHAT, ns, strict=True):
                if n:
                    families[what].add_metric([name, str(version)], n)
        yield from families.values()
        gauge = GaugeMetricFamily("reprise_cache_bypassed", "1 while a version's rows hit "
                                  "less often than the minimum hit rate and only one request "
                                  "in 64 is looked up.", labels=["model", "version"])
        for name, version in sorted(counts):
            gauge.add_metric([name, str(version)], int((name, version) in bypassed))
        yield gauge
        yield GaugeMetricFamily("reprise_cache_bytes", "Bytes the response cache holds "
                                "(counted as its bound counts them, its doorkeeper's "
                                "included).", value=size)
        yield GaugeMetricFamily("reprise_cache_max_bytes", "The response cache's bound.",
                                value=cache.max_bytes)
        yield GaugeMetricFamily("reprise_cache_entries", "Rows in the response cache.",
                                value=entries)
