"""``python bench/_gc_probe.py serve ...``: ``reprise serve`` with the cyclic garbage
collector's passes timed (``gc.callbacks``), for diagnosing a server's latency tail.

``REPRISE_BENCH_GC`` names the JSON file written when the server exits: per generation,
the passes once the server froze its start-up heap (it is ready), their total, longest,
p50, p90 and p99 pause; the objects frozen (``gc.get_freeze_count``) and those left in
the oldest generation at exit. ``SIGUSR2`` writes, next to it (``.census.json``), what
the collector tracks at that moment: the objects per generation, the commonest types,
and who holds a sample of the lists (sent while a load runs).
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

GC_ENV = "REPRISE_BENCH_GC"


def _owners(sample: list[Any]) -> list[tuple[str, int]]:
    """Who holds a sample of objects: their referrers' types, two levels up."""
    seen: Counter[str] = Counter()
    for obj in sample:
        for ref in gc.get_referrers(obj):
            if ref is sample:
                continue
            up = [type(r).__name__ for r in gc.get_referrers(ref) if r is not sample][:2]
            seen[f"{type(ref).__name__} <- {','.join(up)}"] += 1
    return seen.most_common(10)


def main(argv: list[str]) -> None:
    from reprise.cli import main as cli

    out = Path(os.environ[GC_ENV])
    pauses: dict[int, list[float]] = {0: [], 1: [], 2: []}
    started: list[float] = [0.0]
    ready: list[bool] = [False]

    def callback(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
            return
        seconds = time.perf_counter() - started[0]
        # serving once the start-up heap is frozen: the imports' passes are not counted
        # (get_freeze_count walks the frozen objects: asked only until they are there)
        if ready[0] or gc.get_freeze_count():
            ready[0] = True
            pauses[info["generation"]].append(seconds)

    def write() -> None:
        stats: dict[str, Any] = {
            "frozen": gc.get_freeze_count(),
            "gen2_objects_at_exit": len(gc.get_objects(2)),
        }
        for gen, xs in pauses.items():
            xs = sorted(xs)
            stats[f"gen{gen}"] = {
                "passes": len(xs),
                "total_ms": sum(xs) * 1e3,
                "max_ms": xs[-1] * 1e3 if xs else 0.0,
                "p50_ms": xs[len(xs) // 2] * 1e3 if xs else 0.0,
                "p90_ms": xs[int(len(xs) * 0.9)] * 1e3 if xs else 0.0,
                "p99_ms": xs[int(len(xs) * 0.99)] * 1e3 if xs else 0.0,
            }
        out.write_text(json.dumps(stats, indent=1))

    def census(signum: int, frame: Any) -> None:
        objects = gc.get_objects()
        types = Counter(type(o).__name__ for o in objects)
        out.with_suffix(".census.json").write_text(
            json.dumps(
                {
                    "frozen": gc.get_freeze_count(),
                    "tracked": len(objects),
                    "per_generation": [len(gc.get_objects(g)) for g in range(3)],
                    "types": types.most_common(25),
                    "list_lengths": Counter(
                        min(len(o), 1000) for o in objects if type(o) is list
                    ).most_common(8),
                    "list_owners": _owners([o for o in objects if type(o) is list][::97]),
                },
                indent=1,
            )
        )

    signal.signal(signal.SIGUSR2, census)
    gc.callbacks.append(callback)
    atexit.register(write)
    cli(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
