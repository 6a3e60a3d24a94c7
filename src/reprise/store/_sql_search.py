"""The runs table's search and a metric's downsampled series, answered in SQL (a mixin of
:class:`SqlMetadataStore`; SQLite and PostgreSQL).

``search_runs`` turns a :class:`RunCondition` tree into one ``WHERE`` clause over the runs
table (final metrics, params and tags as correlated index lookups: a run's final metric
is one seek on ``ix_metrics_run_key_step``, a param or tag one primary-key seek), sorts,
counts (``count(*) OVER ()``) and pages there; only the page's runs become records.
Every comparison is wrapped so that it is true or false, never SQL's unknown, so that
``not`` means what it means in Python.

``metric_series`` reduces a series in the database: one pass counts it, then each of
N equal-width x buckets gives the ids of its lowest and highest point (by step: an index
range per bucket; by time: one grouped pass), and only those points are fetched.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from reprise.core._types import MetricPoint, RunRecord
from reprise.core.errors import UserError
from reprise.store import _schema as s
from reprise.store._run_search import (
    COLUMNS,
    AllOf,
    AnyOf,
    Compare,
    MetricSeries,
    RunCondition,
    RunPage,
    RunSearch,
)

__all__ = ["SqlSearchMixin"]

_STRING_COLUMNS = ("id", "name", "kind", "status", "parent_id")
_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "=": operator.eq, "==": operator.eq, "!=": operator.ne, "<": operator.lt,
    "<=": operator.le, ">": operator.gt, ">=": operator.ge}
_INF = float("inf")


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


class _Compiler:
    """SQL expressions over ``runs`` for one search; the lookups of a key are shared."""

    def __init__(self, dialect: str, source: Any = None,
                 looked_up: dict[tuple[str, str], Any] | None = None) -> None:
        """Over ``runs`` itself (params, tags and final metrics as correlated subqueries,
        collected in ``subs``), or over ``source``, a select of the runs' columns and of
        those subqueries' values, named in ``looked_up``."""
        self.dialect = dialect
        self.r = s.runs if source is None else source
        self.subs: dict[tuple[str, str], Any] = {}
        self.looked_up = looked_up

    # -- a run's value of a field ------------------------------------------------------
    def _lookup(self, table: sa.Table, key: str) -> Any:
        if self.looked_up is not None:
            return self.looked_up[(table.name, key)]
        cached = self.subs.get((table.name, key))
        if cached is not None:
            return cached
        t = table.alias(f"{table.name[0]}{len(self.subs)}")
        q = sa.select(t.c.value).where(t.c.run_id == self.r.c.id, t.c.key == key)
        if table is s.metrics:  # the final point: highest step, then the last written
            q = q.order_by(t.c.step.desc(), t.c.id.desc()).limit(1)
        sub = q.correlate(self.r).scalar_subquery()
        self.subs[(table.name, key)] = sub
        return sub

    def text(self, expr: Any) -> Any:
        """Strings compare by code point, as in Python (PostgreSQL: the C collation)."""
        return sa.collate(expr, "C") if self.dialect == "postgresql" else expr

    def _json_number(self, p: Any) -> Any:
        first = sa.func.substr(p, 1, 1)
        return sa.case(
            (p == "Infinity", sa.literal(_INF, sa.Float)),
            (p == "-Infinity", sa.literal(-_INF, sa.Float)),
            (sa.or_(first.between("0", "9"), first == "-"), sa.cast(p, sa.Float)),
            else_=sa.null())

    def _json_string(self, p: Any) -> Any:
        if self.dialect == "postgresql":
            from sqlalchemy.dialects.postgresql import JSON

            decoded: Any = sa.cast(p, JSON).op("#>>", return_type=sa.Text)(
                sa.literal_column("'{}'"))
        else:
            decoded = sa.func.json_extract(p, "$")
        return sa.case((sa.func.substr(p, 1, 1) == '"', decoded), else_=sa.null())

    # -- conditions --------------------------------------------------------------------
    def condition(self, node: RunCondition) -> Any:
        if isinstance(node, Compare):
            return self.compare(node)
        if isinstance(node, AllOf):
            return sa.and_(sa.true(), *(self.condition(n) for n in node.items))
        if isinstance(node, AnyOf):
            return sa.or_(sa.false(), *(self.condition(n) for n in node.items))
        return sa.not_(self.condition(node.item))

    def compare(self, c: Compare) -> Any:
        if c.op not in _OPS:
            raise UserError(f"unknown comparison {c.op!r}.")
        is_none, typed = self._typed(c.field, c.op, c.value)
        if c.value is None:
            if c.op in ("=", "=="):
                return is_none
            return sa.not_(is_none) if c.op == "!=" else sa.false()
        held = sa.false() if typed is None else sa.func.coalesce(typed, sa.false())
        # a missing value differs from every value, as in Python
        return sa.or_(is_none, held) if c.op == "!=" else held

    def _typed(self, field: str, op: str, want: Any) -> tuple[Any, Any]:
        """(the SQL test that the run's value is None, the comparison where the types
        agree or None where they never do)."""
        fn = _OPS[op]
        head, _, key = field.partition(".")
        if field in COLUMNS:
            col = (self.r.c.ended_at - self.r.c.started_at if field == "duration"
                   else self.r.c[field])
            is_none: Any = col.is_(None)
            if field in _STRING_COLUMNS:
                return is_none, fn(self.text(col), want) if isinstance(want, str) else None
            return is_none, fn(col, want) if _number(want) else None
        if head == "metrics":
            v = self._lookup(s.metrics, key)
            return v.is_(None), fn(v, want) if _number(want) else None
        if head == "tags":
            v = self._lookup(s.tags, key)
            return v.is_(None), fn(self.text(v), want) if isinstance(want, str) else None
        if head != "params":
            raise UserError(f"unknown field {field!r}.")
        p = self._lookup(s.params, key)
        is_none = sa.or_(p.is_(None), p == "null")
        if _number(want):
            return is_none, fn(self._json_number(p), want)
        if isinstance(want, bool):
            if op not in ("=", "==", "!="):
                return is_none, None
            text = "true" if want else "false"
            return is_none, (p == text if op != "!=" else
                             sa.and_(p.in_(("true", "false")), p != text))
        if isinstance(want, str):
            if op in ("=", "=="):  # params are canonical JSON (json.dumps): compare texts
                return is_none, p == json.dumps(want)
            if op == "!=":
                return is_none, sa.and_(sa.func.substr(p, 1, 1) == '"', p != json.dumps(want))
            return is_none, fn(self.text(self._json_string(p)), want)
        return is_none, None

    # -- sorting -----------------------------------------------------------------------
    def sort_key(self, field: str) -> tuple[Any, Any, Any]:
        """(class: 0 numbers, 1 strings, 2 missing; the number or None where the field
        has none; the string or None)."""
        head, _, key = field.partition(".")
        if field in COLUMNS or head in ("metrics", "tags"):
            if field in COLUMNS:
                v = (self.r.c.ended_at - self.r.c.started_at if field == "duration"
                     else self.r.c[field])
            else:
                v = self._lookup(s.metrics if head == "metrics" else s.tags, key)
            string = field in _STRING_COLUMNS or head == "tags"
            cls = sa.case((v.is_(None), 2), else_=1 if string else 0)
            return (cls, None, self.text(v)) if string else (cls, v, None)
        if head != "params":
            raise UserError(f"unknown field {field!r}.")
        p = self._lookup(s.params, key)
        num = self._json_number(p)
        cls = sa.case((sa.or_(num.is_not(None), p.in_(("true", "false"))), 0),
                      (sa.func.substr(p, 1, 1) == '"', 1), else_=2)
        number = sa.case((p == "true", 1.0), (p == "false", 0.0), else_=num)
        return cls, number, self.text(self._json_string(p))


class SqlSearchMixin:
    """``search_runs`` and ``metric_series``; the host class provides ``engine``,
    ``dialect``, ``_attach_params_tags`` and ``latest_metrics``."""

    engine: Any
    dialect: str
    _attach_params_tags: Callable[..., None]
    latest_metrics: Callable[..., dict[str, dict[str, MetricPoint]]]

    def search_runs(self, search: RunSearch) -> RunPage | None:
        """A page of runs in SQL (see :mod:`reprise.store._run_search` for the meaning);
        None when the sort cannot be done exactly in SQL (a param holding lists or
        objects, which Python orders by their text), for the caller to do it."""
        from reprise.store._rows import run_record

        # Each param, tag and final metric the search reads is looked up once per run, in
        # a derived table that the outer query filters, counts, sorts and pages (OFFSET 0
        # keeps both databases from inlining it, which repeats every lookup per use).
        probe = _Compiler(self.dialect)
        if search.where is not None:
            probe.condition(search.where)
        probe.sort_key(search.sort)
        r = s.runs
        names = {k: f"v{i}" for i, k in enumerate(probe.subs)}
        inner = sa.select(r.c.id, r.c.parent_id, r.c.kind, r.c.name, r.c.status,
                          r.c.started_at, r.c.ended_at,
                          *(sub.label(names[k]) for k, sub in probe.subs.items()))
        if search.top_level:
            inner = inner.where(r.c.parent_id.is_(None))
        rs = inner.offset(0).subquery("rs")
        cc = _Compiler(self.dialect, rs, {k: rs.c[v] for k, v in names.items()})
        head, _, key = search.sort.partition(".")
        with self.engine.connect() as conn:
            if head == "params" and conn.execute(
                    sa.select(sa.literal(1)).where(
                        s.params.c.key == key,
                        sa.func.substr(s.params.c.value, 1, 1).in_(("[", "{"))).limit(1)
            ).first() is not None:
                return None
            where = [] if search.where is None else [cc.condition(search.where)]
            cls, number, string = cc.sort_key(search.sort)
            order: list[Any] = [cls.asc()]
            for v in (number, string):
                if v is not None:
                    order.append(v.desc() if search.descending else v.asc())
            q = (sa.select(rs.c.id, sa.func.count().over().label("total")).where(*where)
                 .order_by(*order, rs.c.id.desc()).limit(search.limit).offset(search.offset))
            rows = conn.execute(q).all()
            if rows:
                total = int(rows[0][1])
            else:
                total = int(conn.execute(sa.select(sa.func.count()).select_from(rs)
                                         .where(*where)).scalar() or 0)
            ids = [row[0] for row in rows]
            by_id: dict[str, RunRecord] = {}
            if ids:
                for row in conn.execute(sa.select(r).where(r.c.id.in_(ids))).mappings():
                    by_id[row["id"]] = run_record(row)
            records = [by_id[i] for i in ids if i in by_id]
            self._attach_params_tags(conn, records)
        return RunPage(total=total, runs=records, latest=self.latest_metrics(ids))

    def metric_series(self, run_id: str, key: str, *, x: str = "step",
                      start: float | None = None, end: float | None = None,
                      max_points: int = 2000) -> MetricSeries:
        """One metric's points with x in [start, end], finite ones only, at most
        ``max_points`` of them: when there are more, the first and the last point and,
        in each of ``(max_points - 2) // 2`` buckets of equal x width, the lowest and the
        highest point (so the series' global extremes too); of tied points, an early one."""
        if max_points < 4:
            raise UserError(f"max_points must be 4 or more, not {max_points}.")
        m = s.metrics
        xcol = m.c.step if x == "step" else m.c.timestamp
        base = [m.c.run_id == run_id, m.c.key == key]
        ranged = [*([xcol >= start] if start is not None else []),
                  *([xcol <= end] if end is not None else [])]
        finite = sa.func.abs(m.c.value) < _INF  # NULL (NaN) and infinities are not drawn
        order = (xcol, m.c.step, m.c.id)
        with self.engine.connect() as conn:
            # the count of all points reads the index only; then one pass over the range
            total = int(conn.execute(sa.select(sa.func.count()).where(*base)).scalar() or 0)
            inside, n = conn.execute(sa.select(
                sa.func.count(), sa.func.coalesce(sa.func.sum(sa.case((finite, 1), else_=0)), 0),
            ).where(*base, *ranged)).one()
            inside, n = int(inside), int(n)
            if n <= max_points:
                rows = conn.execute(sa.select(xcol, m.c.value).where(*base, *ranged, finite)
                                    .order_by(*order)).all()
            else:
                x0, x1 = (conn.execute(sa.select(xcol).where(*base, *ranged, finite).order_by(
                    *(c.desc() if last else c for c in order)).limit(1)).scalar_one()
                    for last in (False, True))
                ids = self._bucket_extremes(conn, base, sa.and_(*ranged, finite), xcol, x,
                                            float(x0), float(x1), (max_points - 2) // 2)
                rows = conn.execute(sa.select(xcol, m.c.value).where(m.c.id.in_(ids))
                                    .order_by(*order)).all()
        return MetricSeries(total=total, in_range=inside, non_finite=inside - n,
                            xs=[row[0] for row in rows], ys=[float(row[1]) for row in rows],
                            downsampled=len(rows) < n)

    def _bucket_extremes(self, conn: Any, base: list[Any], keep: Any, xcol: Any, x: str,
                         x0: float, x1: float, buckets: int) -> list[int]:
        """The ids of the points to keep: first, last, each bucket's lowest and highest."""
        m = s.metrics
        width = (x1 - x0) or 1.0
        params = {"x0": x0, "x1": x1, "w": width, "nb": buckets}
        ends = [sa.select(m.c.id).where(*base, keep)
                .order_by(*(c.desc() if last else c for c in (xcol, m.c.step, m.c.id)))
                .limit(1).scalar_subquery() for last in (False, True)]
        if x == "step":  # an index range per bucket, no sort of the whole series
            bk = sa.select(sa.literal(0).label("b")).cte("bk", recursive=True)
            bk = bk.union_all(sa.select((bk.c.b + 1).label("b")).where(bk.c.b < buckets - 1))
            x0p, wp = sa.bindparam("x0", type_=sa.Float), sa.bindparam("w", type_=sa.Float)
            nbp = sa.bindparam("nb", type_=sa.Integer)
            lo: Any = x0p + bk.c.b * wp / nbp
            hi: Any = sa.case((bk.c.b == buckets - 1, sa.bindparam("x1", type_=sa.Float) + 1),
                              else_=x0p + (bk.c.b + 1) * wp / nbp)
            if self.dialect == "postgresql":  # bigint bounds, or the index is not used
                lo, hi = (sa.cast(sa.func.ceil(v), sa.BigInteger) for v in (lo, hi))
            inside = sa.and_(xcol >= lo, xcol < hi)
            picks = [sa.select(m.c.id).where(*base, keep, inside)
                     .order_by(m.c.value.desc() if high else m.c.value, xcol, m.c.step, m.c.id)
                     .limit(1).correlate(bk).scalar_subquery().label("pick")
                     for high in (False, True)]
            per_bucket = [sa.select(p).select_from(bk) for p in picks]
            ids: list[int] = []
            for sel in per_bucket:
                ids.extend(r[0] for r in conn.execute(sel, params) if r[0] is not None)
        else:  # by time: no index on it, so one grouped pass finds each bucket's extremes
            scaled = (xcol - x0) * buckets / width  # >= 0: truncation is the floor
            b: Any = (sa.func.floor(scaled) if self.dialect == "postgresql"
                 else sa.cast(scaled, sa.Integer))
            b = sa.case((b >= buckets, buckets - 1), else_=b)
            pts = sa.select(m.c.id, m.c.value, b.label("b")).where(*base, keep).subquery()
            agg = sa.select(pts.c.b, sa.func.min(pts.c.value).label("lo"),
                            sa.func.max(pts.c.value).label("hi")).group_by(pts.c.b).subquery()
            ids = []
            for col in (agg.c.lo, agg.c.hi):
                q = (sa.select(sa.func.min(pts.c.id)).select_from(
                    pts.join(agg, sa.and_(pts.c.b == agg.c.b, pts.c.value == col)))
                     .group_by(pts.c.b))
                ids.extend(r[0] for r in conn.execute(q))
        for e in ends:
            got = conn.execute(sa.select(e)).scalar()
            if got is not None:
                ids.append(got)
        return sorted(set(ids))
