"""The validation of ``reprise.registry._signature`` before its fast path (a frozen copy):
the restructured implementation must give the same results. Functions take the
Signature as their first argument."""

# ruff: noqa
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from reprise.registry._signature import Field, FieldError, Validated

_ABSENT = object()


def validate_records(self: Any, records: Any) -> Validated:
    """Validate a list of ``{column: value}`` records (the JSON request form)."""
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        return Validated({}, 0, [FieldError("$", "type", "a list of objects (records)",
                                            _kind(records))])
    names: dict[str, None] = {}
    for r in records:
        names.update(dict.fromkeys(r))
    columns = {n: [r.get(n, _ABSENT) for r in records] for n in names}
    return validate_columns(self, columns)

def validate_columns(self: Any, columns: Any) -> Validated:
    """Validate ``{column: list or array}`` (the columnar form); all columns one length."""
    if not isinstance(columns, Mapping):
        return Validated({}, 0, [FieldError("$", "type", "an object of columns",
                                            _kind(columns))])
    errors: list[FieldError] = []
    lengths = {len(v) for v in columns.values() if hasattr(v, "__len__")}
    if len(lengths) > 1:
        errors.append(FieldError("$", "length", "columns of one length",
                                 f"lengths {sorted(lengths)}"))
    rows = max(lengths) if lengths else 0
    if rows == 0:
        errors.append(FieldError("$", "length", "at least one row", "no rows"))
    for name in columns:
        if name not in self._by_name and self.extra_columns == "reject":
            errors.append(FieldError(name, "unexpected", "no such input (inputs: "
                                     + ", ".join(self.names) + ")", "a column"))
    clean: dict[str, Any] = {}
    flagged: dict[str, int] = {}
    for f in self.inputs:
        if f.name not in columns:
            errors.append(FieldError(f.name, "missing", f.expected(), "nothing"))
            continue
        values = columns[f.name]
        if not isinstance(values, (Sequence, *_array_type())) or isinstance(values, str):
            errors.append(FieldError(f.name, "type", f"a list of {f.expected()}",
                                     _kind(values)))
            continue
        arr, problems, outside = _check_field(f, values, rows)
        errors.extend(problems)
        if outside:
            flagged[f.name] = outside
            if self.out_of_range == "reject":
                errors.append(FieldError(f.name, "out_of_range", _range_text(f),
                                         f"{outside} value(s) outside it"))
        clean[f.name] = arr
    return Validated(clean, rows, errors, flagged)





def _array_type() -> tuple[type, ...]:
    import numpy as np

    return (np.ndarray,)


def _kind(value: Any) -> str:
    """What sort of thing ``value`` is, without its content."""
    if value is _ABSENT:
        return "nothing"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list | tuple):
        return f"an array of length {len(value)}"
    return f"a {type(value).__name__}"


def _range_text(f: Field) -> str:
    if f.categories is not None:
        return f"one of the {len(f.categories)} categories seen in training"
    return f"within [{f.min}, {f.max}] (the training range)"


def _check_field(f: Field, values: Any, rows: int) -> tuple[Any, list[FieldError], int]:
    """Convert one column to a numpy array; its errors and its out-of-range count."""
    import numpy as np

    errors: list[FieldError] = []
    if isinstance(values, np.ndarray) and values.dtype != object:
        arr = values
        if f.shape and tuple(arr.shape[1:]) != f.shape:
            errors.append(FieldError(f.name, "shape", f"shape {list(f.shape)} per row",
                                     f"shape {list(arr.shape[1:])}"))
            return arr, errors, 0
        if not _dtype_fits(f.dtype, arr.dtype.kind):
            errors.append(FieldError(f.name, "type", f.expected(), f"dtype {arr.dtype}"))
            return arr, errors, 0
    else:
        arr, errors = _from_values(f, values)
        if errors:
            return arr, errors[:5], 0
    return arr, errors, _outside(f, arr)


def _dtype_fits(dtype: str, kind: str) -> bool:
    return {"float": "fiub", "int": "iub", "bool": "b", "string": "UO"}[dtype].find(kind) >= 0


def _from_values(f: Field, values: Sequence[Any]) -> tuple[Any, list[FieldError]]:
    import numpy as np

    errors: list[FieldError] = []
    for i, v in enumerate(values):
        problem = _value_problem(f, v)
        if problem is not None:
            errors.append(FieldError(f.name, problem[0], f.expected(), problem[1], row=i))
            if len(errors) >= 5:
                break
    if errors:
        return None, errors
    if f.dtype == "string":
        return np.asarray(values, dtype=object), errors
    if f.nullable:
        values = [math.nan if v is None else v for v in values]
    if f.shape:
        return np.asarray(values, dtype=np.float64 if f.dtype == "float" else None), errors
    dt = {"float": np.float64, "int": np.int64, "bool": np.bool_}[f.dtype]
    if f.nullable and f.dtype != "float":
        dt = np.float64  # NaN stands for null
    return np.asarray(values, dtype=dt), errors


def _value_problem(f: Field, v: Any) -> tuple[str, str] | None:
    if v is _ABSENT:
        return "missing", "nothing"
    if v is None:
        return None if f.nullable else ("null", "null")
    if f.shape:
        got = _shape_of(v)
        if got is None:
            return "type", _kind(v)
        if got != f.shape:
            return "shape", f"shape {list(got)}"
        return None
    ok = {"float": lambda x: isinstance(x, int | float) and not isinstance(x, bool),
          "int": lambda x: (isinstance(x, int) and not isinstance(x, bool))
          or (isinstance(x, float) and x.is_integer()),
          "bool": lambda x: isinstance(x, bool),
          "string": lambda x: isinstance(x, str)}[f.dtype]
    return None if ok(v) else ("type", _kind(v))


def _shape_of(v: Any) -> tuple[int, ...] | None:
    """The shape of a nested list of numbers, or None when it is ragged or not numbers."""
    if isinstance(v, bool) or isinstance(v, int | float):
        return ()
    if not isinstance(v, list) or not v:
        return None
    inner = {_shape_of(x) for x in v}
    if len(inner) != 1 or None in inner:
        return None
    (shape,) = inner
    return (len(v), *shape) if shape is not None else None


def _outside(f: Field, arr: Any) -> int:
    import numpy as np

    if f.categories is not None and f.dtype == "string":
        allowed = set(f.categories)
        return int(sum(1 for v in arr if v is not None and v not in allowed))
    if f.min is None or f.max is None or f.dtype not in ("float", "int") or f.shape:
        return 0
    values = np.asarray(arr, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        return int(np.count_nonzero((values < f.min) | (values > f.max)))


