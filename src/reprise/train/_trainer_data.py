"""How a Trainer gets its batches: loaders from tables or datasets, the automatic batch
size, seeded samplers and per-epoch data order, sharding across ranks, and skipping
the micro-batches already consumed when a run resumes mid-epoch.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from reprise.core.errors import UserError
from reprise.train._trainer_base import (
    _mix,
    _TrainerBase,
)


class _DataMixin(_TrainerBase):
    """Loaders, batch size, data order and resume-skipping for :class:`Trainer`."""

    def _loader(self, data: Any, *, train: bool) -> Any:
        """A DataLoader for ``data`` (a DataLoader passes through)."""
        from torch.utils.data import DataLoader

        if data is None or isinstance(data, DataLoader):
            if train and data is not None and self.batch_size == "auto":
                raise UserError("batch_size='auto' needs a table or dataset, not a DataLoader "
                                "(the Trainer builds the loader with the size it finds)")
            if train and data is not None and self.drop_last:
                raise UserError("drop_last=True applies to the loader the Trainer builds from "
                                "a table or dataset; for your own DataLoader pass drop_last to "
                                "it (and to its DistributedSampler under DDP)")
            return data
        if isinstance(data, Sequence) and not hasattr(data, "to_arrow"):
            raise UserError(f"cannot train on a {type(data).__name__}: give a DataLoader, a "
                            "pyarrow.Table, a pandas.DataFrame, a Parquet path or a dataset")
        from reprise.data._loader import make_loader

        size = self.batch_size
        if size == "auto":
            size = self._auto_batch(data) if train else getattr(self, "_chosen_batch", 256)
        return make_loader(data, batch_size=int(size), label=self.label, columns=self.columns,
                           shuffle=train, seed=self.seed or 0, num_workers=self.num_workers,
                           num_replicas=self.world_size if train else 1,
                           rank=self.rank if train else 0, drop_last=self.drop_last and train)

    def _auto_batch(self, data: Any) -> int:
        from reprise.data._loader import make_loader
        from reprise.train._batch import choose_batch

        probe = make_loader(data, batch_size=8, label=self.label, columns=self.columns,
                            shuffle=False)
        inner = getattr(probe.batch_sampler, "sampler", None)
        n = len(inner) if inner is not None else None
        choice = choose_batch(self, probe, n_samples=n, target=self.target_batch_size,
                              memory_budget=self.memory_budget)
        self._chosen_batch = choice["batch_size"]
        self.accumulate = choice["accumulate"]
        self.batch_choice = choice
        self._say(f"batch size {choice['batch_size']} × accumulate {choice['accumulate']}: "
                  f"{choice['reason']}")
        return int(choice["batch_size"])

    def _seeded_sampler(self, loader: Any) -> Any:
        from reprise.data._loader import SeededSampler

        for cand in (getattr(loader.batch_sampler, "sampler", None), loader.sampler):
            if isinstance(cand, SeededSampler):
                return cand
        return None

    def _shard(self, loader: Any) -> None:
        """Under DDP, make each rank read its own shard of every epoch."""
        if self.world_size == 1:
            return
        from torch.utils.data import DistributedSampler

        sampler = self._seeded_sampler(loader)
        if sampler is not None:
            if sampler.num_replicas == 1:
                sampler.num_replicas, sampler.rank = self.world_size, self.rank
            return
        if isinstance(loader.sampler, DistributedSampler):
            return
        raise UserError("under DDP the training loader must shard the data: give a table or "
                        "dataset, a loader from reprise.make_loader, or a DataLoader with a "
                        "DistributedSampler")

    def _data_generators(self, loader: Any) -> list[Any]:
        """The generators the loader draws its order and worker seeds from.

        A loader without one would draw from the global generator when each
        epoch starts, which a resume cannot replay; it gets its own, seeded from
        ``seed`` (or, when no seed is set, one draw from torch's global generator,
        as the DataLoader itself would make).
        """
        import torch
        from torch.utils.data import RandomSampler

        if loader.generator is None:
            if self.seed is not None:
                first = _mix(self.seed, 11)
            elif self._resumed:
                first = 0  # replaced by the checkpoint's generator state
            else:
                first = int(torch.empty((), dtype=torch.int64).random_().item())
            loader.generator = torch.Generator().manual_seed(first)
            if isinstance(loader.sampler, RandomSampler) and loader.sampler.generator is None:
                loader.sampler.generator = loader.generator
        gens = [loader.generator]
        other = getattr(loader.sampler, "generator", None)
        if other is not None and other is not loader.generator:
            gens.append(other)
        return gens

    def _epoch_batches(self, loader: Any, epoch: int, skip: int) -> Iterator[Any]:
        """This epoch's batches from micro-batch ``skip`` on.

        The order is what the loader would give uninterrupted: the state of its
        generators at the start of each epoch is kept (and checkpointed), and a
        resume puts it back before the iterator is made, so the same order and
        worker seeds are drawn; reprise loaders then start at the right sample,
        others are read past the batches already trained on.
        """
        gens = self._data_generators(loader)
        if self._epoch_rng is not None and self._epoch_rng[0] == epoch:
            for g, state in zip(gens, self._epoch_rng[1], strict=False):
                g.set_state(state)
        self._epoch_rng = (epoch, [g.get_state() for g in gens])
        sampler = self._seeded_sampler(loader)
        if sampler is not None:
            sampler.set_epoch(epoch)
            bs = getattr(loader.batch_sampler, "batch_size", None) or loader.batch_size
            sampler.start = min(skip * int(bs), sampler.num_samples)
            yield from loader
            return
        stream = loader.dataset
        if hasattr(stream, "start") and hasattr(stream, "epoch") and hasattr(stream, "group_rows"):
            stream.epoch, stream.start = epoch, skip * stream.batch_size
            yield from loader
            return
        if hasattr(loader.sampler, "set_epoch"):
            loader.sampler.set_epoch(epoch)
        it = iter(loader)
        if skip:
            self._say(f"resuming inside epoch {epoch}: reading past {skip} batch(es) (use a "
                      "reprise loader to skip without loading them)")
            for _ in range(skip):
                next(it)
        yield from it

    def _data_record(self) -> dict[str, Any]:
        """The training data's sample count and content fingerprint, as a checkpoint
        records them (computed once per dataset; None where they cannot be known)."""
        loader = getattr(self, "train_loader", None)
        if loader is None:
            return {"samples": None, "fingerprint": None}
        dataset = loader.dataset
        cached = self._data_record_cache
        if cached is not None and cached[0] is dataset:
            return cached[1]
        record = {"samples": _samples_in(dataset), "fingerprint": _fingerprint(dataset)}
        self._data_record_cache = (dataset, record)
        return record

    def _epoch_length(self, loader: Any) -> int | None:
        try:
            return len(loader)
        except TypeError:
            return None


def _samples_in(dataset: Any) -> int | None:
    """Rows in a map-style dataset or a reprise Parquet stream; None for other streams
    (their ``len`` may count batches, or be missing)."""
    from torch.utils.data import IterableDataset

    if hasattr(dataset, "group_rows"):
        return int(sum(dataset.group_rows))
    if isinstance(dataset, IterableDataset):
        return None
    try:
        return int(len(dataset))
    except TypeError:
        return None


def _fingerprint(dataset: Any) -> str | None:
    """BLAKE3 of the data itself, where the dataset holds it whole: the tensors of a
    reprise in-memory table or a ``TensorDataset`` (dtype, shape and bytes of each),
    the file of a reprise Parquet stream. None for other datasets, which the Trainer
    cannot read without running their code."""
    import torch

    from reprise.core._hashing import hash_file, new_hasher

    path = getattr(dataset, "path", None)
    if hasattr(dataset, "group_rows") and path is not None:
        return str(hash_file(path))
    tensors = getattr(dataset, "tensors", None)
    if not isinstance(tensors, list | tuple) or not tensors \
            or not all(isinstance(t, torch.Tensor) for t in tensors):
        return None
    hasher = new_hasher()
    for t in tensors:
        flat = t.detach().cpu().contiguous().reshape(-1)
        hasher.update(f"{t.dtype}{tuple(t.shape)};".encode())
        hasher.update(flat.view(torch.uint8).numpy().data)  # any dtype, bf16 included
    return str(hasher.hexdigest())
