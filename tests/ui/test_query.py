"""The runs query language: parsed, never evaluated as Python; errors name the problem."""

from __future__ import annotations

from typing import Any

import pytest

from reprise.core._types import RunStatus
from reprise.ui._query import And, Cmp, Not, Or, QueryError, matches, parse_query, pushdown, sort_runs

RUNS: list[dict[str, Any]] = [
    {"id": "a", "name": "train", "status": "finished", "started_at": 3.0,
     "metrics": {"f1": 0.95, "val/loss": 0.2}, "params": {"lr": 0.001, "opt": "adam"},
     "tags": {"team": "x"}},
    {"id": "b", "name": "train", "status": "failed", "started_at": 1.0,
     "metrics": {"f1": 0.5}, "params": {"lr": 0.1, "opt": "sgd"}, "tags": {}},
    {"id": "c", "name": "eval", "status": "finished", "started_at": 2.0,
     "metrics": {}, "params": {"lr": "auto"}, "tags": {"team": "y"}},
]


def _ids(q: str) -> list[str]:
    node = parse_query(q)
    return [r["id"] for r in RUNS if matches(node, r)]


def test_parse_tree() -> None:
    assert parse_query('metrics.f1 > 0.9 and not (status = "failed" or tags.team != \'x\')') \
        == And((Cmp("metrics.f1", ">", 0.9),
                Not(Or((Cmp("status", "=", "failed"), Cmp("tags.team", "!=", "x"))))))
    assert parse_query("params.n>=-3e2") == Cmp("params.n", ">=", -300.0)
    assert parse_query("params.n = 3") == Cmp("params.n", "=", 3)


@pytest.mark.parametrize(("q", "ids"), [
    ('metrics.f1 > 0.9 and params.lr < 0.01 and status = "finished" and tags.team = "x"',
     ["a"]),
    ("metrics.f1 <= 0.95", ["a", "b"]),
    ("metrics.f1 > 0 or name = 'eval'", ["a", "b", "c"]),
    ("NOT metrics.f1 > 0.9", ["b", "c"]),
    ("params.lr < 1", ["a", "b"]),          # "auto" is a string: not comparable, not kept
    ('params.lr = "auto"', ["c"]),
    ("metrics.val/loss < 0.5", ["a"]),
    ("tags.team = null", ["b"]),
    ("tags.team != null", ["a", "c"]),
    ("started_at >= 2", ["a", "c"]),
])
def test_filters(q: str, ids: list[str]) -> None:
    assert _ids(q) == ids


@pytest.mark.parametrize(("q", "message"), [
    ("", "empty"),
    ("metrics.f1 >", "expected a value after metrics.f1 >"),
    ("metrics.f1 0.9", "expected a comparison"),
    ("bogus > 1", "unknown field 'bogus'"),
    ("metrics. > 1", "unknown field"),
    ("metrics.f1 > 0.9 and", "ends where a condition was expected"),
    ("(status = 'failed'", "never closed"),
    ("status = 'finishd'", "unknown status 'finishd'"),
    ("metrics.f1 > 0.9 params.lr < 1", "unexpected 'params.lr' at position 18"),
    ("__import__('os').system('x') = 1", "unexpected character '.' at position 17"),
    ("metrics.f1 > abc", "expected a value"),
    ("metrics.f1 < null", "compares nothing"),
    ("x" * 3000, "longer than"),
])
def test_errors_name_the_problem(q: str, message: str) -> None:
    with pytest.raises(QueryError) as err:
        parse_query(q)
    assert message in str(err.value)


def test_pushdown_only_top_level_equalities() -> None:
    assert pushdown(parse_query('status = "finished" and tags.team = "x" and metrics.f1 > 1')) \
        == {"status": RunStatus.FINISHED, "tags": {"team": "x"}}
    assert pushdown(parse_query('status = "finished" or name = "x"')) == {}
    assert pushdown(None) == {}


def test_sort() -> None:
    assert [r["id"] for r in sort_runs(RUNS, "metrics.f1")] == ["b", "a", "c"]
    assert [r["id"] for r in sort_runs(RUNS, "-metrics.f1")] == ["a", "b", "c"]  # missing last
    assert [r["id"] for r in sort_runs(RUNS, "-started_at")] == ["a", "c", "b"]
    assert [r["id"] for r in sort_runs(RUNS, "params.lr")] == ["a", "b", "c"]  # numbers first
    assert [r["id"] for r in sort_runs(RUNS, "-name")] == ["a", "b", "c"]
    with pytest.raises(QueryError, match="unknown field 'nope'"):
        sort_runs(RUNS, "-nope")
