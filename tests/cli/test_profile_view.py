"""`reprise data show`'s profile in a given width: numbers and dates are never cut
(issue 22.4: `-0.001…`, `2020-0…` at 80 columns). No terminal needed; the tmux test in
tests/e2e/test_terminal.py checks a real one."""

from __future__ import annotations

import datetime as dt
import io
import re

import pyarrow as pa
import pytest
from rich.console import Console

from reprise.cli._render import _stat, profile_columns
from reprise.data import profile_table


def _profile() -> dict[str, object]:
    n = 50
    table = pa.table({
        "customer_identifier_of_the_northern_region": list(range(n)),
        "small": [(-1) ** i * 0.0012345678 * (i + 1) for i in range(n)],
        "large": [1.5e18 + i * 1e9 for i in range(n)],
        "when": [dt.datetime(2020, 1, 1, 0, 0) + dt.timedelta(hours=i) for i in range(n)],
        "plan": ["basic", "pro", "enterprise-with-a-long-name"] * 16 + ["basic", "pro"],
        "nothing": pa.nulls(n, pa.float64()),
    })
    columns = profile_table(table)["columns"]
    assert isinstance(columns, dict)
    return columns


def _render(width: int) -> str:
    out = io.StringIO()
    profile_columns(Console(file=out, width=width, color_system=None), _profile())
    return out.getvalue()


@pytest.mark.parametrize("width", [60, 80, 100, 200])
def test_every_statistic_is_printed_whole(width: int) -> None:
    text = _render(width)
    assert "…" not in text
    assert max(len(line.rstrip()) for line in text.splitlines()) <= width
    for name, column in _profile().items():
        assert isinstance(column, dict)
        for key in ("nulls", "distinct", "min", "max", "mean", "std"):
            if column.get(key) is not None:
                value = _stat(column[key])
                assert re.search(rf"(^|\s){re.escape(value)}(\s|$)", text, re.M), (name, key, value)
    assert "customer_identifier_of_the_northern_region" in text.replace("\n", "")


def test_a_wide_terminal_gets_a_table_and_a_narrow_one_blocks() -> None:
    assert re.search(r"^column\s+type\s+nulls\s+distinct\s+min\s+max", _render(200), re.M)
    narrow = _render(80)
    assert "column  type" not in narrow
    assert re.search(r"^  nulls 0  distinct 50  min 2020-01-01T00:00:00  max 2020-01-03T01:00:00$",
                     narrow, re.M)


@pytest.mark.parametrize(("value", "text"), [
    (0.0012345678, "0.001235"), (-0.0012345678, "-0.001235"), (1.5e18, "1.5e+18"),
    (1500000000000000049, "1500000000000000049"), (2.0, "2"), (None, "-"),
    ("2020-01-01T00:00:00", "2020-01-01T00:00:00"), (True, "True"),
])
def test_statistics_are_short(value: object, text: str) -> None:
    assert _stat(value) == text
