"""Per-column profilers (boolean, temporal, numeric, text): each folds batches into
sketches and writes its part of the profile as JSON-safe values.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from reprise.data import _sketches
from reprise.data._sketches import (
    _FEW_VALUES,
    FINE_BINS,
    _Distinct,
    _FineHistogram,
    _RowSample,
    _TopCounts,
)
from reprise.data._values import (
    _CHUNK,
    _Array,
    _char_lengths,
    _float64_values,
    _hash_strings,
    _hash_values,
    _int64_values,
    _is_temporal,
    _is_text,
)

QUANTILES = (0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99)


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
        self.distinct = _Distinct(_sketches.DISTINCT_CAP)
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
        self.distinct = _Distinct(_sketches.DISTINCT_CAP)
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


class _TextColumn(_Column):
    """Strings and dictionary-encoded (categorical) columns: top values, distinct, lengths."""

    def __init__(self, t: pa.DataType, *, top_k: int) -> None:
        super().__init__(t)
        self.kind = "categorical" if pa.types.is_dictionary(t) else "string"
        self.text = _is_text(t.value_type if pa.types.is_dictionary(t) else t)
        self.top_k = top_k
        self.distinct = _Distinct(_sketches.DISTINCT_CAP)
        self.top = _TopCounts(_sketches.DISTINCT_CAP, max(_sketches.MG_CAPACITY, 10 * top_k))
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
