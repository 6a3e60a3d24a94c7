"""Choosing what `reprise runs list` shows in a given width (no terminal needed)."""

from __future__ import annotations

from typing import Any

import pytest

from reprise.cli._runs_table import age, duration, fit_columns, parse_columns
from reprise.core.errors import UserError

NOW = 1_800_000_000.0


def _row(i: int, name: str = "train", **metrics: float) -> dict[str, Any]:
    return {"id": f"01m8{i:022d}", "name": name, "status": "finished", "kind": "run",
            "started_at": NOW - 200, "duration": 65.0, "metrics": metrics,
            "params": {"lr": 0.1}, "tags": {}}


@pytest.mark.parametrize("ago,text", [(0.4, "now"), (42, "42s ago"), (185, "3m ago"),
                                      (7300, "2h ago"), (3 * 86400, "3d ago")])
def test_age(ago: float, text: str) -> None:
    assert age(NOW - ago, NOW) == text


def test_age_beyond_two_months_is_a_date() -> None:
    assert age(NOW - 90 * 86400, NOW).count("-") == 2 and age(None, NOW) == "-"


@pytest.mark.parametrize("seconds,text", [(0.42, "0.4s"), (12.7, "12s"), (65, "1m 05s"),
                                          (7380, "2h 03m"), (3 * 86400 + 4 * 3600, "3d 04h"),
                                          (None, "-")])
def test_duration(seconds: float | None, text: str) -> None:
    assert duration(seconds) == text


def test_metrics_are_added_while_they_fit_and_the_id_is_whole() -> None:
    rows = [_row(i, **{f"metric_{k}": 0.123456 for k in range(10)}) for i in range(3)]
    short = {r["id"]: r["id"][:12] for r in rows}
    for width in (60, 80, 120, 200):
        cols, hidden = fit_columns(rows, short, width, now=NOW)
        assert [c.kind for c in cols[:5]] == ["id", "name", "status", "age", "duration"]
        assert cols[0].cells == [r["id"][:12] for r in rows]
        total = sum(c.width for c in cols) + 2 * (len(cols) - 1)
        assert total <= width and hidden == 10 - (len(cols) - 5)
    assert fit_columns(rows, short, 200, now=NOW)[1] == 0


def test_sort_metric_first_then_the_most_common() -> None:
    rows = [_row(0, a=1.0, b=2.0, z=3.0), _row(1, b=1.0, z=1.0), _row(2, z=0.5)]
    short = {r["id"]: r["id"] for r in rows}
    cols, _ = fit_columns(rows, short, 500, now=NOW)
    assert [c.key for c in cols if c.kind == "metric"] == ["z", "b", "a"]
    cols, _ = fit_columns(rows, short, 500, sort_metric="a", now=NOW)
    assert [c.key for c in cols if c.kind == "metric"] == ["a", "z", "b"]


def test_a_step_metric_header_takes_two_lines() -> None:
    rows = [_row(0, **{"train_mlp/best_val_loss": 0.25})]
    cols, _ = fit_columns(rows, {rows[0]["id"]: "x" * 8}, 200, now=NOW)
    assert cols[-1].header == "train_mlp/\nbest_val_loss" and cols[-1].width == 13


def test_columns_pick_exactly_and_check_their_keys() -> None:
    rows = [_row(0, acc=0.9)]
    picked = parse_columns("name,metric:acc,param:lr")
    cols, hidden = fit_columns(rows, {rows[0]["id"]: "01m8000"}, 20, picked=picked, now=NOW)
    assert [(c.kind, c.key) for c in cols] == [("id", ""), ("name", ""), ("metric", "acc"),
                                                ("param", "lr")] and hidden == 0
    assert cols[3].cells == ["0.1"]
    with pytest.raises(UserError, match="no listed run has a metric 'loss'; metrics here: acc"):
        fit_columns(rows, {}, 80, picked=parse_columns("metric:loss"), now=NOW)
    for bad in ("nmae", "metric:", "metric", "name,,status"):
        with pytest.raises(UserError, match="--columns: unknown column"):
            parse_columns(bad)
