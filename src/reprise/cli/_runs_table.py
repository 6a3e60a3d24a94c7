"""``reprise runs list`` as a table that fits the terminal.

The id is what a user copies, so its column is never cut: it shows the shortest
prefix that names the run alone (see ``reprise.tracking._query.short_run_ids``).
Then name, status, age and duration, then as many metric columns as fit, the
sort metric first; ``--columns`` picks instead. Presentation only.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from reprise.core.errors import UserError

__all__ = ["Column", "age", "duration", "fit_columns", "parse_columns", "print_runs"]

_GAP = 2  # rich's padding between two columns (one each side), none at the edges
_MIN_NAME = 8
_NAME_SHARE = 24  # a longer name gives way to metric columns (it ends in an ellipsis)
_FIXED = ("kind", "name", "status", "age", "started", "duration")
_STATUS_STYLE = {"running": "cyan", "finished": "green", "failed": "red", "killed": "yellow"}


@dataclass
class Column:
    """One column: its ``kind`` (``id``, ``name``, ..., ``metric``, ``param``, ``tag``),
    the key for the last three, and the header and cells it shows."""

    kind: str
    key: str = ""
    header: str = ""
    cells: list[str] = field(default_factory=list)

    @property
    def width(self) -> int:
        lines = [*self.header.splitlines(), *self.cells]
        return max((len(s) for s in lines), default=0)

    @property
    def numeric(self) -> bool:
        return self.kind == "metric"


def age(ts: float | None, now: float) -> str:
    """How long ago ``ts`` was: ``"now"``, ``"42s ago"``, ``"3m ago"``, ``"5h ago"``,
    ``"2d ago"``; a date beyond 60 days."""
    if ts is None:
        return "-"
    ago = max(0.0, now - ts)
    if ago >= 60 * 86400:
        return time.strftime("%Y-%m-%d", time.localtime(ts))
    for unit, seconds in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if ago >= seconds:
            return f"{int(ago // seconds)}{unit} ago"
    return "now"


def duration(seconds: float | None) -> str:
    """``"0.4s"``, ``"12s"``, ``"1m 05s"``, ``"2h 03m"``, ``"3d 04h"``."""
    if seconds is None:
        return "-"
    if seconds < 10:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    for big, small, size, sub in (("d", "h", 86400, 3600), ("h", "m", 3600, 60),
                                  ("m", "s", 60, 1)):
        if whole >= size:
            return f"{whole // size}{big} {(whole % size) // sub:02d}{small}"
    return f"{whole}s"  # unreachable: whole >= 60 here


def parse_columns(spec: str) -> list[tuple[str, str]]:
    """``"name,status,metric:acc"`` -> ``[("name", ""), ("status", ""), ("metric", "acc")]``;
    the id comes first unless placed elsewhere."""
    out: list[tuple[str, str]] = []
    for item in (part.strip() for part in spec.split(",")):
        kind, sep, key = item.partition(":")
        if kind in ("metric", "param", "tag") and sep and key:
            out.append((kind, key))
        elif not sep and (kind == "id" or kind in _FIXED):
            out.append((kind, ""))
        else:
            raise UserError(
                f"--columns: unknown column {item!r}; use a comma-separated list of id, "
                f"{', '.join(_FIXED)}, metric:KEY, param:KEY or tag:KEY.")
    if ("id", "") not in out:
        out.insert(0, ("id", ""))
    return out


def _cells(kind: str, key: str, rows: list[dict[str, Any]], short: dict[str, str],
           now: float) -> list[str]:
    from reprise.cli._render import _fmt, timestamp

    if kind == "id":
        return [short[r["id"]] for r in rows]
    if kind in ("metric", "param", "tag"):
        source = {"metric": "metrics", "param": "params", "tag": "tags"}[kind]
        return [_fmt(r[source].get(key)) for r in rows]
    if kind == "age":
        return [age(r["started_at"], now) for r in rows]
    if kind == "started":
        return [timestamp(r["started_at"]) for r in rows]
    if kind == "duration":
        return [duration(r["duration"]) for r in rows]
    return [str(r[kind]) for r in rows]


def _header(kind: str, key: str) -> str:
    if kind == "metric" and "/" in key:  # "train_mlp/best_val_loss" on two lines
        head, _, tail = key.rpartition("/")
        return f"{head}/\n{tail}"
    return f"{kind}:{key}" if kind in ("param", "tag") else (key or kind)


def _column(kind: str, key: str, rows: list[dict[str, Any]], short: dict[str, str],
            now: float) -> Column:
    return Column(kind, key, _header(kind, key), _cells(kind, key, rows, short, now))


def _auto_metrics(rows: list[dict[str, Any]], sort_metric: str | None) -> list[str]:
    """Metric keys, the sort metric first, then those most runs have, then by name."""
    counts: dict[str, int] = {}
    for r in rows:
        for k in r["metrics"]:
            if not k.startswith("system/"):
                counts[k] = counts.get(k, 0) + 1
    keys = sorted(counts, key=lambda k: (k != sort_metric, -counts[k], k))
    return keys


def _check_picked(picked: list[tuple[str, str]], rows: list[dict[str, Any]]) -> None:
    for kind, key in picked:
        if kind not in ("metric", "param", "tag"):
            continue
        source = {"metric": "metrics", "param": "params", "tag": "tags"}[kind]
        known = sorted({k for r in rows for k in r[source]})
        if key not in known:
            raise UserError(f"--columns: no listed run has a {kind} {key!r}; "
                            f"{kind}s here: {', '.join(known) or 'none'}.")


def fit_columns(rows: list[dict[str, Any]], short: dict[str, str], width: int, *,
                sort_metric: str | None = None, picked: list[tuple[str, str]] | None = None,
                now: float | None = None) -> tuple[list[Column], int]:
    """The columns to show in ``width`` characters, and how many metrics did not fit.

    With ``picked`` (from :func:`parse_columns`) exactly those, else the id, name,
    status, age and duration, then metrics while they fit. A name longer than 24
    characters gives way to metrics (it ends in an ellipsis, at 8 characters or
    more, when printed); the id is never cut.
    """
    now = time.time() if now is None else now
    if picked is not None:
        _check_picked(picked, rows)
        return [_column(k, key, rows, short, now) for k, key in picked], 0
    cols = [_column(k, "", rows, short, now)
            for k in ("id", "name", "status", "age", "duration")]
    used = (sum(min(c.width, _NAME_SHARE) if c.kind == "name" else c.width for c in cols)
            + _GAP * (len(cols) - 1))
    metrics = _auto_metrics(rows, sort_metric)
    shown = 0
    for key in metrics:
        col = _column("metric", key, rows, short, now)
        if used + _GAP + col.width > width:
            break
        cols.append(col)
        used += _GAP + col.width
        shown += 1
    return cols, len(metrics) - shown


def print_runs(rows: list[dict[str, Any]], short: dict[str, str], *,
               sort_metric: str | None = None, columns: str | None = None) -> None:
    """Print ``rows`` (from ``reprise.tracking.list_runs``) as a table fitting the console."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    con = Console()
    picked = parse_columns(columns) if columns else None
    cols, hidden = fit_columns(rows, short, con.width, sort_metric=sort_metric, picked=picked)
    table = Table(box=None, header_style="bold", pad_edge=False)
    fixed = sum(c.width for c in cols if c.kind != "name") + _GAP * (len(cols) - 1)
    for c in cols:
        if c.kind == "id":
            table.add_column(Text(c.header), no_wrap=True, min_width=c.width)
        elif c.kind == "name":  # the one column that gives way, with an ellipsis
            table.add_column(Text(c.header), no_wrap=True, overflow="ellipsis",
                             max_width=max(_MIN_NAME, con.width - fixed))
        else:
            table.add_column(Text(c.header), no_wrap=True,
                             justify="right" if c.numeric else "left")
    for i in range(len(rows)):
        table.add_row(*(Text(c.cells[i], style=_STATUS_STYLE.get(c.cells[i], ""))
                        if c.kind == "status" else Text(c.cells[i]) for c in cols))
    con.print(table)
    if hidden:
        con.print(f"[dim]+{hidden} metric(s) not shown: --columns name,metric:KEY,... "
                  "or --json[/]", highlight=False)
