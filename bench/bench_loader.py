"""Training-data loading throughput: Reprise ``make_loader`` (in memory and streaming)
against the common PyTorch recipe, in the same run, on one Parquet file.

The peer is what most training scripts do: ``pandas.read_parquet`` →
``torch.tensor(df.values)`` → ``TensorDataset`` → ``DataLoader(shuffle=True)``,
which fetches every sample with its own ``__getitem__`` call and stacks them.
Reprise gathers a whole batch with one index operation per tensor. Figures are
samples per second over one full shuffled epoch (setup excluded; the load time
is reported apart), median of the repeats; every loader's epoch is checked to
deliver each row exactly once (count and label sum).

Also measured: ``assign_splits`` rows per second on 1M integer ids (hash and
stratified modes).
"""

from __future__ import annotations

import argparse
import gc
import shutil
import statistics
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from _common import WORK, finish

FEATURES = [f"f{i:02d}" for i in range(16)]


def build(path: Path, rows: int) -> int:
    """A Parquet file of ``rows`` × 16 float32 features and an int64 label; returns the label sum."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    columns: dict[str, Any] = {name: rng.standard_normal(rows, dtype=np.float32) for name in FEATURES}
    columns["y"] = rng.integers(0, 10, size=rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), path, row_group_size=128 * 1024)
    return int(columns["y"].sum())


def epoch(loader: Iterable[Any]) -> tuple[float, int, int]:
    """Seconds for one pass, samples seen, and the sum of their labels."""
    seen, total = 0, 0
    t0 = time.perf_counter()
    for _, y in loader:
        seen += len(y)
        total += int(y.sum())
    return time.perf_counter() - t0, seen, total


def reprise_loader(path: Path, batch: int, streaming: bool) -> Any:
    from reprise.data import make_loader

    return make_loader(path, batch_size=batch, columns=FEATURES, label="y", seed=0,
                       streaming=streaming)


def naive_loader(path: Path, batch: int) -> Any:
    import pandas as pd
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    df = pd.read_parquet(path)
    x = torch.tensor(df[FEATURES].values, dtype=torch.float32)
    y = torch.tensor(df["y"].values)
    return DataLoader(TensorDataset(x, y), batch_size=batch, shuffle=True)


def measure(make: Callable[[], Any], rows: int, label_sum: int) -> tuple[float, float]:
    """(load seconds, epoch samples/s) of one loader, checking the epoch's contents."""
    gc.collect()  # the previous loader's tensors are freed before the clock starts
    t0 = time.perf_counter()
    loader = make()
    load_s = time.perf_counter() - t0
    seconds, seen, total = epoch(loader)
    if (seen, total) != (rows, label_sum):
        raise AssertionError(f"epoch delivered {seen} rows (label sum {total}); "
                             f"expected {rows} ({label_sum})")
    return load_s, rows / seconds


def loaders(path: Path, rows: int, label_sum: int, batches: list[int],
            repeats: int) -> tuple[dict[str, float], dict[str, list[float]]]:
    kinds: dict[str, Callable[[int], Any]] = {
        "reprise_memory": lambda b: reprise_loader(path, b, streaming=False),
        "reprise_streaming": lambda b: reprise_loader(path, b, streaming=True),
        "naive_tensordataset": lambda b: naive_loader(path, b),
    }
    samples: dict[str, list[float]] = {}
    for _ in range(repeats):  # interleave the loaders so drift hits all alike
        for batch in batches:
            for kind, make in kinds.items():
                load_s, rate = measure(lambda m=make, b=batch: m(b), rows, label_sum)  # type: ignore[misc]
                samples.setdefault(f"{kind}_b{batch}_samples_per_s", []).append(rate)
                samples.setdefault(f"{kind}_b{batch}_load_s", []).append(load_s)
    return {k: statistics.median(v) for k, v in samples.items()}, samples


def splits(rows: int, repeats: int) -> dict[str, float]:
    import numpy as np
    import pyarrow as pa

    from reprise.data import assign_splits

    table = pa.table({"id": np.arange(rows), "y": np.arange(rows) % 7})
    out = {}
    for mode, kwargs in (("hash", {}), ("stratified", {"stratify": "y"})):
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            assign_splits(table, by="id", **kwargs)
            times.append(time.perf_counter() - t0)
        out[f"assign_splits_{mode}_rows_per_s"] = rows / statistics.median(times)
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--split-rows", type=int, default=1_000_000)
    ap.add_argument("--quick", action="store_true", help="small sizes, for a smoke test")
    args = ap.parse_args(argv)
    if args.quick:
        args.repeats, args.rows, args.split_rows = 1, 100_000, 100_000
    import torch

    work = WORK / "loader"
    path = work / "train.parquet"
    label_sum = build(path, args.rows)
    batches = [256, 1024]
    figures, samples = loaders(path, args.rows, label_sum, batches, args.repeats)
    figures.update(splits(args.split_rows, args.repeats))
    shutil.rmtree(work, ignore_errors=True)
    ratios = {}
    for b in batches:
        naive = figures[f"naive_tensordataset_b{b}_samples_per_s"]
        for kind in ("memory", "streaming"):
            rate = figures[f"reprise_{kind}_b{b}_samples_per_s"]
            ratios[f"reprise_{kind}_vs_naive_b{b}"] = rate / naive
    result = {"figures": figures, "ratios": ratios, "samples": samples, "repeats": args.repeats,
              "sizes": {"rows": args.rows, "features": len(FEATURES), "batches": batches,
                        "split_rows": args.split_rows},
              "peer": f"torch {torch.__version__} TensorDataset + DataLoader(shuffle=True)",
              "goal": "reprise in-memory >= 10x the naive per-item DataLoader"}
    return finish("loader", result, quick=args.quick,
                  fmt=lambda k, v: f"{v:>14,.3f}" if k.endswith("_s") and "per_s" not in k
                  else f"{v:>14,.0f}")


if __name__ == "__main__":
    main()
