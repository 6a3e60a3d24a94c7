"""Validation against pandera schemas, streamed batch by batch, with a readable report.

pandera checks each batch (types, nullability, ranges, categories, regex, custom
checks); this module adds what batching would break or hide: row numbers in the
whole file rather than the batch, uniqueness across batches, and a report grouped
by column and rule with the first offending rows, which is what a person fixing
the data needs to see.
"""

from __future__ import annotations

import importlib.util
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reprise.core.errors import UserError

__all__ = [
    "RuleFailure",
    "StreamValidator",
    "ValidationError",
    "ValidationReport",
    "load_schema",
    "schema_from_stored",
    "schema_to_spec",
    "text_columns",
    "validate_frame",
]

MAX_EXAMPLES = 5


class ValidationError(UserError):
    """Data broke its schema; ``report`` says where."""

    def __init__(self, message: str, report: ValidationReport) -> None:
        super().__init__(message)
        self.report = report


@dataclass
class RuleFailure:
    column: str | None
    rule: str
    count: int = 0
    examples: list[dict[str, Any]] = field(default_factory=list)
    """``{"row": 1-based row number, "value": failing value, "record": the row}``."""

    def to_dict(self) -> dict[str, Any]:
        return {"column": self.column, "rule": self.rule, "count": self.count,
                "examples": self.examples}


@dataclass
class ValidationReport:
    rows: int = 0
    failing_rows: int = 0
    failures: list[RuleFailure] = field(default_factory=list)
    table_level: bool = False
    """A failure that no row-level fix can cure (a missing column, a wrong dtype)."""

    @property
    def ok(self) -> bool:
        return not self.failures

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "rows": self.rows, "failing_rows": self.failing_rows,
                "table_level": self.table_level,
                "failures": [f.to_dict() for f in self.failures]}

    def render(self) -> str:
        if self.ok:
            return f"valid: {self.rows} rows"
        lines = [f"{self.failing_rows} of {self.rows} rows fail validation:"]
        for f in self.failures:
            where = f"column {f.column!r}" if f.column else "table"
            lines.append(f"  {where}: rule {f.rule} fails on {f.count} row(s)")
            for ex in f.examples:
                row = f"row {ex['row']}" if ex.get("row") else "(whole column)"
                note = f" ({ex['note']})" if ex.get("note") else ""
                lines.append(f"    {row}: {ex.get('value')!r}{note}  {_brief(ex.get('record'))}"
                             .rstrip())
        return "\n".join(lines)


def _brief(record: dict[str, Any] | None, fields: int = 5) -> str:
    if not record:
        return ""
    items = list(record.items())
    shown = ", ".join(f"{k}={v!r}" for k, v in items[:fields])
    return "{" + shown + (", ..." if len(items) > fields else "") + "}"


def load_schema(ref: Any, base: Path | None = None) -> tuple[Any, str | None, str | None]:
    """A pandera schema from an object, ``FILE.py:NAME``, or a YAML/JSON file.

    Returns ``(schema, spec, source)``: ``spec`` is pandera's JSON form when the
    schema survives serialisation (None when it has unregistered custom checks, which
    are then loaded from ``source`` each time), ``source`` is where it came from.
    """
    import pandera.pandas as pa

    if isinstance(ref, pa.DataFrameSchema):
        return ref, schema_to_spec(ref), None
    if not isinstance(ref, str):
        raise UserError(f"a schema must be a pandera DataFrameSchema, FILE.py:NAME or a "
                        f"YAML/JSON file, not {type(ref).__name__}.")
    path_part, sep, attr = ref.rpartition(":") if ".py:" in ref else (ref, "", "")
    path = Path(path_part)
    if base is not None and not path.is_absolute() and not path.exists():
        path = base / path
    if not path.exists():
        raise UserError(f"schema file {path_part!r} does not exist.")
    try:
        if sep:
            schema = _schema_from_python(path, attr)
        elif path.suffix.lower() in (".yaml", ".yml"):
            schema = pa.DataFrameSchema.from_yaml(path)
        elif path.suffix.lower() == ".json":
            schema = pa.DataFrameSchema.from_json(path)
        else:
            raise UserError(f"schema {ref!r}: give FILE.py:NAME, or a .yaml/.json file "
                            "written by pandera.")
    except UserError:
        raise
    except Exception as exc:  # pandera/yaml parse errors: the user's file is wrong
        raise UserError(f"cannot read schema {ref!r}: {type(exc).__name__}: {exc}") from None
    return schema, schema_to_spec(schema), f"{path.resolve()}:{attr}" if sep else str(ref)


def _schema_from_python(path: Path, attr: str) -> Any:
    import pandera.pandas as pa

    name = f"_reprise_schema_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UserError(f"cannot load {path} as Python.")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    schema = getattr(module, attr, None)
    if schema is None:
        raise UserError(f"{path} has no {attr!r}.")
    if isinstance(schema, type) and issubclass(schema, pa.DataFrameModel):
        schema = schema.to_schema()
    if not isinstance(schema, pa.DataFrameSchema):
        raise UserError(f"{path}:{attr} is a {type(schema).__name__}, not a pandera "
                        "DataFrameSchema or DataFrameModel.")
    return schema


def schema_to_spec(schema: Any) -> str | None:
    """pandera's JSON form, or None when serialising would silently drop custom checks."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            spec = schema.to_json()
        except Exception:
            return None
    if any("serialized" in str(w.message) or "skipped" in str(w.message) for w in caught):
        return None
    return str(spec)


def schema_from_stored(spec: str | None, source: str | None, base: Path) -> Any:
    import pandera.pandas as pa

    if spec:
        return pa.DataFrameSchema.from_json(spec)
    if source:
        return load_schema(source, base)[0]
    raise UserError("the attached schema has neither a stored form nor a source.")


def text_columns(schema: Any) -> set[str]:
    """Columns the schema declares as text (mixed-type detection leaves them alone)."""
    out = set()
    for name, col in schema.columns.items():
        dtype = str(col.dtype).lower() if col.dtype is not None else ""
        if "str" in dtype or "object" in dtype or "category" in dtype:
            out.add(name)
    return out


def arrow_column_types(schema: Any) -> dict[str, Any]:
    """CSV column types implied by the schema's text columns (so '007' stays '007')."""
    import pyarrow as pa

    return {name: pa.string() for name in text_columns(schema)}


class StreamValidator:
    """Validate batches one after another; collect a report and per-batch failing masks."""

    def __init__(self, schema: Any, max_examples: int = MAX_EXAMPLES) -> None:
        self.unique = [n for n, c in schema.columns.items() if getattr(c, "unique", False)]
        for name in self.unique:  # checked across batches below, not per batch
            schema = schema.update_column(name, unique=False)
        self.schema = schema
        self.max_examples = max_examples
        self.report = ValidationReport()
        self._rules: dict[tuple[str | None, str], RuleFailure] = {}
        self._seen: dict[str, dict[Any, int]] = {n: {} for n in self.unique}

    def check(self, batch: Any, first_row: int) -> Any:
        """Validate one Arrow record batch whose first row is ``first_row`` (0-based);
        return a numpy bool mask of its failing rows."""
        import numpy as np
        import pandera.pandas as pa

        df = batch.to_pandas()
        mask = np.zeros(len(df), dtype=bool)
        self.report.rows += len(df)
        try:
            self.schema.validate(df, lazy=True)
        except pa.errors.SchemaErrors as exc:
            for rec in exc.failure_cases.to_dict("records"):
                idx = rec.get("index")
                column = rec.get("column")
                column = None if column is None or column != column else str(column)
                rule = str(rec.get("check"))
                if idx is None or idx != idx:  # table level: missing column, dtype...
                    self.report.table_level = True
                    self._add(column, rule, None, rec.get("failure_case"), None)
                    continue
                i = int(idx)
                mask[i] = True
                self._add(column, rule, first_row + i + 1, rec.get("failure_case"),
                          _row(df, i))
        except pa.errors.SchemaError as exc:  # non-lazy failures (rare: schema-level)
            self.report.table_level = True
            self._add(None, type(exc).__name__, None, str(exc), None)
        for name in self.unique:
            if name not in df.columns:
                continue
            seen = self._seen[name]
            for i, value in enumerate(df[name].tolist()):
                if value is None or value != value:
                    continue
                first = seen.setdefault(value, first_row + i + 1)
                if first != first_row + i + 1:
                    mask[i] = True
                    self._add(name, "unique", first_row + i + 1, value, _row(df, i),
                              note=f"first seen at row {first}")
        self.report.failing_rows += int(mask.sum())
        return mask

    def _add(self, column: str | None, rule: str, row: int | None, value: Any,
             record: dict[str, Any] | None, note: str | None = None) -> None:
        failure = self._rules.get((column, rule))
        if failure is None:
            failure = self._rules[(column, rule)] = RuleFailure(column, rule)
            self.report.failures.append(failure)
        failure.count += 1
        if len(failure.examples) < self.max_examples:
            ex: dict[str, Any] = {"row": row, "value": _plain(value)}
            if record is not None:
                ex["record"] = {k: _plain(v) for k, v in record.items()}
            if note:
                ex["note"] = note
            failure.examples.append(ex)


def _row(df: Any, i: int) -> dict[str, Any]:
    """Row ``i`` with each value in its column's own type (``iloc[i]`` would upcast)."""
    return {str(c): df[c].iat[i] for c in df.columns}


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):  # numpy scalars too: plain floats for JSON and messages
        return None if value != value else float(value)
    item = getattr(value, "item", None)
    if callable(item):
        try:
            return _plain(item())
        except (TypeError, ValueError):
            pass
    return str(value)


def validate_frame(data: Any, schema: Any, *, batch_rows: int = 131_072) -> ValidationReport:
    """Validate a pandas DataFrame or Arrow table against a pandera schema (object,
    ``FILE.py:NAME`` or YAML/JSON) inside a step; raise :class:`ValidationError` with the
    report when rows fail, so nothing downstream runs on bad data."""
    import pyarrow as pa

    schema_obj = load_schema(schema)[0]
    table = data if isinstance(data, pa.Table) else pa.Table.from_pandas(data, preserve_index=False)
    validator = StreamValidator(schema_obj)
    row = 0
    for batch in table.to_batches(max_chunksize=batch_rows):
        validator.check(batch, row)
        row += batch.num_rows
    if not validator.report.ok:
        raise ValidationError("data does not match its schema:\n" + validator.report.render(),
                              validator.report)
    return validator.report
