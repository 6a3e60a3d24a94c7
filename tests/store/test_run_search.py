"""The store's runs search and downsampled metric series, in SQL, on SQLite and PostgreSQL:
the search finds exactly the runs (and the order) that the dashboard's Python evaluation of
the same query finds (``reprise.ui._query.matches`` / ``sort_runs`` over every run), and a
downsampled series keeps its first and last point and its global extremes."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reprise.core._types import RunStatus
from reprise.store import _schema as s
from reprise.store._run_search import AllOf, AnyOf, Compare, Negate, RunCondition, RunSearch
from reprise.store._sql import SqlMetadataStore
from reprise.tracking import run_dict
from reprise.ui._query import And, Cmp, Node, Not, Or, matches, sort_runs

_SLOW = settings(max_examples=60, deadline=None,
                 suppress_health_check=[HealthCheck.function_scoped_fixture,
                                        HealthCheck.too_slow])


@pytest.fixture
def store(store_url: str) -> Iterator[SqlMetadataStore]:
    st_ = SqlMetadataStore(store_url)
    yield st_
    st_.close()


def _reset(store: SqlMetadataStore) -> None:
    with store.engine.begin() as conn:
        for t in (s.metrics, s.params, s.tags, s.runs):
            conn.execute(t.delete())


# -- random workspaces ----------------------------------------------------------------
TEXT = st.text(alphabet="ab Zé\"\\/_", max_size=4)
# Decimal floats: every one reads back from its JSON text as the same double (SQLite's
# text-to-real conversion is not correctly rounded for every 17-digit number).
NUMBER = st.one_of(st.integers(-5, 5), st.integers(-3000, 3000).map(lambda i: i / 1000),
                   st.sampled_from([math.inf, -math.inf, 1e300]))
PARAM = st.one_of(NUMBER, TEXT, st.booleans(), st.none(), st.just(math.nan),
                  st.lists(st.integers(0, 3), max_size=2), st.just({"k": 1}))
METRIC_VALUE = st.one_of(NUMBER, st.just(math.nan))


@st.composite
def workspaces(draw: Any, *, lists_in_params: bool = True) -> list[dict[str, Any]]:
    n = draw(st.integers(0, 7))
    runs = []
    for i in range(n):
        started = draw(st.sampled_from([1.0, 2.0, 2.5, 10.0]))
        value = PARAM if lists_in_params else st.one_of(NUMBER, TEXT, st.booleans(), st.none())
        params = {k: draw(v) for k, v in (("lr", st.one_of(NUMBER, value)),
                                          ("opt", st.one_of(TEXT, value)),
                                          ("flag", st.one_of(st.booleans(), value)))
                  if draw(st.integers(0, 4))}  # each present 4 times in 5
        runs.append({
            "id": f"r{i:02d}{draw(st.sampled_from(['x', 'y']))}",
            "name": draw(st.sampled_from(["train", "eval", "é", "Zed"])),
            "status": draw(st.sampled_from([x.value for x in RunStatus])),
            "parent_id": None if i == 0 or draw(st.booleans()) else runs[0]["id"],
            "started_at": started,
            "ended_at": draw(st.one_of(st.none(), st.sampled_from([started, started + 1.5]))),
            "params": params,
            "tags": draw(st.dictionaries(st.sampled_from(["team", "who"]), TEXT, max_size=2)),
            "metrics": draw(st.dictionaries(
                st.sampled_from(["acc", "loss"]),
                st.lists(st.tuples(st.integers(0, 3), METRIC_VALUE), min_size=1, max_size=4),
                max_size=2)),
        })
    return runs


def _load(store: SqlMetadataStore, runs: list[dict[str, Any]]) -> None:
    _reset(store)
    with store.engine.begin() as conn:
        for r in runs:
            conn.execute(s.runs.insert().values(
                id=r["id"], name=r["name"], kind="run", status=r["status"],
                parent_id=r["parent_id"], started_at=r["started_at"], ended_at=r["ended_at"],
                journal_offset=0))
            for k, v in r["params"].items():
                conn.execute(s.params.insert().values(run_id=r["id"], key=k, value=json.dumps(v)))
            for k, v in r["tags"].items():
                conn.execute(s.tags.insert().values(run_id=r["id"], key=k, value=v))
            for k, points in r["metrics"].items():
                for step, value in points:
                    conn.execute(s.metrics.insert().values(
                        run_id=r["id"], key=k, step=step, timestamp=1.0,
                        value=None if math.isnan(value) else value))


FIELDS = ["id", "name", "status", "parent_id", "started_at", "ended_at", "duration",
          "metrics.acc", "metrics.loss", "params.lr", "params.opt", "params.flag",
          "tags.team", "tags.who"]
VALUE = st.one_of(NUMBER, TEXT, st.booleans(), st.none(),
                  st.sampled_from(["train", "finished", "r00x", "é"]))
OPS = st.sampled_from(["=", "==", "!=", "<", "<=", ">", ">="])
QUERIES = st.recursive(
    st.builds(Cmp, st.sampled_from(FIELDS), OPS, VALUE),
    lambda inner: st.one_of(
        st.builds(lambda xs: And(tuple(xs)), st.lists(inner, min_size=2, max_size=3)),
        st.builds(lambda xs: Or(tuple(xs)), st.lists(inner, min_size=2, max_size=3)),
        st.builds(Not, inner)),
    max_leaves=5)


def _condition(node: Node) -> RunCondition:
    from reprise.ui._query import to_condition

    return to_condition(node)


def _python(store: SqlMetadataStore, node: Node | None, sort: str,
            top_level: bool = False) -> list[str]:
    """What the dashboard computed before the store could search: every run, in Python."""
    records = store.list_runs()
    latest = store.latest_metrics([r.id for r in records])
    rows = [run_dict(r, latest[r.id]) for r in records
            if not (top_level and r.parent_id is not None)]
    if node is not None:
        rows = [r for r in rows if matches(node, r)]
    return [r["id"] for r in sort_runs(rows, sort)]


@given(runs=workspaces(), node=QUERIES)
@_SLOW
def test_sql_filter_is_the_python_filter(store: SqlMetadataStore, runs: list[dict[str, Any]],
                                         node: Node) -> None:
    _load(store, runs)
    page = store.search_runs(RunSearch(where=_condition(node), sort="id", descending=True,
                                       limit=1000))
    assert page is not None
    want = _python(store, node, "-id")
    assert [r.id for r in page.runs] == want
    assert page.total == len(want)


@pytest.mark.parametrize("sort", ["name", "parent_id", "duration", "metrics.acc", "params.lr",
                                  "params.flag", "tags.team"])
@given(runs=workspaces(lists_in_params=False), descending=st.booleans(),
       top_level=st.booleans())
@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
def test_sql_sort_is_the_python_sort(store: SqlMetadataStore, runs: list[dict[str, Any]],
                                     sort: str, descending: bool, top_level: bool) -> None:
    _load(store, runs)
    page = store.search_runs(RunSearch(sort=sort, descending=descending, limit=1000,
                                       top_level=top_level))
    assert page is not None
    assert [r.id for r in page.runs] == _python(store, None, ("-" if descending else "") + sort,
                                                top_level)


def test_page_count_and_records(store: SqlMetadataStore) -> None:
    runs = [{"id": f"r{i:02d}", "name": "n", "status": "finished", "parent_id": None,
             "started_at": float(i), "ended_at": None, "params": {"lr": i / 100},
             "tags": {"team": "x" if i % 2 else "y"}, "metrics": {"acc": [(0, 0.0), (5, i / 10)]}}
            for i in range(10)]
    _load(store, runs)
    q = AllOf((Compare("metrics.acc", ">", 0.25), Compare("tags.team", "=", "x")))
    page = store.search_runs(RunSearch(where=q, sort="metrics.acc", descending=True,
                                       limit=2, offset=1))
    # final acc = i/10 > 0.25 for i >= 3; team x for odd i: 3, 5, 7, 9, sorted 9 7 5 3
    assert page is not None and page.total == 4
    assert [r.id for r in page.runs] == ["r07", "r05"]
    rec = page.runs[0]
    assert rec.params == {"lr": 0.07} and rec.tags == {"team": "x"}
    assert page.latest["r07"]["acc"].value == pytest.approx(0.7)
    empty = store.search_runs(RunSearch(where=q, limit=5, offset=100))
    assert empty is not None and empty.total == 4 and empty.runs == []
    either = AnyOf((Compare("name", "=", "zzz"), Negate(Compare("params.lr", "<", 0.05))))
    got = store.search_runs(RunSearch(where=either, sort="params.lr", descending=False))
    assert got is not None and [r.id for r in got.runs] == [f"r{i:02d}" for i in range(5, 10)]


def test_sort_by_a_param_holding_lists_is_left_to_the_caller(store: SqlMetadataStore) -> None:
    _load(store, [{"id": "r1", "name": "n", "status": "finished", "parent_id": None,
                   "started_at": 1.0, "ended_at": None, "params": {"layers": [1, 2]},
                   "tags": {}, "metrics": {}}])
    assert store.search_runs(RunSearch(sort="params.layers")) is None
    assert store.search_runs(RunSearch(sort="params.other")) is not None


# -- downsampled series -----------------------------------------------------------------
SERIES = st.lists(st.tuples(st.integers(0, 60), st.one_of(
    st.floats(-1e6, 1e6), st.sampled_from([math.nan, math.inf, -math.inf])),
    st.floats(0, 100)), min_size=1, max_size=120)


def _load_series(store: SqlMetadataStore, points: list[tuple[int, float, float]]) -> None:
    _reset(store)
    with store.engine.begin() as conn:
        conn.execute(s.runs.insert().values(id="r1", name="n", kind="run", status="finished",
                                            started_at=0.0, journal_offset=0))
        conn.execute(s.metrics.insert(), [
            {"run_id": "r1", "key": "loss", "step": st_, "timestamp": ts,
             "value": None if math.isnan(v) else v} for st_, v, ts in points])


@given(points=SERIES, max_points=st.integers(4, 30), x=st.sampled_from(["step", "time"]),
       start=st.one_of(st.none(), st.integers(0, 30)),
       end=st.one_of(st.none(), st.integers(20, 70)))
@_SLOW
def test_downsampled_series_keeps_ends_and_extremes(
        store: SqlMetadataStore, points: list[tuple[int, float, float]], max_points: int,
        x: str, start: int | None, end: int | None) -> None:
    _load_series(store, points)
    got = store.metric_series("r1", "loss", x=x, start=start, end=end, max_points=max_points)
    # what is in range and drawable, in the order the chart draws it (x, then as written)
    xi = 0 if x == "step" else 2
    rows = sorted(((p[xi], p[0], i, p[1]) for i, p in enumerate(points)))
    inside = [r for r in rows if (start is None or r[0] >= start) and (end is None or r[0] <= end)]
    finite = [r for r in inside if math.isfinite(r[3])]
    assert (got.total, got.in_range, got.non_finite) == (
        len(points), len(inside), len(inside) - len(finite))
    assert len(got.xs) == len(got.ys) <= max_points
    assert got.xs == sorted(got.xs)
    kept = list(zip(got.xs, got.ys, strict=True))
    if len(finite) <= max_points:
        assert not got.downsampled and kept == [(r[0], r[3]) for r in finite]
        return
    assert got.downsampled
    assert kept[0] == (finite[0][0], finite[0][3]) and kept[-1] == (finite[-1][0], finite[-1][3])
    assert min(got.ys) == min(r[3] for r in finite) and max(got.ys) == max(r[3] for r in finite)
    assert all(any(k == (r[0], r[3]) for r in finite) for k in kept)


def test_long_series_is_reduced_in_sql(store: SqlMetadataStore) -> None:
    """A longer series than the law's: 20,000 points, a spike in the middle."""
    pts = [(i, math.sin(i / 300), float(i)) for i in range(20_000)]
    pts[12_345] = (12_345, 50.0, 12_345.0)
    _load_series(store, pts)
    got = store.metric_series("r1", "loss", max_points=2000)
    assert got.total == 20_000 and got.downsampled and len(got.xs) <= 2000
    assert 50.0 in got.ys and got.xs[0] == 0 and got.xs[-1] == 19_999
    zoom = store.metric_series("r1", "loss", start=100, end=199, max_points=2000)
    assert zoom.xs == list(range(100, 200)) and not zoom.downsampled
