"""Min/max-per-bucket downsampling keeps its promises for any series (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reprise.ui._downsample import downsample_minmax

_values = st.lists(st.floats(allow_nan=False, allow_infinity=False, width=32), min_size=1,
                   max_size=400)


@settings(max_examples=300, deadline=None)
@given(ys=_values, max_points=st.integers(4, 60))
def test_bounds_ends_and_extremes_kept(ys: list[float], max_points: int) -> None:
    xs = list(range(len(ys)))
    keep = downsample_minmax(xs, ys, max_points)
    assert keep == sorted(set(keep))  # ascending, no repeats: drawable as a line
    if len(ys) <= max_points:
        assert keep == xs  # full resolution when the range holds few enough points
        return
    assert len(keep) <= max_points
    assert keep[0] == 0 and keep[-1] == len(ys) - 1
    kept = [ys[i] for i in keep]
    assert min(kept) == min(ys) and max(kept) == max(ys)


@settings(max_examples=100, deadline=None)
@given(ys=_values, max_points=st.integers(4, 60))
def test_every_bucket_is_represented(ys: list[float], max_points: int) -> None:
    """No stretch of the series vanishes: the gap between two kept indices is at most
    one bucket's span (plus one)."""
    keep = downsample_minmax(list(range(len(ys))), ys, max_points)
    if len(ys) > max_points:
        span = -(-(len(ys) - 2) // ((max_points - 2) // 2))
        assert max(b - a for a, b in zip(keep, keep[1:], strict=False)) <= 2 * span


def test_a_spike_in_a_million_points_survives() -> None:
    ys = [0.0] * 1_000_000
    ys[654_321] = 99.0
    ys[123_456] = -5.0
    keep = downsample_minmax(range(len(ys)), ys, 2000)  # type: ignore[arg-type]
    assert len(keep) <= 2000 and 654_321 in keep and 123_456 in keep


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="4 or more"):
        downsample_minmax([0, 1], [0, 1], 3)
    with pytest.raises(ValueError, match="xs has 1 values"):
        downsample_minmax([0], [0, 1], 10)
