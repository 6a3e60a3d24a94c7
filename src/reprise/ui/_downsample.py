"""Server-side downsampling of a metric series for charts: min and max per bucket.

Written here (not taken from a library) because it is a few lines over plain lists and
must keep exact guarantees the charts rely on: at most ``max_points`` points, the first
and last points, and every bucket's extremes, hence the series' global minimum and
maximum (a spike in a 1 M-point run stays visible, which averaging or striding loses).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["MIN_POINTS", "downsample_minmax"]

MIN_POINTS = 4  # first, last and one bucket's min and max


def downsample_minmax(xs: Sequence[float], ys: Sequence[float], max_points: int,
                      ) -> list[int]:
    """Indices (ascending) of the points to draw of the series ``(xs[i], ys[i])``, sorted
    by x: all of them when there are ``max_points`` or fewer; otherwise the first, the
    last, and the minimum and maximum of each of ``(max_points - 2) // 2`` buckets of
    equal point counts between them.

    Raises:
        ValueError: ``max_points`` below 4, or ``xs`` and ``ys`` of different lengths.

    Example:
        >>> downsample_minmax([0, 1, 2, 3, 4, 5], [5, 9, 1, 2, 8, 0], 4)
        [0, 1, 2, 5]
    """
    if max_points < MIN_POINTS:
        raise ValueError(f"max_points must be {MIN_POINTS} or more, not {max_points}.")
    n = len(ys)
    if len(xs) != n:
        raise ValueError(f"xs has {len(xs)} values and ys {n}.")
    if n <= max_points:
        return list(range(n))
    buckets = (max_points - 2) // 2
    inner = n - 2  # points 1 .. n-2 are shared among the buckets
    keep = [0]
    for b in range(buckets):
        lo = 1 + b * inner // buckets
        hi = 1 + (b + 1) * inner // buckets
        if lo >= hi:
            continue
        i_min = min(range(lo, hi), key=ys.__getitem__)
        i_max = max(range(lo, hi), key=ys.__getitem__)
        keep.extend(sorted({i_min, i_max}))
    keep.append(n - 1)
    return keep
