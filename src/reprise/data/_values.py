"""Column values as numpy arrays, and their 64-bit hashes for distinct counts and samples.

Numbers hash through SplitMix64's finaliser (a bijection, so exact counts of numbers have
no collisions); strings hash by their UTF-8 bytes, eight at a time, in numpy.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_CHUNK = 1 << 15  # values per numpy pass where several passes follow: they stay in cache
_U64 = np.uint64
_Array = np.ndarray[Any, Any]


def _arrow_mask(mask: _Array) -> pa.Array:
    """A numpy bool array as an Arrow boolean array. Built from its bits rather than by
    ``pa.array``, which imports pandas (a third of a second) the first time it runs."""
    bits = pa.py_buffer(np.packbits(mask, bitorder="little"))
    return pa.Array.from_buffers(pa.bool_(), len(mask), [None, bits])


def _arrow_numbers(values: _Array) -> pa.Array:
    """A numpy array of numbers as an Arrow array, without ``pa.array`` (see _arrow_mask)."""
    values = np.ascontiguousarray(values)
    return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), len(values),
                                 [None, pa.py_buffer(values)])


def _is_text(t: pa.DataType) -> bool:
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t)
                or pa.types.is_string_view(t))


def _is_temporal(t: pa.DataType) -> bool:
    """Dates, times, timestamps and durations: one integer each (intervals are not)."""
    return bool(pa.types.is_temporal(t) and not pa.types.is_interval(t))


def _int64_values(arr: pa.Array) -> _Array:
    width = pa.int32() if arr.type.bit_width == 32 else pa.int64()
    return np.asarray(_numpy(arr.view(width)), dtype=np.int64)


_NUMPY_TYPES = {t.id: np.dtype(d) for t, d in (
    (pa.int8(), np.int8), (pa.int16(), np.int16), (pa.int32(), np.int32), (pa.int64(), np.int64),
    (pa.uint8(), np.uint8), (pa.uint16(), np.uint16), (pa.uint32(), np.uint32),
    (pa.uint64(), np.uint64), (pa.float16(), np.float16), (pa.float32(), np.float32),
    (pa.float64(), np.float64))}


def _numpy(arr: pa.Array) -> _Array:
    """A numeric Arrow array's values as a numpy view of its buffer (what a null slot
    holds is unspecified). ``Array.to_numpy`` would do the same but first imports pandas
    (a third of a second, once) to check what it was given."""
    dtype = _NUMPY_TYPES[arr.type.id]
    return np.frombuffer(arr.buffers()[1], dtype=dtype, count=len(arr),
                         offset=arr.offset * dtype.itemsize)


def _valid_mask(arr: pa.Array) -> _Array:
    """Which rows of ``arr`` hold a value, read off its validity bitmap."""
    bitmap = arr.buffers()[0]
    if bitmap is None or not arr.null_count:
        return np.ones(len(arr), dtype=bool)
    bits = np.unpackbits(np.frombuffer(bitmap, dtype=np.uint8), bitorder="little",
                         count=arr.offset + len(arr))
    return bits[arr.offset :].view(bool)


def _integer_values(arr: pa.Array) -> tuple[_Array, _Array | None]:
    """The non-null values of an integer array as int64 (uint64 for unsigned types, so
    that every value is exact), and the mask of the rows holding them (None: all rows)."""
    dtype = np.uint64 if pa.types.is_unsigned_integer(arr.type) else np.int64
    if not arr.null_count:
        return np.asarray(_numpy(arr), dtype=dtype), None
    return np.asarray(_numpy(arr.drop_null()), dtype=dtype), _valid_mask(arr)


def _float64_values(arr: pa.Array) -> _Array:
    """The values as float64, NaN where null (zero-copy for a float64 array without nulls).

    Read from the buffers: Arrow's own conversion of an array with nulls goes through
    pandas, whose import costs a third of a second.
    """
    if arr.null_count == 0 and (pa.types.is_integer(arr.type) or pa.types.is_floating(arr.type)):
        return np.asarray(_numpy(arr), dtype=np.float64)  # numpy converts faster than Arrow
    if not pa.types.is_float64(arr.type):
        arr = arr.cast(pa.float64())
    x = np.frombuffer(arr.buffers()[1], dtype=np.float64, count=len(arr), offset=8 * arr.offset)
    x = x.copy()
    if arr.null_count:
        x[~_valid_mask(arr)] = np.nan
    return x


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
        if pa.types.is_boolean(t):
            values = values.cast(pa.int8())
        return _hash_numbers(np.asarray(_numpy(values), dtype=np.int64))
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
    width = int(off[1] - off[0]) if len(off) > 1 else 0
    if width and end - base == width * (len(off) - 1) and bool((np.diff(off) == width).all()):
        return _hash_same_width(arr, base, width)
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


def _hash_same_width(arr: pa.Array, base: int, width: int) -> _Array:
    """:func:`_hash_string_chunk` for strings all ``width`` bytes long (IDs, codes): their
    bytes form a (rows, width) block, folded one column of words at a time, without the
    gathers that strings of any length need. The hashes are the same."""
    n, nw = (len(arr), (width + 7) // 8)
    block = np.zeros((n, 8 * nw), dtype=np.uint8)  # zero past each string: its masked words
    block[:, :width] = np.frombuffer(arr.buffers()[2], dtype=np.uint8, count=n * width,
                                     offset=base).reshape(n, width)
    words = block.view("<u8")
    h = np.full(n, width, dtype=_U64)
    h *= _GOLDEN  # (on the array: wraps silently, as for strings of any width)
    for k in range(nw):
        h ^= words[:, k]
        h *= _M1
        h ^= h >> _S27
    return _mix64(h)


def _char_lengths(arr: pa.Array) -> _Array:
    """Length in characters of each (non-null) string: byte lengths when all are ASCII."""
    if pa.types.is_string_view(arr.type):
        return _numpy(pc.utf8_length(arr))
    off = _string_offsets(arr)
    base, end = int(off[0]), int(off[-1])
    data = np.frombuffer(arr.buffers()[2], dtype=np.uint8, count=end - base, offset=base) \
        if end > base else np.zeros(1, dtype=np.uint8)
    if int(data.max()) < 0x80:
        return np.diff(off)
    return _numpy(pc.utf8_length(arr))


# Bytes that can appear in a number as ``_formats._NUMBER`` spells one ([0-9+-.eE] and
# whitespace) or in a blank value (whitespace, which beyond ASCII is multi-byte).
_NUMBER_OR_BLANK = np.zeros(256, dtype=bool)
_NUMBER_OR_BLANK[: ord(" ") + 1] = True
_NUMBER_OR_BLANK[0x80:] = True
_NUMBER_OR_BLANK[np.frombuffer(b"0123456789+-.eE", dtype=np.uint8)] = True


def _maybe_number_or_blank(arr: pa.Array) -> _Array:
    """For each (non-null) string, whether it might be a number or blank: false for every
    string with a byte among its first eight that neither can hold, which settles most
    text (IDs, names, categories) without a regex. The first byte alone settles most;
    the other seven are looked at only when that leaves half the strings or more."""
    if pa.types.is_string_view(arr.type):
        arr = arr.cast(pa.large_string())
    off = _string_offsets(arr)
    data = np.frombuffer(arr.buffers()[2], dtype=np.uint8) if arr.buffers()[2] else \
        np.zeros(0, dtype=np.uint8)
    lens = np.diff(off)
    maybe: _Array = lens == 0  # blank
    filled = np.flatnonzero(~maybe)
    maybe[filled] = _NUMBER_OR_BLANK[data[off[:-1][filled]]]
    if 2 * np.count_nonzero(maybe) < len(arr):
        return maybe  # the caller needs no more: numbers cannot be the majority
    rows = np.flatnonzero(maybe & (lens > 1))
    if len(rows):
        starts = off[:-1][rows].astype(np.intp)
        span = np.minimum(lens[rows], 8)
        ok = np.ones(len(rows), dtype=bool)
        for j in range(1, 8):  # byte j of each string that has one
            has = span > j
            at = np.flatnonzero(has & ok)
            ok[at] = _NUMBER_OR_BLANK[data[starts[at] + j]]
        maybe[rows] = ok
    return maybe
