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

from reprise.data._values import _U64, _Array, _hash_numbers

# Exact distinct counts and exact top counts up to DISTINCT_CAP values, then
# MG_CAPACITY Misra-Gries counters; both are read when a column's profile starts, so a
# test can lower them to reach the sketches with small data.
DISTINCT_CAP = 100_000
MG_CAPACITY = 10_000
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
