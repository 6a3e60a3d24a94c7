"""Fixed-size summaries behind a profile: distinct counts (exact, then KMV), top counts
(exact, then Misra-Gries), a bottom-k row sample and an exact power-of-two histogram grid.

Each one's memory is fixed by its arguments, never by the number of rows; see the
docstring of :mod:`reprise.data._profile` for what is exact and what is estimated.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from reprise.data._values import (
    _CHUNK,
    _U64,
    _Array,
    _arrow_numbers,
    _hash_numbers,
    _numpy,
    _valid_mask,
)

# Exact distinct counts and exact top counts up to DISTINCT_CAP values, then
# MG_CAPACITY Misra-Gries counters; both are read when a column's profile starts, so a
# test can lower them to reach the sketches with small data.
DISTINCT_CAP = 100_000
MG_CAPACITY = 10_000
KMV_K = 16_384  # hashes kept past DISTINCT_CAP: KMV's relative standard error is 1/sqrt(K)
FINE_BINS = 8192  # histogram grid; each grid bin is at most ~1/4096 of the range
BLOCK_ROWS = 1 << 18  # rows per block of sampling priorities (one RNG per block)


# Arrow's hash table counts fastest while a column has few values; beyond this many, hashing
# every row and sorting the hashes is faster (both are exact: only speed depends on it).
_FEW_VALUES = 4096


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


class _Distinct:
    """Distinct values as 64-bit hashes: an exact count up to k, a KMV estimate above.

    Up to k distinct hashes are kept, sorted; past k, only the :data:`KMV_K` smallest,
    whose largest gives K-Minimum-Values' estimate. Past that point a batch's hashes
    are first cut to those below the largest kept (a small fraction once many values
    have passed), and those are merged in only once they add up to KMV_K, so a column
    of millions of distinct values costs little more than hashing it.

    Integers (and dates, times...) over a range of at most :data:`_BITMAP_RANGE` are
    counted exactly on a bitmap instead, one flag per integer of the range, which costs
    a store per value rather than a hash and a sort; a wider range moves the flagged
    values into the hashes and goes on hashing, so the count is the same either way.
    """

    def __init__(self, k: int) -> None:
        self.k = k
        self.sketch_k = max(2, min(k, KMV_K))
        self.hashes: _Array = np.empty(0, dtype=_U64)  # sorted, without repeats
        self.pending: list[_Array] = []  # past k: hashes below the cut, not merged yet
        self.n_pending = 0
        self.overflowed = False
        self.dedupe_first = True  # whether Arrow's hash table should thin a batch first
        self.flags: _Array | None = None  # bitmap mode: flags[v - base] for each value v
        self.base = 0
        self.bitmap = True  # until a range too wide for it is seen
        self.seen = 0

    def add(self, h: _Array, *, unique_sorted: bool = False) -> None:
        """Add hashes (``unique_sorted``: already sorted without repeats)."""
        if self.overflowed:
            h = h[h < self.hashes[-1]]
            if len(h):
                self.pending.append(h)
                self.n_pending += len(h)
                if self.n_pending >= self.sketch_k:
                    self._merge_pending()
            return
        if not len(h):
            return
        if not unique_sorted:  # sorting: numpy's unique hashes, slower on random keys
            h = np.sort(h)
            h = h[np.concatenate(([True], h[1:] != h[:-1]))]
        if len(self.hashes):
            h = _merge_sorted(self.hashes, h)
        if len(h) > self.k:
            h, self.overflowed = h[: self.sketch_k], True
        self.hashes = h

    def _merge_pending(self) -> None:
        h = np.sort(np.concatenate(self.pending))
        h = h[np.concatenate(([True], h[1:] != h[:-1]))]
        self.hashes = _merge_sorted(self.hashes, h)[: self.sketch_k]
        self.pending, self.n_pending = [], 0

    def add_numbers(self, values: _Array) -> None:
        """Add floats (no NaN) or integers, hashing them a cache-sized chunk at a time."""
        n = len(values)
        if not n:
            return
        if self.overflowed:
            self.add(_hash_numbers(values, self.hashes[-1]))
            return
        if self.dedupe_first:  # fewer to hash and sort: same result
            values = _numpy(pc.unique(_arrow_numbers(values)))
        h = np.sort(_hash_numbers(values))
        h = h[np.concatenate(([True], h[1:] != h[:-1]))]
        # a batch mostly of repeats goes through the hash table next time (a guess from
        # this batch, which only affects speed)
        self.dedupe_first = len(h) < n // 2
        self.add(h, unique_sorted=True)

    def add_integers(self, values: _Array, lo: int, hi: int) -> None:
        """Add int64 or uint64 values whose least and greatest are ``lo`` and ``hi``."""
        self.seen += len(values)
        if self.bitmap:
            if self.flags is not None:
                lo, hi = min(lo, self.base), max(hi, self.base + len(self.flags) - 1)
            # a short column gets a bitmap only as wide as a few bytes per value, so that a
            # table of many short columns (1,000 rows, 2,000 columns) stays small
            if hi - lo < min(_BITMAP_RANGE, max(4096, 8 * self.seen)):
                if self.flags is None or (lo, hi - lo + 1) != (self.base, len(self.flags)):
                    flags = np.zeros(hi - lo + 1, dtype=bool)  # at most 1 MiB: copy to grow
                    if self.flags is not None:
                        flags[self.base - lo : self.base - lo + len(self.flags)] = self.flags
                    self.flags, self.base = flags, lo
                offsets = values - values.dtype.type(self.base)  # within the range: no wrap
                self.flags[offsets.astype(np.intp, copy=False)] = True
                return
            self.bitmap = False
            if self.flags is not None:  # the range outgrew the bitmap: hash what it holds
                held = np.flatnonzero(self.flags).astype(values.dtype)
                self.flags = None
                self.add_numbers(held + values.dtype.type(self.base))
        self.add_numbers(values)

    def estimate(self, values: int | None = None) -> tuple[int, bool]:
        """(count, exact): KMV's ``(K - 1) / u_K`` once more than k values were seen,
        never above ``values`` (how many values there were, when known)."""
        if self.flags is not None:
            return int(np.count_nonzero(self.flags)), True
        if not self.overflowed:
            return len(self.hashes), True
        if self.pending:
            self._merge_pending()
        u_k = (float(self.hashes[-1]) + 1.0) / 2.0**64
        d = round((len(self.hashes) - 1) / u_k)
        return (d if values is None else min(d, values)), False


_BITMAP_RANGE = 1 << 20  # integers counted on a bitmap while their range is this narrow


def _merge_sorted(a: _Array, b: _Array) -> _Array:
    """The union of two sorted arrays without repeats, in linear time plus a binary search
    of each of b (usually the shorter) in a: no sorting."""
    at = np.searchsorted(a, b)
    inside = at < len(a)
    new = ~inside
    new[inside] = a[at[inside]] != b[inside]
    b, at = b[new], at[new]
    out = np.empty(len(a) + len(b), dtype=a.dtype)
    dest = at + np.arange(len(b))  # where each new value lands among the merged
    out[dest] = b
    keep = np.ones(len(out), dtype=bool)
    keep[dest] = False
    out[keep] = a
    return out


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
        self._merge(keys, counts, lambda i: values.take(_arrow_numbers(i)))

    def add_rows(self, h: _Array, arr: pa.Array, keys: _Array, counts: _Array) -> None:
        """Merge a batch given as one hash per row of ``arr`` (for batches of many values),
        with its distinct hashes, sorted, and their counts (:func:`_count_keys`)."""
        floor = 0 if self.exact else _kth_largest(counts, self.capacity + 1)
        if floor > 0:  # a key new to the summary at or below floor cannot survive the merge
            keep = counts > floor
            at = np.minimum(np.searchsorted(keys, self.keys), len(keys) - 1)
            keep[at[keys[at] == self.keys]] = True
            keys, counts = keys[keep], counts[keep]

        def reps(i: _Array) -> pa.Array:
            return arr.take(_arrow_numbers(_rows_of(h, keys[i])))

        self._merge(keys, counts, reps, floor)

    def _merge(self, bkeys: _Array, bcounts: _Array, reps_of: Callable[[_Array], pa.Array],
               floor: int = 0) -> None:
        n_old = len(self.keys)
        keys = np.concatenate((self.keys, bkeys))
        if not len(keys):  # a batch whose values all fell below the summary's floor
            return
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
            if not len(keys):  # every count fell to zero: no value is frequent so far
                self.keys, self.counts, self.reps = keys, counts, None
                return
        old = src < n_old
        parts = [reps_of(src[~old] - n_old)]
        if self.reps is not None and old.any():
            parts.insert(0, self.reps.take(_arrow_numbers(src[old])))
        n_kept_old = int(np.count_nonzero(old))
        pos = np.empty(len(keys), dtype=np.int64)
        pos[old] = np.arange(n_kept_old)
        pos[~old] = n_kept_old + np.arange(len(keys) - n_kept_old)
        if len(parts) == 2 and parts[1].type != parts[0].type:
            parts[1] = parts[1].cast(parts[0].type)
        self.keys, self.counts = keys, counts
        self.reps = pa.concat_arrays(parts).take(_arrow_numbers(pos))

    def most_common(self, k: int) -> list[list[Any]]:
        if self.reps is None or not k or not len(self.keys):
            return []
        t = pa.RecordBatch.from_arrays([_arrow_numbers(self.counts), self.reps], ["c", "v"])
        t = t.sort_by([("c", "descending"), ("v", "ascending")]).slice(0, k)
        return [[_json_safe(v), int(c)] for v, c in zip(t["v"].to_pylist(),
                                                          t["c"].to_pylist(), strict=True)]


def _count_keys(h: _Array) -> tuple[_Array, _Array]:
    """The distinct values of ``h``, sorted, and how often each occurs."""
    s = np.sort(h)
    start = np.flatnonzero(np.concatenate(([True], s[1:] != s[:-1])))
    return s[start], np.diff(np.append(start, len(s)))


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
    idx = pc.index_in(_arrow_numbers(h), value_set=_arrow_numbers(wanted))
    valid = _valid_mask(idx)
    rows = np.empty(len(wanted), dtype=np.int64)
    rows[_numpy(idx.drop_null())] = np.flatnonzero(valid)
    return rows


class _Priorities:
    """Each row's sampling priority, uniform in [0, 1), and the rows a sample can still use.

    Row r's priority is the ``r % BLOCK_ROWS``-th draw of an RNG seeded by
    ``(seed, r // BLOCK_ROWS)``, so it depends on the row number alone, never on how
    the rows were cut into batches, and one draw per row serves every column: each
    column's sample holds the values of its rows of smallest priority.

    The k smallest priorities among all rows seen are tracked here once: a column with
    a value in every row so far has exactly those rows in its sample, so it takes the
    rows picked here and prunes by this threshold instead of partitioning its own pool.
    """

    def __init__(self, seed: int, k: int) -> None:
        self.seed, self.k = seed, k
        self.block = -1
        self.drawn = 0
        self.buf: _Array = np.empty(0)
        self.rng = np.random.default_rng([seed, 0])
        self.tau = 2.0  # above every priority: all rows can enter
        self.pool: list[_Array] = []
        self.pooled = 0

    def batch(self, row0: int, n: int) -> _BatchRows:
        """The priorities of rows ``row0 .. row0 + n - 1`` (asked for in row order) and the
        ones among them below the threshold, which is then updated."""
        prio = self._draw(row0, n)
        tau = self.tau
        picked = None if tau > 1.0 else np.flatnonzero(prio < tau)
        prio_picked = prio if picked is None else prio[picked]
        self.pool.append(prio_picked)
        self.pooled += len(prio_picked)
        if self.pooled > 2 * self.k:
            pool = np.concatenate(self.pool)
            self.tau = float(np.partition(pool, self.k - 1)[self.k - 1])
            self.pool = [pool[pool <= self.tau]]
            self.pooled = len(self.pool[0])
        return _BatchRows(prio, tau, picked, prio_picked, self.tau, self)

    def final_tau(self) -> float:
        """The k-th smallest priority of all rows (2.0 when there are at most k rows)."""
        if self.pooled > self.k:
            pool = np.concatenate(self.pool)
            self.tau = float(np.partition(pool, self.k - 1)[self.k - 1])
            self.pool = [pool[pool <= self.tau]]
            self.pooled = len(self.pool[0])
        return self.tau

    def _draw(self, row0: int, n: int) -> _Array:
        out = np.empty(n)
        pos = 0
        while pos < n:
            b, off = divmod(row0 + pos, BLOCK_ROWS)
            take = min(n - pos, BLOCK_ROWS - off)
            if b != self.block:
                self.block, self.drawn = b, 0
                self.rng = np.random.default_rng([self.seed, b])
                if not len(self.buf):
                    self.buf = np.empty(BLOCK_ROWS)
            if off + take > self.drawn:  # a Generator's draws continue where they stopped
                self.rng.random(out=self.buf[self.drawn : off + take])
                self.drawn = off + take
            out[pos : pos + take] = self.buf[off : off + take]
            pos += take
        return out


class _BatchRows:
    """A batch's row priorities, with the rows picked by the shared threshold ``tau_in``
    (None: all) and the threshold after them, ``tau_out``."""

    __slots__ = ("picked", "prio", "prio_picked", "source", "tau_in", "tau_out")

    def __init__(self, prio: _Array, tau_in: float, picked: _Array | None,
                 prio_picked: _Array, tau_out: float, source: _Priorities) -> None:
        self.prio, self.tau_in, self.picked = prio, tau_in, picked
        self.prio_picked, self.tau_out, self.source = prio_picked, tau_out, source


class _Sample:
    """A uniform sample of up to k values: those of the k rows of smallest priority.

    Only priorities below tau (the k-th smallest among the values pooled at the last
    pruning) can still enter, so once a column has many rows, a batch adds about
    ``k * rows_in_batch / rows_so_far`` values. The pool holds at most ``2k`` values
    between prunings. While a column has at most k values the sample is all of them.
    A column with a value in every row so far follows the table's threshold
    (:class:`_Priorities`), which picks its rows and prunes it by a comparison.
    """

    def __init__(self, k: int) -> None:
        self.k = k
        self.tau = 2.0  # above every priority: all values enter
        self.vals: list[_Array] = []
        self.prios: list[_Array] = []
        self.pooled = 0
        self.every_row = True  # a value in every row so far: the table's rows and tau
        self.table: _Priorities | None = None

    def add(self, values: _Array, rows: _BatchRows, valid: _Array | None) -> None:
        """Pool a batch's ``values``: one per row, or one per row where ``valid`` is true."""
        self.table = rows.source
        if valid is not None:
            self.every_row = False
        if self.every_row and self.tau == rows.tau_in:
            values = values if rows.picked is None else values[rows.picked]
            prio = rows.prio_picked
        else:
            self.every_row = False
            prio = rows.prio if valid is None else rows.prio[valid]
            if self.tau <= 1.0:
                keep = prio < self.tau
                values, prio = values[keep], prio[keep]
        # a view of the batch's buffer is kept as it is: it holds no more than the values
        # (pruning copies what it keeps), and a copy would double them meanwhile
        if len(values):
            self.vals.append(values)
            self.prios.append(prio)
            self.pooled += len(values)
        if self.every_row:
            if rows.tau_out < self.tau:  # the table pruned: so do the same rows here
                self._keep(rows.tau_out)
        elif self.pooled > 2 * self.k:
            self._prune()

    def missed(self) -> None:
        """A batch gave this column no value: its rows are no longer all the table's."""
        self.every_row = False

    def held(self) -> list[_Array]:
        """Every value pooled so far, unpruned (only meaningful while they are all)."""
        return self.vals

    def _keep(self, tau: float) -> None:
        self.tau = tau
        prios = np.concatenate(self.prios) if len(self.prios) > 1 else self.prios[0]
        keep = prios <= tau
        if bool(keep.all()):
            return
        vals = np.concatenate(self.vals) if len(self.vals) > 1 else self.vals[0]
        self.vals, self.prios = [vals[keep]], [prios[keep]]
        self.pooled = len(self.vals[0])

    def _prune(self) -> None:
        vals = np.concatenate(self.vals) if len(self.vals) > 1 else self.vals[0]
        prios = np.concatenate(self.prios) if len(self.prios) > 1 else self.prios[0]
        if len(vals) > self.k:
            keep = np.argpartition(prios, self.k - 1)[: self.k]
            vals, prios = vals[keep], prios[keep]
            self.tau = float(prios.max())
        self.vals, self.prios, self.pooled = [vals], [prios], len(vals)

    def values(self, at: Callable[[int], _Array] | None = None) -> _Array:
        """The sample, sorted; or, given ``at`` (the positions needed, from the sample's
        size), only in order at those positions, which is quicker (the pool is let go:
        call once)."""
        if not self.vals:
            return np.empty(0)
        if self.every_row and self.table is not None:
            self._keep(self.table.final_tau())
        else:
            self._prune()
        vals = np.concatenate(self.vals) if len(self.vals) > 1 else self.vals[0]
        self.vals, self.prios = [], []
        if at is not None:
            return np.partition(vals, at(len(vals)))
        if vals.base is not None:  # a view of a batch: sort a copy
            return np.sort(vals)
        vals.sort()
        return vals


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

    def histogram(self, lo: float, hi: float, edges: _Array) -> list[int]:
        """Counts between ``edges`` (over [lo, hi], increasing); grid bins that straddle
        an edge are split pro rata."""
        assert self.e is not None
        used = int(np.flatnonzero(self.counts)[-1]) + 1
        # offset and steps scaled apart: an offset above 2**53 is not exact as a float
        grid = math.ldexp(self.offset, self.e) + np.ldexp(np.arange(used + 1.0), self.e)
        np.clip(grid, lo, hi, out=grid)
        return _split_counts(self.counts[:used], grid, edges[1:-1])


class _IntegerGrid:
    """:class:`_FineHistogram` for integers: grid bin i holds the integers of
    ``[(offset + i) * 2**e, (offset + i + 1) * 2**e)``, found by an arithmetic shift, so
    binning is exact at any magnitude (int64 and uint64 alike, nothing passes through
    float64). With ``e == 0`` each grid bin is one integer and histograms read off the
    grid are exact.
    """

    def __init__(self, dtype: np.dtype[Any]) -> None:
        self.type = dtype.type
        self.e: int | None = None
        self.offset = 0
        self.counts: _Array = np.zeros(FINE_BINS, dtype=np.int64)

    def regrid(self, lo: int, hi: int) -> None:
        """Widen the grid to cover [lo, hi] (a range that only ever grows)."""
        e = _integer_grid_exponent(lo, hi)
        e = e if self.e is None else max(e, self.e)
        offset = lo >> e
        if self.e is not None and (e, offset) != (self.e, self.offset):
            nz = np.flatnonzero(self.counts)
            t = self.type  # bin numbers of values held: within the column's type
            moved = ((nz.astype(t) + t(self.offset)) >> t(e - self.e)) - t(offset)
            counts = np.zeros(FINE_BINS, dtype=np.int64)
            np.add.at(counts, moved.astype(np.intp), self.counts[nz])
            self.counts = counts
        self.e, self.offset = e, offset

    def add(self, x: _Array, lo: int, hi: int) -> None:
        """Count ``x`` (of this grid's type), all within [lo, hi]."""
        self.regrid(lo, hi)
        t = self.type
        assert self.e is not None
        for i in range(0, len(x), _CHUNK):
            idx = (x[i : i + _CHUNK] >> t(self.e)) - t(self.offset)
            self.counts += np.bincount(idx.astype(np.intp), minlength=FINE_BINS)

    def histogram(self, lo: int, hi: int, edges: list[int]) -> list[int]:
        """Counts between the integer ``edges`` (each bin from its edge up to the next,
        the last one closed); grid bins that straddle an edge are split pro rata."""
        assert self.e is not None
        used = int(np.flatnonzero(self.counts)[-1]) + 1
        # where each grid bin starts, relative to lo (exact below 2**53: with e == 0, the
        # integers themselves); the first starts at or below lo, clipped to the range
        first = (self.offset << self.e) - lo
        starts = float(first) + np.ldexp(np.arange(used + 1.0), self.e)
        np.clip(starts, 0.0, float(hi - lo + 1), out=starts)
        inner = np.array([float(v - lo) for v in edges[1:-1]])
        return _split_counts(self.counts[:used], starts, inner)


def _split_counts(counts: _Array, bounds: _Array, inner: _Array) -> list[int]:
    """Counts between the inner edges, given counts between increasing ``bounds``,
    each spread evenly across its interval."""
    cdf = np.concatenate(([0], np.cumsum(counts)))
    at = np.rint(np.interp(inner, bounds, cdf)).astype(np.int64)
    return np.diff(np.concatenate(([0], at, [cdf[-1]]))).tolist()  # type: ignore[no-any-return]


def _integer_grid_exponent(lo: int, hi: int) -> int:
    """The smallest e >= 0 whose grid spans the integers [lo, hi] in FINE_BINS bins."""
    e = max(0, (hi - lo).bit_length() - FINE_BINS.bit_length() + 1)
    while e > 0 and (hi >> (e - 1)) - (lo >> (e - 1)) < FINE_BINS:
        e -= 1
    while (hi >> e) - (lo >> e) >= FINE_BINS:
        e += 1
    return e


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
