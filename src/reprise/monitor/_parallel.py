"""Columns of a batch summarised on a thread pool.

Each column's summary is touched by one thread only, and numpy's and Arrow's loops
release the GIL, so a batch's columns run in parallel and the result does not depend on
the scheduling (the data profiles do the same, ``reprise.data._profile``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

__all__ = ["PARALLEL_ROWS", "each"]

PARALLEL_ROWS = 1 << 15  # smaller batches are summarised on the calling thread

_T = TypeVar("_T")


def each(fn: Callable[[_T], None], items: Sequence[_T], rows: int) -> None:
    """``fn(item)`` for every item, on threads when the batch is large enough."""
    workers = min(len(items), os.cpu_count() or 1)
    if rows < PARALLEL_ROWS or workers < 2:
        for item in items:
            fn(item)
        return
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for _ in pool.map(fn, items):  # re-raises the first failure
            pass
