"""Seeded, resumable PyTorch data loading from Arrow tables and Parquet files.

Every random choice (epoch order, row-group order, shuffle windows, worker
seeds) is derived from ``(seed, epoch)`` through BLAKE3 and the raw PCG64 bit
stream, both fixed by specification, so an order is the same on every platform
and with every torch version. (``numpy.random.Generator.permutation`` is not
covered by NumPy's stream-compatibility policy; ``argsort`` of raw PCG64 output
is.) ``start`` skips the first samples of an epoch, which is how a trainer
resumes exactly mid-epoch.

torch is imported only when a loader or sampler is built: the classes here
become torch ``Sampler`` / ``IterableDataset`` subclasses on instantiation (see
:class:`_TorchBacked`), so ``import reprise.data`` stays light.
"""

from __future__ import annotations

import math
import os
import random
import types
from collections.abc import Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Self

import blake3
import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.parquet as pq
import pyarrow.types as pat

from reprise.core.errors import UserError

if TYPE_CHECKING:
    import torch
    from torch.utils.data import DataLoader

__all__ = ["STREAMING_THRESHOLD", "SeededSampler", "make_loader", "worker_init"]

STREAMING_THRESHOLD = 1 << 30
"""Parquet files larger than this (bytes) stream by default instead of loading."""

Arrays = list[npt.NDArray[Any]]


def _mix(*parts: int) -> int:
    """A 64-bit seed from integers (BLAKE3 of their decimal text): stable everywhere."""
    text = ":".join(str(int(p)) for p in parts).encode()
    return int.from_bytes(blake3.blake3(b"reprise.loader.v1:" + text).digest(8), "big")


def _permutation(n: int, *parts: int) -> npt.NDArray[np.int64]:
    """A permutation of ``range(n)``: argsort of raw PCG64 output seeded by ``parts``."""
    bits = np.random.PCG64(_mix(*parts)).random_raw(n)
    return np.argsort(bits, kind="stable").astype(np.int64)


def _check_ints(where: str, **values: tuple[Any, int | None]) -> None:
    """Each ``name=(value, lowest)`` must be an int (not a bool) >= lowest (None: any)."""
    for name, (value, low) in values.items():
        if not isinstance(value, int) or isinstance(value, bool) or (low is not None and value < low):
            bound = f" >= {low}" if low is not None else ""
            raise UserError(f"{where}: {name} must be an integer{bound}; got {value!r}")


_FLAVOURED: dict[tuple[type, str], type] = {}


class _TorchBacked:
    """Makes instances subclasses of a ``torch.utils.data`` class, importing torch late.

    ``SeededSampler(...)`` returns an instance of a subclass of both
    ``SeededSampler`` and ``torch.utils.data.Sampler``, built on first use, so
    ``isinstance`` checks in torch hold while importing this module loads no torch.
    Pickling goes through the plain class, which is importable by name.
    """

    _torch_base: ClassVar[str]

    def __new__(cls, *args: Any, **kwargs: Any) -> Self:
        if not cls.__dict__.get("_flavoured", False):
            key = (cls, cls._torch_base)
            if key not in _FLAVOURED:
                import torch.utils.data

                base = getattr(torch.utils.data, cls._torch_base)
                body = {"__module__": cls.__module__, "__qualname__": cls.__qualname__,
                        "__doc__": cls.__doc__, "_flavoured": True}
                _FLAVOURED[key] = types.new_class(cls.__name__, (cls, base),
                                                  exec_body=lambda ns: ns.update(body))
            cls = _FLAVOURED[key]
        return object.__new__(cls)

    def __reduce__(self) -> tuple[Any, ...]:
        plain = type(self).__bases__[0] if type(self).__dict__.get("_flavoured") else type(self)
        return _restore, (plain, dict(self.__dict__))


def _restore(cls: type[_TorchBacked], state: dict[str, Any]) -> _TorchBacked:
    obj = cls.__new__(cls)
    obj.__dict__.update(state)
    return obj


class SeededSampler(_TorchBacked):
    """Sample indices in an order fixed by ``(seed, epoch)``, resumable mid-epoch.

    The order is ``argsort`` of ``n`` raw PCG64 outputs seeded from BLAKE3 of
    ``seed`` and ``epoch`` (identity order when ``shuffle=False``). For
    ``num_replicas > 1`` every rank computes the same order, pads it like
    ``torch.utils.data.DistributedSampler`` (repeating its first indices until
    the length divides evenly; with ``drop_last`` the tail is cut instead) and
    takes every ``num_replicas``-th index from ``rank``. ``start`` then skips
    that many of this rank's indices; it is reset to 0 when :meth:`set_epoch`
    moves to another epoch.

    Example:
        >>> s = SeededSampler(5, seed=0, start=2)
        >>> len(s), list(s) == list(SeededSampler(5, seed=0))[2:]
        (3, True)
    """

    _torch_base = "Sampler"

    def __init__(self, n: int, *, seed: int = 0, shuffle: bool = True, start: int = 0,
                 drop_last: bool = False, num_replicas: int = 1, rank: int = 0,
                 epoch: int = 0) -> None:
        _check_ints("SeededSampler", n=(n, 0), start=(start, 0), num_replicas=(num_replicas, 1),
                    seed=(seed, None), epoch=(epoch, 0))
        if not isinstance(rank, int) or not 0 <= rank < num_replicas:
            raise UserError(f"SeededSampler: rank must be in 0..{num_replicas - 1}; got {rank!r}")
        self.n, self.seed, self.shuffle, self.drop_last = n, int(seed), shuffle, drop_last
        self.num_replicas, self.rank, self.epoch = num_replicas, rank, int(epoch)
        self.start = self._checked_start(start)

    @property
    def num_samples(self) -> int:
        """Indices per rank in a whole epoch (before ``start``)."""
        if self.drop_last:
            return self.n // self.num_replicas
        return math.ceil(self.n / self.num_replicas)

    def _checked_start(self, start: int) -> int:
        if not isinstance(start, int) or not 0 <= start <= self.num_samples:
            raise UserError(f"SeededSampler: start must be in 0..{self.num_samples} (the samples "
                            f"of one epoch on this rank); got {start!r}")
        return start

    def set_epoch(self, epoch: int) -> None:
        """Use ``epoch``'s order; a different epoch also starts from its beginning."""
        if epoch != self.epoch:
            self.epoch, self.start = int(epoch), 0

    def indices(self) -> npt.NDArray[np.int64]:
        """This rank's indices for the current epoch after ``start``, as one array."""
        order = (_permutation(self.n, self.seed, self.epoch) if self.shuffle
                 else np.arange(self.n, dtype=np.int64))
        total = self.num_samples * self.num_replicas
        if total > self.n:
            order = np.resize(order, total)  # repeats from the start, like DistributedSampler
        return order[self.rank:total:self.num_replicas][self.start:]

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices().tolist())

    def __len__(self) -> int:
        return self.num_samples - self.start

    def state_dict(self) -> dict[str, int]:
        """Plain ints (JSON-able): enough with ``n`` to continue the same order."""
        return {"n": self.n, "seed": self.seed, "epoch": self.epoch, "start": self.start}

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        if int(state["n"]) != self.n:
            raise UserError(f"sampler state is for {state['n']} samples but this sampler has "
                            f"{self.n}; the data changed since the state was saved")
        self.seed, self.epoch = int(state["seed"]), int(state["epoch"])
        self.start = self._checked_start(int(state["start"]))


class _ArrayBatchSampler:
    """Batches of a :class:`SeededSampler` as index arrays (no per-index Python work)."""

    def __init__(self, sampler: SeededSampler, batch_size: int, drop_last: bool) -> None:
        self.sampler, self.batch_size, self.drop_last = sampler, batch_size, drop_last

    def __iter__(self) -> Iterator[npt.NDArray[np.int64]]:
        order = self.sampler.indices()
        stop = len(self) * self.batch_size
        for begin in range(0, min(stop, len(order)), self.batch_size):
            yield order[begin:begin + self.batch_size]

    def __len__(self) -> int:
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)


def worker_init(worker_id: int) -> None:
    """Seed ``random`` and numpy in a DataLoader worker from torch's seed for it.

    torch seeds each worker with ``base_seed + worker_id``, ``base_seed`` drawn
    from the loader's generator, which :func:`make_loader` seeds from
    ``(seed, epoch)``: so worker-side randomness (augmentations) is reproducible.
    """
    import torch

    seed = torch.initial_seed()
    random.seed(seed)
    np.random.seed(seed % 2**32)


@dataclass(frozen=True)
class _Layout:
    """Which columns become which tensors: one per column (a dict), or (features, label)."""

    columns: tuple[str, ...]
    label: str | None

    @property
    def needed(self) -> list[str]:
        return [*self.columns, *([self.label] if self.label is not None else [])]

    def arrays(self, table: pa.Table) -> Arrays:
        if self.label is None:
            return [_column_array(table.column(c), c, None) for c in self.columns]
        features = np.empty((table.num_rows, len(self.columns)), dtype=np.float32)
        for j, name in enumerate(self.columns):
            features[:, j] = _column_array(table.column(name), name, np.float32, writable=False)
        return [features, _column_array(table.column(self.label), self.label, None)]

    def batch(self, tensors: Sequence[torch.Tensor]) -> Any:
        if self.label is None:
            return dict(zip(self.columns, tensors, strict=True))
        return tensors[0], tensors[1]


def _make_layout(schema: pa.Schema, columns: Sequence[str] | None, label: str | None) -> _Layout:
    available = schema.names
    asked = [*(columns or []), *([label] if label is not None else [])]
    for name in asked:
        if name not in available:
            raise UserError(f"column {name!r} is not in the data; columns are: "
                            f"{', '.join(map(repr, available))}")
    if columns is not None and (isinstance(columns, str) or not columns):
        raise UserError(f"columns must be a non-empty list of column names; got {columns!r}")
    features = tuple(columns) if columns is not None else tuple(n for n in available if n != label)
    if not features:
        raise UserError("no feature columns: the data has only the label column")
    if label is not None and label in features:
        raise UserError(f"the label column {label!r} is also among the feature columns")
    for name in asked if columns is not None else [*features, *([label] if label else [])]:
        _check_numeric(schema.field(name).type, name)
    return _Layout(features, label)


def _check_numeric(kind: pa.DataType, name: str) -> None:
    if pat.is_integer(kind) or pat.is_floating(kind) or pat.is_boolean(kind):
        return
    if pat.is_dictionary(kind) or pat.is_string(kind) or pat.is_large_string(kind) \
            or pat.is_string_view(kind):
        raise UserError(f"column {name!r} holds text ({kind}); a loader yields numeric tensors: "
                        "encode it as numbers first (category codes, one-hot) or leave it out "
                        "with columns=[...]")
    raise UserError(f"column {name!r} has type {kind}, which cannot become a tensor; convert it "
                    "to a number or leave it out with columns=[...]")


def _column_array(column: pa.ChunkedArray, name: str, dtype: Any,
                  writable: bool = True) -> npt.NDArray[Any]:
    """Floats → float32 (nulls → NaN), ints → int64, bools; writable unless asked (torch
    warns on read-only arrays), copying only when Arrow's zero-copy view is read-only."""
    kind = column.type
    if column.null_count and not pat.is_floating(kind):
        raise UserError(f"column {name!r} has {column.null_count} null value(s); fill or drop "
                        "them before loading (only float columns may hold nulls, read as NaN)")
    if dtype is None:
        dtype = np.float32 if pat.is_floating(kind) else np.int64 if pat.is_integer(kind) else bool
    values: npt.NDArray[Any] = column.to_numpy()
    if values.dtype != dtype:
        return values.astype(dtype)
    return values.copy() if writable and not values.flags.writeable else values


class _TableDataset:
    """Map-style dataset over tensors built once; a batch is one gather per tensor."""

    def __init__(self, tensors: list[torch.Tensor], layout: _Layout) -> None:
        self.tensors, self.layout = tensors, layout

    def __len__(self) -> int:
        return int(self.tensors[0].shape[0])

    def __getitem__(self, index: int) -> Any:
        return self.layout.batch([t[index] for t in self.tensors])

    def __getitems__(self, indices: Any) -> Any:
        import torch

        idx = torch.from_numpy(np.asarray(indices, dtype=np.int64))
        return self.layout.batch([t.index_select(0, idx) for t in self.tensors])


class _ParquetStream(_TorchBacked):
    """Batches streamed from a Parquet file, a few row groups in memory at a time.

    Row groups are shuffled by ``(seed, epoch)`` and dealt round-robin to the
    DataLoader workers (each row group read by exactly one worker). Each worker
    gathers row groups into a window of at least ``buffer_rows`` rows, permutes
    the window and emits full batches, carrying the remainder into the next
    window: a windowed shuffle, not a global one. The DataLoader takes batches
    from workers in turn, so the epoch's batch sequence is fixed for a given
    number of workers and ``start`` can skip exactly the batches already seen.
    """

    _torch_base = "IterableDataset"

    def __init__(self, path: Path, layout: _Layout, *, batch_size: int, shuffle: bool, seed: int,
                 epoch: int, start: int, drop_last: bool, buffer_rows: int, workers: int) -> None:
        self.path, self.layout, self.batch_size = path, layout, batch_size
        self.shuffle, self.seed, self.epoch, self.drop_last = shuffle, seed, epoch, drop_last
        self.buffer_rows, self.workers = buffer_rows, max(1, workers)
        meta = pq.read_metadata(path)
        self.group_rows = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
        self.start = start
        self._skips(self.workers)  # validates start now rather than inside a worker

    def _plan(self, workers: int) -> list[list[int]]:
        n = len(self.group_rows)
        order = (_permutation(n, self.seed, self.epoch, 1) if self.shuffle
                 else np.arange(n, dtype=np.int64)).tolist()
        return [order[w::workers] for w in range(workers)]

    def _batch_sizes(self, workers: int) -> list[list[int]]:
        sizes = []
        for groups in self._plan(workers):
            rows = sum(self.group_rows[g] for g in groups)
            full, rest = divmod(rows, self.batch_size)
            sizes.append([self.batch_size] * full + ([rest] if rest and not self.drop_last else []))
        return sizes

    def _skips(self, workers: int) -> tuple[list[int], int]:
        """Batches each worker skips so the loader's first ``start`` samples are skipped,
        and the worker that emitted next: it becomes the DataLoader's worker 0, since the
        DataLoader always starts its round-robin over workers there."""
        sizes, skips, done, turn, last = self._batch_sizes(workers), [0] * workers, 0, 0, -1
        while done < self.start:
            live = [w for w in range(workers) if len(sizes[w]) > turn]
            if not live:
                raise UserError(f"start={self.start} is past the end of the epoch ({done} samples)")
            for last in live:
                done += sizes[last][turn]
                skips[last] += 1
                if done >= self.start:
                    break
            turn += 1
        if done != self.start:
            raise UserError(f"start={self.start} falls inside a batch; in streaming mode start "
                            "must be a number of samples at a batch boundary")
        return skips, (last + 1) % workers

    def __len__(self) -> int:
        return sum(len(s) for s in self._batch_sizes(self.workers)) - sum(self._skips(self.workers)[0])

    def __iter__(self) -> Iterator[Any]:
        import torch
        from torch.utils.data import get_worker_info

        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        skips, rotation = self._skips(workers)
        role = (worker + rotation) % workers  # the plan this process plays
        rng = np.random.PCG64(_mix(self.seed, self.epoch, 2, workers, role))
        for i, arrays in enumerate(self._windows(self._plan(workers)[role], rng)):
            if i >= skips[role]:
                yield self.layout.batch([torch.from_numpy(a) for a in arrays])

    def _windows(self, groups: list[int], rng: np.random.PCG64) -> Iterator[Arrays]:
        parquet = pq.ParquetFile(self.path, pre_buffer=False, buffer_size=1 << 20)  # bounded
        pending: list[Arrays] = []
        rows = 0
        for group in groups:
            pending.append(self.layout.arrays(parquet.read_row_group(group, columns=self.layout.needed)))
            rows += len(pending[-1][0])
            if rows >= self.buffer_rows:
                carry = yield from self._emit(pending, rng, final=False)
                pending, rows = [carry], len(carry[0])
        yield from self._emit(pending, rng, final=True)

    def _emit(self, parts: list[Arrays], rng: np.random.PCG64,
              final: bool) -> Generator[Arrays, None, Arrays]:
        if not parts:
            return []
        window = [np.concatenate(cols) for cols in zip(*parts, strict=True)] if len(parts) > 1 \
            else parts[0]
        rows = len(window[0])
        if self.shuffle and rows > 1:
            perm = np.argsort(rng.random_raw(rows), kind="stable")
            window = [a[perm] for a in window]
        end = rows // self.batch_size * self.batch_size
        if final and not self.drop_last:
            end = rows
        for begin in range(0, end, self.batch_size):
            yield [a[begin:min(begin + self.batch_size, end)] for a in window]
        return [a[end:] for a in window]


def _identity(batch: Any) -> Any:
    return batch


def _resolve_source(source: Any) -> tuple[pa.Table | None, Path | None]:
    """The data as an in-memory table, or the path of one local Parquet file."""
    if isinstance(source, pa.Table):
        return source, None
    if type(source).__module__.startswith("pandas") and hasattr(source, "iloc"):
        try:
            return pa.Table.from_pandas(source, preserve_index=False), None
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise UserError(f"cannot read the DataFrame as typed columns ({exc})") from exc
    if isinstance(source, str | os.PathLike):
        path = Path(source)
        if not path.is_file():
            raise UserError(f"{str(path)!r} is not a Parquet file; give a file path, a "
                            "pyarrow.Table, a DataFrame or a dataset version")
        return None, path
    if hasattr(source, "to_arrow"):
        local = source.parquet_path() if hasattr(source, "parquet_path") else None
        return (None, Path(local)) if local is not None else (source.to_arrow(), None)
    raise UserError(f"cannot load from a {type(source).__name__}: give a pyarrow.Table, a "
                    "pandas.DataFrame, a Parquet file path or a dataset version")


def make_loader(source: Any, *, batch_size: int, columns: Sequence[str] | None = None,
                label: str | None = None, shuffle: bool = True, seed: int = 0, epoch: int = 0,
                start: int = 0, num_workers: int = 0, prefetch_factor: int = 2,
                pin_memory: bool | Literal["auto"] = "auto", drop_last: bool = False,
                streaming: bool | None = None, buffer_rows: int = 65_536, num_replicas: int = 1,
                rank: int = 0) -> DataLoader[Any]:
    """A DataLoader whose batches and order are fixed by ``(seed, epoch)``.

    Batches are a dict of column → tensor (floats → float32, integers → int64,
    booleans → bool), or with ``label`` a tuple ``(features [B, len(columns)]
    float32, label)``; features default to every column but the label. Text
    columns are refused: encode them first.

    In memory (the default), the columns are converted to tensors once and a
    batch is one gather per tensor, indexed by a :class:`SeededSampler`
    (``loader.batch_sampler.sampler``; call its ``set_epoch`` to reuse the loader).
    ``streaming`` (default: for Parquet files over 1 GiB) reads row groups
    instead, with a windowed shuffle of ``buffer_rows`` rows (see
    :class:`_ParquetStream`); its order also depends on ``num_workers``.
    ``start`` skips the epoch's first samples (at a batch boundary when
    streaming); ``num_replicas``/``rank`` shard an in-memory epoch for DDP: every
    rank gets the same number of samples, so when they do not divide evenly the
    shards are padded with the epoch's first samples (seen twice), as
    ``DistributedSampler`` does. ``drop_last`` leaves out what does not fill a whole
    batch instead, on every rank, and under sharding repeats no sample.

    Example:
        >>> import pyarrow as pa
        >>> loader = make_loader(pa.table({"x": [1.0, 2.0, 3.0]}), batch_size=2, seed=0)
        >>> [len(b["x"]) for b in loader]
        [2, 1]
    """
    import torch
    from torch.utils.data import DataLoader

    _check_ints("make_loader", batch_size=(batch_size, 1), num_workers=(num_workers, 0),
                start=(start, 0), buffer_rows=(buffer_rows, 1), seed=(seed, None),
                epoch=(epoch, 0))
    table, path = _resolve_source(source)
    layout = _make_layout(table.schema if table is not None else pq.read_schema(path),
                          columns, label)
    if streaming is None:
        streaming = path is not None and path.stat().st_size > STREAMING_THRESHOLD
    options: dict[str, Any] = {
        "num_workers": num_workers, "collate_fn": _identity, "worker_init_fn": worker_init,
        "pin_memory": torch.cuda.is_available() if pin_memory == "auto" else bool(pin_memory),
        "generator": torch.Generator().manual_seed(_mix(seed, epoch, 3) >> 1),
        "prefetch_factor": prefetch_factor if num_workers > 0 else None}
    if streaming:
        if path is None:
            raise UserError("streaming=True reads a Parquet file; this source is in memory, so "
                            "leave streaming unset (or write it to Parquet first)")
        if num_replicas != 1:
            raise UserError("streaming does not shard across ranks yet; use the in-memory "
                            "loader (streaming=False) with num_replicas/rank")
        stream = _ParquetStream(path, layout, batch_size=batch_size, shuffle=shuffle, seed=seed,
                                epoch=epoch, start=start, drop_last=drop_last,
                                buffer_rows=buffer_rows, workers=num_workers)
        return DataLoader(stream, batch_size=None, **options)  # type: ignore[arg-type]
    if table is None:
        table = pq.read_table(path, columns=layout.needed)
    tensors = [torch.from_numpy(a) for a in layout.arrays(table)]
    sampler = SeededSampler(table.num_rows, seed=seed, shuffle=shuffle, start=start, epoch=epoch,
                            num_replicas=num_replicas, rank=rank, drop_last=drop_last)
    batches: Any = _ArrayBatchSampler(sampler, batch_size, drop_last)
    return DataLoader(_TableDataset(tensors, layout), batch_sampler=batches,  # type: ignore[arg-type]
                      **options)
