"""What a search of the runs table asks of the metadata store, and what it answers: a
condition tree over run columns, params, tags and final metrics, a sort column, a page;
and one metric's series reduced to at most N points that keep every bucket's extremes.

Plain data (no SQLAlchemy): the dashboard builds these from its query language and the
SQL store answers them in the database (``_sql_search``), so that a page of 100 runs out
of 10,000 never loads the other 9,900 runs or any metric point.

Semantics (those of the dashboard's query language, ``reprise.ui._query``): a run's value
of a field is its column (``id``, ``name``, ``kind``, ``status``, ``parent_id``,
``started_at``, ``ended_at``, ``duration``), a param (its JSON value), a tag (a string)
or a final metric (the point of the highest step; NaN counts as missing). Numbers compare
with numbers, strings with strings (by code point), booleans with booleans (``=`` and
``!=`` only); a missing value (or null) equals only null and differs from every other
value; anything else is false. Sorting puts numbers (booleans as 0/1) first, then
strings, then missing values, ties in the order of newest run first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Union

from reprise.core._types import MetricPoint, RunRecord

__all__ = ["AllOf", "AnyOf", "Compare", "MetricSeries", "Negate", "RunCondition", "RunPage",
           "RunSearch"]

COLUMNS = ("id", "name", "kind", "status", "parent_id", "started_at", "ended_at", "duration")
PREFIXES = ("metrics", "params", "tags")
OPS = ("=", "==", "!=", "<", "<=", ">", ">=")


@dataclass(frozen=True)
class Compare:
    """``field op value``: field a column name or ``metrics.K`` / ``params.K`` / ``tags.K``;
    value a number, string, boolean or None."""

    field: str
    op: str
    value: Any


@dataclass(frozen=True)
class AllOf:
    items: tuple[RunCondition, ...]


@dataclass(frozen=True)
class AnyOf:
    items: tuple[RunCondition, ...]


@dataclass(frozen=True)
class Negate:
    item: RunCondition


RunCondition = Union[Compare, AllOf, AnyOf, Negate]  # noqa: UP007 (a runtime alias)


@dataclass(frozen=True)
class RunSearch:
    """A page of the runs that satisfy ``where``, ordered by ``sort`` (a field as in
    :class:`Compare`)."""

    where: RunCondition | None = None
    sort: str = "started_at"
    descending: bool = True
    limit: int = 100
    offset: int = 0
    top_level: bool = False


@dataclass
class RunPage:
    """``total`` runs matched; ``runs`` is the page, with params and tags, and ``latest``
    each page run's final metric points."""

    total: int
    runs: list[RunRecord]
    latest: dict[str, dict[str, MetricPoint]] = field(default_factory=dict)


@dataclass
class MetricSeries:
    """One metric of one run along x (``step`` or ``time``): ``total`` points in all,
    ``in_range`` within the asked x range, ``non_finite`` of those NaN or infinite (not
    drawn); ``xs``/``ys`` the finite points kept, sorted by x (steps written twice keep
    the order they were written in)."""

    total: int
    in_range: int
    non_finite: int
    xs: list[float]
    ys: list[float]
    downsampled: bool
