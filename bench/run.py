"""Run every benchmark (``bench_*.py``) or the ones named; results go to bench/results/.

    python bench/run.py                 # all
    python bench/run.py logging         # one
    python bench/run.py --quick         # small sizes, no result files (smoke test)
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def available() -> list[str]:
    return sorted(p.stem.removeprefix("bench_") for p in HERE.glob("bench_*.py"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", help=f"benchmarks to run (default all: {available()})")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    names = args.names or available()
    unknown = sorted(set(names) - set(available()))
    if unknown:
        print(f"error: unknown benchmark(s) {unknown}; choose from {available()}",
              file=sys.stderr)
        return 2
    sys.path.insert(0, str(HERE))
    for name in names:
        print(f"== {name}")
        t0 = time.perf_counter()
        mod = importlib.import_module(f"bench_{name}")
        mod.main(["--quick"] if args.quick else [])
        print(f"   ({time.perf_counter() - t0:.1f} s)")
    if not args.quick:
        print(f"results in {HERE / 'results'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
