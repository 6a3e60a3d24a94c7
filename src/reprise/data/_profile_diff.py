"""Comparing two profiles: the column type changes and per-column statistics that
``reprise data diff`` shows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from reprise.core.errors import UserError


def column_type_changes(old: Any, new: Any) -> list[tuple[str, str, str]]:
    """``(column, old_type, new_type)`` for columns in both whose type differs.

    ``old`` and ``new`` may each be an Arrow schema, a profile, or a ``{name: type}``
    mapping (as stored with a dataset version).

    Example:
        >>> column_type_changes({"a": "int64", "b": "string"}, {"a": "double"})
        [('a', 'int64', 'double')]
    """
    a, b = _column_types(old), _column_types(new)
    return [(name, a[name], b[name]) for name in a if name in b and a[name] != b[name]]


def diff_profiles(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """What changed between two profiles, as plain data for ``reprise data diff`` to render.

    Per common column only the statistics that differ are listed, each as
    ``{"old": ..., "new": ...}``; text columns also list ``top_added`` and
    ``top_removed`` (values that entered or left the most frequent list).

    Example:
        >>> a = profile_table(pa.table({"x": [1, 2]}))
        >>> b = profile_table(pa.table({"x": [1, 5], "y": ["a", "b"]}))
        >>> d = diff_profiles(a, b)
        >>> d["columns_added"], d["columns"]["x"]["max"]
        (['y'], {'old': 2, 'new': 5})
    """
    if "columns" not in old or "columns" not in new:
        return _diff_files(old, new)
    oc, nc = old["columns"], new["columns"]
    out: dict[str, Any] = {
        "rows": {"old": old.get("rows"), "new": new.get("rows")},
        "columns_added": [c for c in nc if c not in oc],
        "columns_removed": [c for c in oc if c not in nc],
        "type_changes": [list(t) for t in column_type_changes(old, new)],
        "columns": {},
    }
    for name in oc:
        if name in nc:
            change = _diff_column(oc[name], old.get("rows"), nc[name], new.get("rows"))
            if change:
                out["columns"][name] = change
    return out


def _column_types(obj: Any) -> dict[str, str]:
    if isinstance(obj, pa.Schema):
        return {f.name: str(f.type) for f in obj}
    if isinstance(obj, Mapping) and isinstance(obj.get("columns"), Mapping):
        return {k: str(v.get("type")) for k, v in obj["columns"].items()}
    if isinstance(obj, Mapping):
        return {str(k): str(v) for k, v in obj.items()}
    raise UserError(f"cannot read column types from a {type(obj).__name__}; give an Arrow "
                    "schema, a profile or a {column: type} mapping.")


_DIFF_STATS = ("mean", "std", "min", "max", "distinct")


def _diff_column(a: Mapping[str, Any], rows_a: int | None, b: Mapping[str, Any],
                 rows_b: int | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    fa, fb = _null_fraction(a, rows_a), _null_fraction(b, rows_b)
    if fa != fb:
        out["nulls_fraction"] = {"old": fa, "new": fb}
    for stat in _DIFF_STATS:
        if a.get(stat) != b.get(stat):
            out[stat] = {"old": a.get(stat), "new": b.get(stat)}
    if "top" in a and "top" in b:
        va, vb = [v for v, _ in a["top"] or []], [v for v, _ in b["top"] or []]
        added, removed = [v for v in vb if v not in va], [v for v in va if v not in vb]
        if added:
            out["top_added"] = added
        if removed:
            out["top_removed"] = removed
    return out


def _null_fraction(col: Mapping[str, Any], rows: int | None) -> float | None:
    return None if not rows else col.get("nulls", 0) / rows


def _diff_files(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in ("files", "bytes"):
        if old.get(key) != new.get(key):
            out[key] = {"old": old.get(key), "new": new.get(key)}
    ea, eb = old.get("extensions") or {}, new.get("extensions") or {}
    ext = {e: {"old": ea.get(e, 0), "new": eb.get(e, 0)} for e in sorted({*ea, *eb})
           if ea.get(e, 0) != eb.get(e, 0)}
    if ext:
        out["extensions"] = ext
    return out
