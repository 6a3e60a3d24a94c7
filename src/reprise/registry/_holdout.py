"""The held-out rows ``optimize`` proves parity on and gates quantisation with.

Where they come from (recorded in the parity report as ``holdout``):

* given: ``holdout=`` a table (DataFrame, Arrow table, ``{name: array}``), or a file
  (CSV/TSV, Parquet, JSON Lines) or dataset version ``NAME@N`` by name
  (``reprise models optimize --holdout``);
* by default, **from the source version's lineage** (what ``reprise lineage NAME:V``
  shows: the steps upstream of its package, through every run that produced them):

  1. the candidates are the tables (pandas or Arrow artifacts) upstream of the package
     that hold every input column of the signature, i.e. raw rows, not features;
  2. the training side is left out: a table the packaging step itself consumed (the
     ``sample`` the signature was computed from) and every table upstream of one (the
     data before the split);
  3. of the rest, a table upstream of another candidate is left out (keep the split's
     output, not what it was split from);
  4. the one consumed nearest the package wins (the evaluation's input: the
     evaluation feeds the package directly), then the one with more rows.

  No table left: the report says ``none found in lineage`` and why (no run recorded,
  no table with the signature's columns, only the training side has them).

The labels (for the quantisation gate) are ``holdout_target=`` (an array or a column
name), else the column the package card's ``target`` names (``package_model`` records
a named target's name) when the table has it. At most :data:`HOLDOUT_ROWS` rows are
used, the first ones.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from reprise.core.errors import UserError

__all__ = ["HOLDOUT_ROWS", "Holdout", "resolve_holdout"]

HOLDOUT_ROWS = 10_000
_TABLES = ("pandas", "arrow")


@dataclass
class Holdout:
    """Rows (signature columns only), their labels when known, and where they came from."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    truth: Any = None
    info: dict[str, Any] = field(default_factory=dict)


def resolve_holdout(ws: Any, rec: Any, pkg: Any, holdout: Any, target: Any) -> Holdout:
    """The held-out set of ``optimize`` for version ``rec`` (its package ``pkg``)."""
    if holdout is False:
        return Holdout(info={"source": "none", "reason": "not asked for (holdout=False)"})
    if holdout is None:
        return _from_lineage(ws, rec, pkg, target)
    if isinstance(holdout, str | os.PathLike):
        frame, info = _read(ws, pkg, os.fspath(holdout))
        return _take(pkg, frame, target, info)
    return _take(pkg, holdout, target, {"source": "given"})


# -- lineage ----------------------------------------------------------------------------

@dataclass
class _Seen:
    name: str | None  # the input name of its nearest consumer
    consumer: str  # that step's name
    depth: int  # steps between that consumer and the package (0: the packaging step)
    producer: dict[str, Any] | None  # the step that output it, if recorded
    inputs: set[str] = field(default_factory=set)  # hashes its producer consumed


def _from_lineage(ws: Any, rec: Any, pkg: Any, target: Any) -> Holdout:
    from reprise.pipeline._lineage import lineage

    def none(reason: str) -> Holdout:
        return Holdout(info={"source": "none", "searched": "lineage", "reason": reason})

    if rec.run_id is None:
        return none(f"{rec.ref} was registered without a run (register_package), so it "
                    "has no recorded lineage")
    root = lineage(ws, rec.package_hash)["nodes"][0]
    top = root.get("produced_by")
    if top is None:
        return none(f"no recorded step produced the package of {rec.ref}")
    seen: dict[str, _Seen] = {}
    _walk(top, 0, seen)
    names = set(pkg.signature.names)
    tables = {h: n for h, n in _tables(ws, seen).items() if names <= set(n["columns"])}
    if not tables:
        return none(f"no table upstream of the package (run {rec.run_id}) holds the "
                    f"signature's {len(names)} input columns: the steps pass features or "
                    "arrays, not raw rows")
    training = {h for h in tables if seen[h].depth == 0}
    excluded = training | {a for h in training for a in _upstream(h, seen)}
    left = [h for h in tables if h not in excluded]
    left = [h for h in left if not any(h in _upstream(o, seen) for o in left if o != h)]
    if not left:
        sample = ", ".join(f"`{seen[h].name}`" for h in sorted(training)) or "none"
        return none(f"the only tables with the signature's columns upstream of the package "
                    f"are the training sample (input {sample} of step {top['step']}) and "
                    "the data it came from; nothing was held out")
    best = min(left, key=lambda h: (seen[h].depth, -tables[h]["rows"], h))
    s = seen[best]
    frame = _load(ws, best)
    prod = s.producer or {}
    info = {"source": "lineage", "artifact": best, "run": prod.get("run"),
            "step": prod.get("step"), "consumed_by": s.consumer, "as": s.name,
            "rows_total": tables[best]["rows"]}
    try:
        return _take(pkg, frame, target, info)
    except UserError as exc:  # found, but not usable: say so rather than fail optimize
        return none(f"the table {best[:12]} (output of step {prod.get('step')}) was found "
                    f"but cannot be used: {exc}")


def _walk(step: dict[str, Any], depth: int, seen: dict[str, _Seen]) -> None:
    """Each artifact the step ``step`` (``depth`` steps from the package) consumed, and
    upstream, keeping each artifact's nearest consumer."""
    for node in step.get("inputs") or ():
        h = node["hash"]
        prod = node.get("produced_by")
        known = seen.get(h)
        if known is None or depth < known.depth:
            seen[h] = _Seen(node.get("name"), step["step"], depth,
                            prod if prod and prod.get("step") else None,
                            known.inputs if known else set())
        if prod and prod.get("inputs") is not None:  # a repeated node has no inputs
            seen[h].inputs |= {i["hash"] for i in prod["inputs"]}
            _walk(prod, depth + 1, seen)


def _upstream(h: str, seen: dict[str, _Seen]) -> set[str]:
    out: set[str] = set()
    todo = [h]
    while todo:
        for i in seen[todo.pop()].inputs:
            if i not in out and i in seen:
                out.add(i)
                todo.append(i)
    return out


def _tables(ws: Any, seen: dict[str, _Seen]) -> dict[str, dict[str, Any]]:
    """The tables among the artifacts: their columns and row counts (from the store's
    records, without reading them)."""
    from reprise.core.errors import NotFoundError

    out = {}
    for h in seen:
        try:
            art = ws.metadata.get_artifact(h)
        except NotFoundError:
            continue
        if art.materializer not in _TABLES:
            continue
        meta = art.meta or {}
        columns = meta.get("columns")
        if columns is None and "schema" in meta:  # Arrow: "name: type" lines
            columns = [line.split(":", 1)[0] for line in str(meta["schema"]).splitlines()
                       if ":" in line and not line.startswith(("-", " "))]
        out[h] = {"columns": [str(c) for c in columns or ()], "rows": int(meta.get("rows", 0))}
    return out


def _load(ws: Any, h: str) -> Any:
    from reprise.store._materializers import load_object

    art = ws.metadata.get_artifact(h)
    obj = load_object(ws.artifacts, h, art.materializer, art.meta)
    return obj.to_pandas() if hasattr(obj, "schema") and hasattr(obj, "to_pandas") else obj


# -- given ------------------------------------------------------------------------------

def _read(ws: Any, pkg: Any, source: str) -> tuple[Any, dict[str, Any]]:
    """The first :data:`HOLDOUT_ROWS` rows of a file or a dataset version."""
    from reprise.registry._batch import _Reader

    reader = _Reader(source, ws, HOLDOUT_ROWS, None, pkg.signature.na_values)
    table = reader.whole(lambda: next(reader.chunks(), None))
    if table is None or table.num_rows == 0:
        raise UserError(f"the held-out set {source!r} has no rows")
    kind = "dataset" if reader.dataset is not None else "file"
    return table.to_pandas(), {"source": kind, "path": reader.label,
                               "rows_total": reader.total}


def _take(pkg: Any, table: Any, target: Any, info: dict[str, Any]) -> Holdout:
    """The signature's columns of ``table`` (first :data:`HOLDOUT_ROWS` rows) and the
    labels: ``target`` (array or column name), else the card's target column."""
    import numpy as np

    from reprise.registry._build import _example
    from reprise.registry._infer import _columns_of

    columns = _columns_of(table)
    missing = [n for n in pkg.signature.names if n not in columns]
    if missing:
        raise UserError(f"the held-out set has no column {missing[0]!r} of the signature "
                        f"({len(missing)} missing); give the raw training features")
    rows = _example(columns, pkg.signature, HOLDOUT_ROWS)
    truth: Any = None
    name = target if isinstance(target, str) else None
    if target is not None and name is None:
        truth = np.asarray(target)[:len(rows)]
        if len(truth) != len(rows):
            raise UserError(f"holdout_target has {len(truth)} labels for {len(rows)} "
                            "held-out rows")
        name = "given"
    else:
        name = name or (pkg.card or {}).get("target")
        if isinstance(target, str) and target not in columns:
            raise UserError(f"the held-out set has no target column {target!r}; columns: "
                            f"{sorted(columns)[:20]}")
        if name in columns:
            truth = np.asarray(columns[name])[:len(rows)]
        else:
            name = None
    total = info.get("rows_total")
    info = {**info, "rows_total": total if total is not None else len(rows)}
    # a missing value where training saw none: the model cannot take the row, leave it out
    required = [f.name for f in pkg.signature.inputs if not f.nullable]
    keep = [i for i, r in enumerate(rows) if all(r[n] is not None for n in required)]
    if len(keep) < len(rows):
        info["rows_with_missing_values"] = len(rows) - len(keep)
        rows = [rows[i] for i in keep]
        truth = truth[keep] if truth is not None else None
    checked = pkg.signature.with_policy(out_of_range="flag").validate_records(rows)
    if rows and not checked.ok:
        first = checked.errors[0]
        raise UserError(f"the held-out rows do not match the signature ({first.field}: "
                        f"{first.problem}, expected {first.expected}); give the raw "
                        "training features")
    return Holdout(rows=rows, truth=truth, info={**info, "rows": len(rows), "target": name})
