"""The one parser of durations written as text (policies, --window, cooldowns)."""

from __future__ import annotations

import pytest

from reprise.core._durations import duration_seconds


@pytest.mark.parametrize(("text", "seconds"), [("250ms", 0.25), ("60s", 60.0), ("5m", 300.0),
                                               ("1.5h", 5400.0), ("2d", 172800.0),
                                               (" 30 s ", 30.0), ("7", 7.0), (2, 2.0)])
def test_units_and_plain_numbers(text: object, seconds: float) -> None:
    assert duration_seconds(text) == seconds


@pytest.mark.parametrize("text", ["", "5 minutes", "-1s", "nan", "1w", True, None, [1]])
def test_what_is_not_a_duration_is_none(text: object) -> None:
    assert duration_seconds(text) is None


def test_a_caller_narrows_the_units_or_requires_one() -> None:
    assert duration_seconds("1d", units=("ms", "s", "m", "h")) is None
    assert duration_seconds("15m", bare=False) == 900.0
    assert duration_seconds("15", bare=False) is None and duration_seconds(15, bare=False) is None
