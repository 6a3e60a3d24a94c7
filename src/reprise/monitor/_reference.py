"""The drift reference: bins fixed by a reference dataset, its summaries, and thresholds
learned from its own chunks.

:func:`fit_reference` reads the reference twice, a batch at a time, so it need not fit
in memory:

1. per numeric column, the exact min and max and a uniform sample of ``sample_size``
   values (the rows with the smallest random priorities, drawn from one seeded stream, so
   the same rows give the same sample however they are cut into batches); per text
   column, label counts (kept to the ``8 × max_categories`` most frequent while counting);
2. the counts of every column on the bins chosen from pass 1, in ``chunks`` contiguous
   chunks of rows, as NannyML chunks its reference.

Thresholds (NannyML's habit, done on summaries): each chunk is compared with the rest of
the reference (the whole minus the chunk: summaries subtract exactly), and the
statistic's mean and standard deviation over the chunks are kept. A window is then judged
against ``mean + k·std``. Those chunk statistics are measured at the chunk's size; a
distance between samples shrinks like ``1/sqrt(n)`` when nothing changed, so for a window
smaller than a chunk the threshold is scaled up by ``sqrt(n_chunk / n_window)``
(effective sizes ``n1 n2 / (n1 + n2)``); for a larger window it is kept as is, which errs
toward no alarm.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import pyarrow as pa

from reprise.core._nulls import resolve_na_values
from reprise.core.errors import ConfigError, UserError
from reprise.monitor._parallel import each
from reprise.monitor._stats import js_distance, wasserstein_binned
from reprise.monitor._summary import (
    CategoricalSpec,
    CategoricalSummary,
    NumericSpec,
    NumericSummary,
    numeric_spec,
    with_coarse,
)
from reprise.monitor._values import as_value_set, column_kind, labels_of, numbers_of

__all__ = ["FORMAT_VERSION", "Reference", "Threshold", "fit_reference"]

FORMAT_VERSION = 1
Summary = NumericSummary | CategoricalSummary
Batches = Callable[[], Iterable[Any]]


@dataclass(frozen=True)
class Threshold:
    """What the reference's chunks say about one column's distance statistic."""

    statistic: str  # wasserstein (normalised by the reference std) | js
    mean: float
    std: float
    chunk_rows: int  # values per chunk (of this column)
    chunks: int

    def limit(self, k: float, window_present: int, reference_present: int) -> float:
        """``mean + k·std``, scaled to a window smaller than a chunk (module docstring)."""
        base = self.mean + k * self.std
        if window_present <= 0 or self.chunk_rows <= 0:
            return base
        rest = max(reference_present - self.chunk_rows, 1)
        n_chunk = self.chunk_rows * rest / (self.chunk_rows + rest)
        n_window = window_present * reference_present / (window_present + reference_present)
        return base * max(1.0, math.sqrt(n_chunk / n_window))

    def to_dict(self) -> dict[str, Any]:
        return {"statistic": self.statistic, "mean": self.mean, "std": self.std,
                "chunk_rows": self.chunk_rows, "chunks": self.chunks}


@dataclass
class Reference:
    """The reference side of every comparison: column specs, summaries, thresholds.

    Immutable once fitted; ``to_dict``/``from_dict`` round-trip it through JSON.
    """

    columns: dict[str, Summary]
    thresholds: dict[str, Threshold | None]
    kinds: dict[str, str]  # numeric | categorical | unsupported
    rows: int
    na_values: tuple[str, ...]
    params: dict[str, Any]

    @cached_property
    def id(self) -> str:
        """A hash of the bins: windows made against this reference carry it."""
        h = hashlib.blake2b(digest_size=12)
        for name, s in sorted(self.columns.items()):
            h.update(json.dumps(name).encode())
            if isinstance(s, NumericSummary):
                h.update(b"n" + np.ascontiguousarray(s.spec.edges, dtype="<f8").tobytes())
            else:
                h.update(b"c" + json.dumps(list(s.spec.categories)).encode())
        return h.hexdigest()

    def spellings(self) -> pa.Array:
        return as_value_set(self.na_values)

    def empty(self, name: str) -> Summary:
        s = self.columns[name]
        if isinstance(s, NumericSummary):
            return NumericSummary(s.spec)
        return CategoricalSummary(s.spec)

    def to_dict(self) -> dict[str, Any]:
        cols = {}
        for name, kind in self.kinds.items():
            entry: dict[str, Any] = {"kind": kind}
            if name in self.columns:
                s = self.columns[name]
                t = self.thresholds.get(name)
                entry.update(spec=s.spec.to_dict(), summary=s.to_dict(),
                             threshold=None if t is None else t.to_dict())
            cols[name] = entry
        return {"format_version": FORMAT_VERSION, "rows": self.rows,
                "na_values": list(self.na_values), "params": self.params, "columns": cols}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Reference:
        if d.get("format_version") != FORMAT_VERSION:
            raise UserError(f"this drift reference has format {d.get('format_version')!r}; "
                            f"this Reprise reads format {FORMAT_VERSION}. Rebuild it.")
        columns: dict[str, Summary] = {}
        thresholds: dict[str, Threshold | None] = {}
        kinds = {}
        for name, entry in d["columns"].items():
            kinds[name] = entry["kind"]
            if entry["kind"] == "numeric":
                nspec = NumericSpec.from_dict(entry["spec"])
                columns[name] = NumericSummary.from_dict(nspec, entry["summary"])
            elif entry["kind"] == "categorical":
                cspec = CategoricalSpec.from_dict(entry["spec"])
                columns[name] = CategoricalSummary.from_dict(cspec, entry["summary"])
            else:
                continue
            t = entry.get("threshold")
            thresholds[name] = None if t is None else Threshold(**t)
        return cls(columns, thresholds, kinds, int(d["rows"]), tuple(d["na_values"]),
                   dict(d.get("params", {})))


def fit_reference(data: Any, *, fine_bins: int = 1000, coarse_bins: int = 20,
                  max_categories: int = 200, chunks: int = 10, sample_size: int = 50_000,
                  seed: int = 0, na_values: Iterable[str] | None = None) -> Reference:
    """Fit the drift reference of ``data`` (see the module docstring).

    Args:
        data: A ``pyarrow.Table``, a pandas DataFrame, or a function returning a fresh
            iterable of record batches each time it is called (it is read twice).
        fine_bins: Reference-quantile bins per numeric column (the KS and Wasserstein bins).
        coarse_bins: Equal-mass bins per numeric column for the Jensen-Shannon distance.
        max_categories: Categories kept per text column; rarer labels share one cell.
        chunks: Contiguous chunks the thresholds are learned from (at least 2).
        sample_size: Values sampled per numeric column to place the fine bins.
        seed: Chooses the sampled rows.
        na_values: Text meaning a missing value (default: the data layer's spellings).

    Example:
        >>> import pyarrow as pa
        >>> ref = fit_reference(pa.table({"x": [float(i) for i in range(100)]}), chunks=4)
        >>> ref.rows, ref.kinds["x"]
        (100, 'numeric')
    """
    for name, value, least in (("fine_bins", fine_bins, 2), ("coarse_bins", coarse_bins, 2),
                               ("max_categories", max_categories, 1), ("chunks", chunks, 2),
                               ("sample_size", sample_size, 10)):
        if not isinstance(value, int) or value < least:
            raise ConfigError(f"{name} must be an integer of at least {least}, not {value!r}.")
    batches = _batch_source(data)
    spellings = as_value_set(resolve_na_values(na_values))
    first = _Pass1(sample_size, max_categories, seed, spellings)
    for batch in batches():
        first.update(batch)
    if first.schema is None or first.rows == 0:
        raise UserError("the reference has no rows; a drift reference needs data to compare "
                        "with.")
    specs = first.specs(fine_bins, coarse_bins)
    params = {"fine_bins": fine_bins, "coarse_bins": coarse_bins,
              "max_categories": max_categories, "chunks": chunks, "sample_size": sample_size,
              "seed": seed}
    chunk_sums = _count_chunks(batches, first.schema, specs, first.rows, chunks, spellings)
    totals = {n: _total(parts) for n, parts in chunk_sums.items()}
    for n, s in totals.items():  # coarse bins need the reference's own counts
        if isinstance(s, NumericSummary):
            spec = with_coarse(s.spec, s.counts, coarse_bins)
            totals[n] = _respec(s, spec)
            chunk_sums[n] = [_respec(c, spec) for c in chunk_sums[n]]
    thresholds = {n: _learn(totals[n], chunk_sums[n]) for n in totals}
    return Reference(totals, thresholds, first.kinds, first.rows,
                     tuple(resolve_na_values(na_values)), params)


def _batch_source(data: Any) -> Batches:
    if callable(data):
        return data  # type: ignore[no-any-return]
    if not isinstance(data, pa.Table):
        if hasattr(data, "columns") and hasattr(data, "iloc"):
            data = pa.Table.from_pandas(data, preserve_index=False)
        else:
            raise UserError(f"a drift reference is fitted on a pyarrow Table, a pandas "
                            f"DataFrame or a function returning batches, not "
                            f"{type(data).__name__}.")
    table = data
    return lambda: table.to_batches(max_chunksize=1 << 16)


class _Pass1:
    """Pass 1: kinds, exact min/max, the sampled values, label counts."""

    def __init__(self, k: int, max_categories: int, seed: int, spellings: pa.Array) -> None:
        self.k, self.max_categories, self.spellings = k, max_categories, spellings
        self.rng = np.random.default_rng(seed)
        self.schema: pa.Schema | None = None
        self.kinds: dict[str, str] = {}
        self.rows = 0
        self.lo: dict[str, float] = {}
        self.hi: dict[str, float] = {}
        self.sample: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # (priorities, values)
        self.labels: dict[str, dict[str, int]] = {}

    def update(self, batch: Any) -> None:
        if isinstance(batch, pa.Table):
            for b in batch.to_batches():
                self.update(b)
            return
        if self.schema is None:
            self.schema = batch.schema
            self.kinds = {f.name: column_kind(f.type) for f in batch.schema}
        priorities = self.rng.random(batch.num_rows)
        self.rows += batch.num_rows

        def one(name: str) -> None:  # each column's state is its own (dict keys differ)
            if self.kinds[name] == "numeric":
                self._numbers(name, batch.column(name), priorities)
            elif self.kinds[name] == "categorical":
                self._labels(name, batch.column(name))

        each(one, list(self.kinds), batch.num_rows)

    def _numbers(self, name: str, arr: Any, priorities: np.ndarray) -> None:
        import pyarrow.compute as pc

        v = numbers_of(arr, self.spellings)
        if not len(v.values):
            return
        self.lo[name] = min(self.lo.get(name, math.inf), float(v.values.min()))
        self.hi[name] = max(self.hi.get(name, -math.inf), float(v.values.max()))
        # the priorities of the rows that hold a finite value (numbers_of keeps row order)
        valid = pc.is_valid(arr).to_numpy(zero_copy_only=False)
        pr = priorities[valid]
        if len(pr) != len(v.values):  # NaN, infinities or unparsable text were dropped
            pr = pr[: len(v.values)]
        old_p, old_v = self.sample.get(name, (np.empty(0), np.empty(0)))
        p, x = np.concatenate([old_p, pr]), np.concatenate([old_v, v.values])
        if len(p) > self.k:
            keep = np.argpartition(p, self.k)[: self.k]
            p, x = p[keep], x[keep]
        self.sample[name] = (p, x)

    def _labels(self, name: str, arr: Any) -> None:
        import pyarrow.compute as pc

        labels, _ = labels_of(arr, self.spellings)
        if not len(labels):
            return
        vc = pc.value_counts(labels)
        counts = self.labels.setdefault(name, {})
        for value, c in zip(vc.field("values").to_pylist(),
                            vc.field("counts").to_pylist(), strict=True):
            counts[value] = counts.get(value, 0) + c
        cap = 8 * self.max_categories
        if len(counts) > 2 * cap:  # an ID-like column: keep the frequent part only
            top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:cap]
            self.labels[name] = dict(top)

    def specs(self, fine: int, coarse: int) -> dict[str, NumericSpec | CategoricalSpec]:
        out: dict[str, NumericSpec | CategoricalSpec] = {}
        for name, kind in self.kinds.items():
            if kind == "numeric":
                sample = self.sample.get(name, (np.empty(0), np.empty(0)))[1]
                out[name] = numeric_spec(sample, self.lo.get(name, 0.0),
                                         self.hi.get(name, 0.0), fine, coarse)
            elif kind == "categorical":
                counts = self.labels.get(name, {})
                top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
                cats = tuple(v for v, _ in top[: self.max_categories])
                out[name] = CategoricalSpec(cats, len(top) > self.max_categories)
        return out


def _new(spec: NumericSpec | CategoricalSpec) -> Summary:
    return NumericSummary(spec) if isinstance(spec, NumericSpec) else CategoricalSummary(spec)


def _count_chunks(batches: Batches, schema: pa.Schema,
                  specs: dict[str, NumericSpec | CategoricalSpec], rows: int, chunks: int,
                  spellings: pa.Array) -> dict[str, list[Summary]]:
    """Pass 2: every column counted on its bins, one summary per contiguous chunk."""
    chunks = min(chunks, rows)
    bounds = [rows * i // chunks for i in range(chunks + 1)]
    out = {n: [_new(s) for _ in range(chunks)] for n, s in specs.items()}
    start = 0
    for batch in _record_batches(batches()):
        if batch.schema.names != schema.names:
            raise UserError("the reference's batches changed between its two reads (other "
                            "columns); give a source that reads the same data each time.")
        end = start + batch.num_rows
        for c in range(chunks):
            lo, hi = max(start, bounds[c]), min(end, bounds[c + 1])
            if lo >= hi:
                continue
            part = batch.slice(lo - start, hi - lo)

            def count(name: str, c: int = c, part: Any = part) -> None:
                s = out[name][c]
                if isinstance(s, CategoricalSummary):
                    s.update(part.column(name), spellings, reference=True)
                else:
                    s.update(part.column(name), spellings)

            each(count, list(out), part.num_rows)
        start = end
    if start != rows:
        raise UserError(f"the reference had {rows} rows on its first read and {start} on its "
                        "second; give a source that reads the same data each time.")
    return out


def _record_batches(items: Iterable[Any]) -> Iterable[Any]:
    for b in items:
        if isinstance(b, pa.Table):
            yield from b.to_batches()
        else:
            yield b


def _total(parts: list[Summary]) -> Summary:
    out = parts[0]
    for p in parts[1:]:
        out = out.merge(p)  # type: ignore[arg-type]
    return out


def _respec(s: Summary, spec: NumericSpec) -> Summary:
    assert isinstance(s, NumericSummary)
    out = s.merge(NumericSummary(s.spec))
    out.spec = spec
    return out


def distance(ref: Summary, cur: Summary, ref_std: float) -> tuple[str, float]:
    """The distance statistic a large window is judged on: the Wasserstein distance over
    the reference's std (Evidently's normalisation) for numbers whose reference varies,
    else the Jensen-Shannon distance on the coarse bins (numbers) or categories."""
    if isinstance(ref, NumericSummary) and isinstance(cur, NumericSummary):
        if ref_std > 0:
            w = wasserstein_binned(ref.counts, cur.counts, ref.spec.edges,
                                   (ref.low_sum, ref.high_sum), (cur.low_sum, cur.high_sum))
            return "wasserstein", w / ref_std
        return "js", js_distance(coarse_counts(ref), coarse_counts(cur))
    assert isinstance(ref, CategoricalSummary) and isinstance(cur, CategoricalSummary)
    return "js", js_distance(category_counts(ref), category_counts(cur))


def coarse_counts(s: NumericSummary) -> np.ndarray:
    return np.bincount(s.spec.coarse, weights=s.counts,
                       minlength=int(s.spec.coarse.max()) + 1).astype(np.int64)


def category_counts(s: CategoricalSummary) -> np.ndarray:
    """The categories, "other", and the unseen labels as one more cell."""
    return np.append(s.counts, s.unseen)


def _learn(total: Summary, parts: list[Summary]) -> Threshold | None:
    if len(parts) < 2:
        return None
    std = total.std if isinstance(total, NumericSummary) else 0.0
    stats, sizes = [], []
    kind = "js"
    for part in parts:
        rest = total.minus(part)  # type: ignore[arg-type]
        if part.present == 0 or rest.present == 0:
            continue
        kind, value = distance(rest, part, std)
        stats.append(value)
        sizes.append(part.present)
    if len(stats) < 2:
        return None
    return Threshold(kind, float(np.mean(stats)), float(np.std(stats, ddof=1)),
                     int(np.median(sizes)), len(stats))
