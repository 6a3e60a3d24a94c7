"""Per-column profilers (boolean, temporal, numeric, text): each folds batches into
sketches and writes its part of the profile as JSON-safe values.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from reprise.data import _sketches
from reprise.data._sketches import (
    _FEW_VALUES,
    _BatchRows,
    _count_keys,
    _Distinct,
    _FineHistogram,
    _IntegerGrid,
    _Sample,
    _TopCounts,
)
from reprise.data._values import (
    _CHUNK,
    _Array,
    _arrow_mask,
    _arrow_numbers,
    _char_lengths,
    _float64_values,
    _hash_strings,
    _hash_values,
    _int64_values,
    _integer_values,
    _is_temporal,
    _is_text,
    _numpy,
    _valid_mask,
)

QUANTILES = (0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99)
_Q = np.array(QUANTILES)
_I64 = 1 << 63


def _new_column(t: pa.DataType, *, bins: int, top_k: int, sample_size: int) -> _Column:
    if pa.types.is_boolean(t):
        return _BooleanColumn(t)
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t):
        return _NumericColumn(t, bins=bins, sample_size=sample_size)
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
    sampled = False  # whether update() needs the rows' sampling priorities

    def __init__(self, t: pa.DataType) -> None:
        self.type = t
        self.count = 0
        self.nulls = 0

    def update(self, arr: pa.Array, rows: _BatchRows | None) -> None:
        """Fold in a batch's values; ``rows`` are its rows' sampling priorities
        (given to columns whose ``sampled`` is true)."""
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

    def update(self, arr: pa.Array, rows: _BatchRows | None) -> None:
        super().update(arr, rows)
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

    def update(self, arr: pa.Array, rows: _BatchRows | None) -> None:
        super().update(arr, rows)
        if arr.null_count == len(arr):
            return
        ints = _int64_values(arr.drop_null() if arr.null_count else arr)
        lo, hi = int(ints.min()), int(ints.max())
        self.distinct.add_integers(ints, lo, hi)
        self.lo = lo if self.lo is None else min(lo, self.lo)
        self.hi = hi if self.hi is None else max(hi, self.hi)

    def result(self) -> dict[str, Any]:
        d, exact = self.distinct.estimate(self.count)
        return {**super().result(), "distinct": d, "distinct_exact": exact,
                "min": _temporal_text(self.lo, self.type), "max": _temporal_text(self.hi, self.type)}


def _temporal_text(v: int | None, t: pa.DataType) -> str | None:
    if v is None:
        return None
    try:
        raw = np.array([v], dtype=np.int32 if t.bit_width == 32 else np.int64)
        obj = _arrow_numbers(raw).view(t)[0].as_py()
    except (ValueError, OverflowError, pa.ArrowException):
        return str(v)  # outside what Python's datetime can hold: show the raw count
    return str(obj.isoformat()) if hasattr(obj, "isoformat") else str(obj)


class _NumericColumn(_Column):
    """Integers, floats and decimals (as float64): moments, range, quantiles, histogram.

    Integers stay integers throughout (int64, or uint64 for unsigned types): min, max,
    quantiles and histogram edges are exact at any magnitude, and the moments are taken
    of each value's distance from the first one seen, so that a column of large IDs
    close together (1.5e18 + i) keeps its spread, which float64 values would round away.
    """

    kind = "numeric"
    sampled = True

    def __init__(self, t: pa.DataType, *, bins: int, sample_size: int) -> None:
        super().__init__(t)
        self.integer = pa.types.is_integer(t)
        self.bins = bins
        self.k = sample_size
        self.nan = self.inf = 0
        self.n, self.mean, self.m2 = 0, 0.0, 0.0  # finite values (minus ref), Chan et al.
        self.ref = 0  # integers: the first value seen; the moments are of value - ref
        self.lo: float | int | None = None
        self.hi: float | int | None = None
        self.distinct = _Distinct(_sketches.DISTINCT_CAP)
        self.sample = _Sample(sample_size)
        # Until a column has more than k values its sample holds them all, and the
        # distinct count and the histogram are read off the sample at the end; past k
        # ("spilled"), what the sample held goes into the distinct sketch and a fine grid
        # of counts, which then take every batch. A table of many short columns thus
        # hashes nothing and keeps one copy of its values.
        self.spilled = False
        self.infinities: set[float] = set()  # seen before spilling (not in the sample)
        self.grid: _FineHistogram | _IntegerGrid | None = None

    def update(self, arr: pa.Array, rows: _BatchRows | None) -> None:
        assert rows is not None
        if self.integer:
            self._update_integers(arr, rows)
        else:
            self._update_floats(arr, rows)

    def _update_integers(self, arr: pa.Array, rows: _BatchRows) -> None:
        n, nulls = len(arr), arr.null_count
        self.nulls += nulls
        self.count += n - nulls
        if nulls == n:
            self.sample.missed()
            return
        x, valid = _integer_values(arr)
        lo, hi = int(x.min()), int(x.max())
        if self.lo is None:
            self.ref = int(x[0])
        self._range(lo, hi)
        self._summarise_integers(x, lo, hi)
        self._fold(x, rows, valid, lambda: self.distinct.add_integers(x, lo, hi))

    def _update_floats(self, arr: pa.Array, rows: _BatchRows) -> None:
        n, nulls = len(arr), arr.null_count
        xf = _float64_values(arr)  # NaN where null
        finite: _Array | None = None  # mask of finite values (None: every row)
        present: _Array | None = None  # mask of non-null, non-NaN values (None: every row)
        nan = inf = 0
        with np.errstate(invalid="ignore"):
            lo, hi = (float(xf.min()), float(xf.max())) if n else (0.0, 0.0)
        if nulls or not (math.isfinite(lo) and math.isfinite(hi)):  # NaN would be min/max
            finite = np.isfinite(xf)
            n_fin = int(np.count_nonzero(finite))
            present = finite
            if n_fin < n - nulls:  # NaN or infinities beyond the nulls
                present = ~np.isnan(xf)
                nan = n - nulls - int(np.count_nonzero(present))
                inf = n - nulls - nan - n_fin
        else:
            n_fin = n
        self.nulls += nulls + nan
        self.count += n - nulls - nan
        self.nan, self.inf = self.nan + nan, self.inf + inf
        if n_fin < n:
            self.sample.missed()  # (when some rows but not all have values, add() sees it)
        if n - nulls - nan == 0:
            return

        def add_distinct() -> None:
            self.distinct.add_numbers(xf if present is None else xf[present])

        if inf and not self.spilled:
            self.infinities.update(v for v in (math.inf, -math.inf) if bool((xf == v).any()))
        if not n_fin:
            if self.spilled:
                add_distinct()
            return
        x = xf if finite is None else xf[finite]
        if finite is not None:
            lo, hi = float(x.min()), float(x.max())
        self._range(lo, hi)
        self._summarise(x)
        self._fold(x, rows, finite, add_distinct)

    def _range(self, lo: float | int, hi: float | int) -> None:
        self.lo = lo if self.lo is None else min(lo, self.lo)
        self.hi = hi if self.hi is None else max(hi, self.hi)

    def _fold(self, x: _Array, rows: _BatchRows, valid: _Array | None,
              add_distinct: Callable[[], None]) -> None:
        """Add a batch's values (finite, non-null) to the sample, and once the column has
        more than k values, to the distinct sketch and the grid (``self.n`` counts them)."""
        assert self.lo is not None and self.hi is not None
        if not self.spilled and self.n > self.k:
            # more than k values for the first time: the sample still holds every earlier
            # one (it prunes only past 2k), so the sketch and the grid start exact
            self.spilled = True
            self.grid = _IntegerGrid(x.dtype) if self.integer else _FineHistogram()
            held = self.sample.held()
            for part in held:
                self.grid.add(part, self.lo, self.hi)  # type: ignore[arg-type]
            if held:
                before = np.concatenate(held)
                if self.integer:
                    self.distinct.add_integers(before, int(before.min()), int(before.max()))
                else:
                    self.distinct.add_numbers(before)
            if self.infinities:
                self.distinct.add_numbers(np.array(sorted(self.infinities)))
        if self.spilled:
            assert self.grid is not None
            self.grid.add(x, self.lo, self.hi)  # type: ignore[arg-type]
            add_distinct()
        self.sample.add(x, rows, valid)

    def _summarise(self, x: _Array) -> None:
        """Moments of finite floats, one cache-sized chunk at a time.

        Each chunk's mean and squared deviations (two passes, in cache) are merged with
        Chan et al.'s formula; every numpy pass over a whole batch would instead stream
        it from memory again.
        """
        tmp = np.empty(min(len(x), _CHUNK))
        with np.errstate(over="ignore", invalid="ignore"):  # |x| near 1e308: inf -> None
            for i in range(0, len(x), _CHUNK):
                c = x[i : i + _CHUNK]
                t = tmp[: len(c)]
                mean = float(c.mean())
                np.subtract(c, mean, out=t)
                self._merge_moments(len(c), mean, _sum_of_squares(t))

    def _summarise_integers(self, x: _Array, lo: int, hi: int) -> None:
        """Moments of ``x - ref``: exact differences (as int64) turned into float64."""
        ref = x.dtype.type(self.ref)
        exact = -_I64 <= lo - self.ref and hi - self.ref < _I64  # differences fit in int64
        d = np.empty(min(len(x), _CHUNK), dtype=x.dtype)
        f, t = np.empty(len(d)), np.empty(len(d))
        for i in range(0, len(x), _CHUNK):
            c = x[i : i + _CHUNK]
            m = len(c)
            if exact:
                np.subtract(c, ref, out=d[:m])  # wraps in the type: right as int64
                np.copyto(f[:m], d[:m].view(np.int64), casting="unsafe")
            else:  # a range wider than 2**63: float64 differences, rounded
                np.subtract(c, float(self.ref), out=f[:m], casting="unsafe")
            mean = float(f[:m].mean())
            np.subtract(f[:m], mean, out=t[:m])
            self._merge_moments(m, mean, _sum_of_squares(t[:m]))

    def _merge_moments(self, nb: int, mb: float, m2b: float) -> None:
        n = self.n + nb
        delta = mb - self.mean
        self.mean += delta * nb / n
        self.m2 += m2b + delta * delta * self.n * nb / n
        self.n = n

    def result(self) -> dict[str, Any]:
        # past k values the sample serves the quantiles alone: order it only where they are
        values = self.sample.values(_quantile_positions if self.spilled else None)
        if self.spilled:
            d, exact = self.distinct.estimate(self.count)
        else:  # the sample is every value: count them (-0.0 and 0.0 are one, as hashed)
            d = int(np.count_nonzero(values[1:] != values[:-1])) + int(len(values) > 0)
            d, exact = d + len(self.infinities), True
        out: dict[str, Any] = {**super().result()}
        if not self.integer:
            out.update(nan=self.nan, inf=self.inf)
        mean: float | None = None
        if self.n:
            mean = self.mean if not self.ref else float(Fraction(self.ref) + Fraction(self.mean))
        out.update(distinct=d, distinct_exact=exact, min=self.lo, max=self.hi, mean=mean,
                   std=math.sqrt(self.m2 / (self.n - 1)) if self.n > 1 else None,
                   quantiles=None, quantiles_exact=None, histogram=None)
        if self.n and self.lo is not None and self.hi is not None:
            qs = _integer_quantiles(values) if self.integer else _float_quantiles(values)
            out["quantiles"] = dict(zip(map(str, QUANTILES), qs, strict=True))
            out["quantiles_exact"] = len(values) == self.n
            out["histogram"] = self._histogram(values)
        return out

    def _histogram(self, values: _Array) -> dict[str, Any] | None:
        """``bins`` equal-width bins from min to max, counted as numpy.histogram would:
        each bin from its edge up to the next, the last one closed."""
        assert self.lo is not None and self.hi is not None
        all_values = len(values) == self.n
        if self.integer:
            lo, hi = int(self.lo), int(self.hi)
            span = hi - lo  # equal-width edges rounded up: the first integer of each bin
            iedges = [lo - (-i * span // self.bins) for i in range(self.bins + 1)]
            if all_values:
                counts = _counts_between(values, np.array(iedges[1:-1], dtype=values.dtype))
                return {"edges": iedges, "counts": counts, "exact": True}
            assert isinstance(self.grid, _IntegerGrid)
            return {"edges": iedges, "counts": self.grid.histogram(lo, hi, iedges),
                    "exact": self.grid.e == 0}
        flo, fhi = float(self.lo), float(self.hi)
        if not math.isfinite(fhi - flo):
            return None  # a range wider than float64 holds has no finite bins
        edges = _float_edges(flo, fhi, self.bins)
        if all_values or flo == fhi:
            if flo == fhi:  # every value is lo: the sample stands for all of them
                values = np.full(self.n, flo)
            counts = _counts_between(values, edges[1:-1])
            return {"edges": edges.tolist(), "counts": counts, "exact": True}
        assert isinstance(self.grid, _FineHistogram)
        return {"edges": edges.tolist(), "counts": self.grid.histogram(flo, fhi, edges),
                "exact": False}


def _sum_of_squares(t: _Array) -> float:
    """``t @ t`` without BLAS (whose threads, woken for every chunk, cost far more than
    the sum on a busy machine); squares ``t`` in place."""
    np.multiply(t, t, out=t)
    return float(t.sum())


def _float_edges(lo: float, hi: float, bins: int) -> _Array:
    """numpy.histogram's edges, or fewer where float64 has fewer than ``bins`` steps
    between lo and hi (values close together far from zero), so no bin is empty by
    rounding alone and no edge repeats."""
    if lo == hi:
        lo, hi = lo - 0.5, hi + 0.5
    edges = np.linspace(lo, hi, bins + 1)
    if not bool((edges[1:] > edges[:-1]).all()):
        edges = np.unique(edges)
        if len(edges) == 1:
            edges = np.repeat(edges, 2)
    return edges


def _counts_between(sorted_values: _Array, inner: _Array) -> list[int]:
    """How many of the sorted values fall in each bin between the inner edges."""
    at = np.searchsorted(sorted_values, inner, side="left")
    return np.diff(np.concatenate(([0], at, [len(sorted_values)]))).tolist()  # type: ignore[no-any-return]


def _positions(m: int) -> tuple[_Array, _Array, _Array]:
    """numpy.quantile's 'linear' method on m sorted values (or values in order at these
    positions): for each quantile, the index below, the one above, and the weight of the
    one above."""
    at = _Q * (m - 1)
    below = np.floor(at).astype(np.intp)
    return below, np.minimum(below + 1, m - 1), at - below


def _quantile_positions(m: int) -> _Array:
    below, above, _ = _positions(m)
    return np.unique(np.concatenate((below, above)))


def _float_quantiles(values: _Array) -> list[float]:
    below, above, t = _positions(len(values))
    a, b = values[below], values[above]
    with np.errstate(over="ignore", invalid="ignore"):
        diff = b - a  # numpy's lerp, so the values are numpy.quantile's to the bit
        q = a + diff * t
        np.subtract(b, diff * (1 - t), out=q, where=t >= 0.5)
    return q.tolist()  # type: ignore[no-any-return]


def _integer_quantiles(values: _Array) -> list[int | float]:
    """Linear quantiles of integers, computed exactly: an integer where the quantile is
    one, else the float nearest to it (never via float64 inputs, which above 2**53
    would round neighbouring values together)."""
    below, above, t = _positions(len(values))
    out: list[int | float] = []
    for i, j, w in zip(below.tolist(), above.tolist(), t.tolist(), strict=True):
        a, b = int(values[i]), int(values[j])
        exact = a + Fraction(w) * (b - a)
        out.append(int(exact) if exact.denominator == 1 else float(exact))
    return out


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
        self.few = False

    def update(self, arr: pa.Array, rows: _BatchRows | None) -> None:
        super().update(arr, rows)
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
            self.few = len(values) <= _FEW_VALUES // 2  # and the next batch likewise
            keys = _hash_strings(values)
            self.distinct.add(keys)
            self.top.add_counted(keys, _numpy(vc.field("counts")).astype(np.int64), values)
        else:  # many values: hash every row, sort the hashes once for both summaries
            h = _hash_strings(arr)
            keys, counts = _count_keys(h)
            self.distinct.add(keys, unique_sorted=True)
            self.top.add_rows(h, arr, keys, counts)

    def _few_values(self, arr: pa.Array) -> bool:
        """Whether Arrow's value counts will be faster than hashing (a guess; same result)."""
        if not self.top.exact or len(self.top.keys) > _FEW_VALUES:
            return False
        if self.few:  # the last batch had few values: so will this one, most likely
            return True
        head = arr.slice(0, 4 * _FEW_VALUES)
        return len(head) == len(arr) or len(pc.unique(head)) <= _FEW_VALUES // 2

    def _lengths(self, lengths: _Array, weights: _Array | None) -> None:
        lo, hi = int(lengths.min()), int(lengths.max())
        self.len_lo = lo if self.len_lo is None else min(lo, self.len_lo)
        self.len_hi = hi if self.len_hi is None else max(hi, self.len_hi)
        self.len_sum += int(lengths.sum() if weights is None else lengths @ weights)

    def result(self) -> dict[str, Any]:
        d, exact = self.distinct.estimate(self.count)
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
    counts = np.bincount(_numpy(idx), minlength=len(arr.dictionary))
    used = np.flatnonzero(counts)
    values = arr.dictionary.take(_arrow_numbers(used))
    if values.null_count:  # a null stored in the dictionary itself: not a value
        keep = _valid_mask(values)
        values, used = values.filter(_arrow_mask(keep)), used[keep]
    return values, counts[used].astype(np.int64)
