"""Checking request and batch values against the fields of a signature.

A :class:`_Plan` per field scans a column's values once: exact-type fast paths for
the common cases, then per-value checks that name the field and the kind of thing
got (never the value), and counts of values outside the training range.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from reprise.registry._fields import Field, FieldError

_ABSENT = object()
_FLOAT, _INT, _BOOL, _STRING, _TENSOR = range(5)
_I64 = 2**63
_F64 = 2**1023  # a Python int beyond this cannot become a float64


class _Plan:
    """How to check one field's values in pure Python: a fast loop for the common case
    (every value of the exact expected type), and the detailed path only on a miss."""

    __slots__ = ("cats", "field", "hi", "kind", "lo")

    def __init__(self, f: Field) -> None:
        self.field = f
        self.kind = _TENSOR if f.shape else {"float": _FLOAT, "int": _INT, "bool": _BOOL,
                                             "string": _STRING}[f.dtype]
        ranged = f.min is not None and f.max is not None and self.kind in (_FLOAT, _INT)
        self.lo, self.hi = (f.min, f.max) if ranged else (None, None)
        self.cats = (frozenset(f.categories)
                     if f.categories is not None and self.kind == _STRING else None)

    def scan(self, values: list[Any]) -> tuple[list[FieldError], int]:
        """This field's errors (at most 5, with rows) and its count of out-of-range values."""
        if self._all_exact(values):
            return [], self._outside(values, skip_none=False)
        problems: list[FieldError] = []
        for i, v in enumerate(values):
            problem = _value_problem(self.field, v)
            if problem is not None:
                problems.append(FieldError(self.field.name, problem[0], self.field.expected(),
                                           problem[1], row=i))
                if len(problems) >= 5:
                    break
        return problems, 0 if problems else self._outside(values, skip_none=True)

    def _all_exact(self, values: list[Any]) -> bool:
        kind = self.kind
        if kind == _FLOAT:
            for v in values:
                t = type(v)
                if t is not float and (t is not int or not -_F64 < v < _F64):
                    return False
        elif kind == _INT:
            for v in values:
                if type(v) is not int or not -_I64 <= v < _I64:
                    return False
        elif kind == _STRING:
            for v in values:
                if type(v) is not str:
                    return False
        elif kind == _BOOL:
            for v in values:
                if type(v) is not bool:
                    return False
        else:
            return False
        return True

    def _outside(self, values: list[Any], *, skip_none: bool) -> int:
        n = 0
        if self.cats is not None:
            cats = self.cats
            for v in values:
                if v not in cats and v is not None:
                    n += 1
        elif self.lo is not None:
            lo, hi = self.lo, self.hi
            for v in values:
                if skip_none and v is None:
                    continue
                if v < lo or v > hi:  # NaN compares false: not counted, as with numpy
                    n += 1
        return n


_RowPlan = tuple[tuple[str, int, Any, Any, "frozenset[Any] | None"], ...]


def _row_plan(plans: tuple[_Plan, ...]) -> _RowPlan:
    """What :func:`_clean_row` needs of each field, flattened once per signature."""
    return tuple((p.field.name, p.kind, p.lo, p.hi, p.cats) for p in plans)


def _clean_row(plan: _RowPlan, record: Mapping[Any, Any]) -> dict[str, list[Any]] | None:
    """The clean columns of one record (the common single-row request) in one loop, when
    its keys are exactly the inputs and every value is of its field's exact type and
    within its range or categories (what :meth:`_Plan.scan` passes with no error and no
    flag); None for anything else, which the general path then checks and reports."""
    if len(record) != len(plan):
        return None
    clean: dict[str, list[Any]] = {}
    for name, kind, lo, hi, cats in plan:
        v = record.get(name, _ABSENT)
        t = type(v)
        if kind == _FLOAT:
            if t is not float and (t is not int or not -_F64 < v < _F64):
                return None
        elif kind == _INT:
            if t is not int or not -_I64 <= v < _I64:
                return None
        elif kind == _STRING:
            if t is not str:
                return None
        elif kind != _BOOL or t is not bool:
            return None
        if cats is not None:
            if v not in cats:
                return None
        elif lo is not None and (v < lo or v > hi):  # NaN compares false, as in _outside
            return None
        clean[name] = [v]
    return clean


def _check_lengths(columns: Mapping[str, Any], errors: list[FieldError]) -> int:
    try:
        lengths = {len(v) for v in columns.values()}
    except TypeError:
        lengths = {len(v) for v in columns.values() if hasattr(v, "__len__")}
    if len(lengths) > 1:
        errors.append(FieldError("$", "length", "columns of one length",
                                 f"lengths {sorted(lengths)}"))
    rows = max(lengths) if lengths else 0
    if rows == 0:
        errors.append(FieldError("$", "length", "at least one row", "no rows"))
    return rows


def _as_sequence(values: Any) -> Any:
    """``values`` as a list, or a numpy array with a concrete dtype; None if neither."""
    if isinstance(values, str):
        return None
    if isinstance(values, Sequence):
        return list(values)
    np = sys.modules.get("numpy")  # an array can only exist if numpy is loaded already
    if np is not None and isinstance(values, np.ndarray):
        return values.tolist() if values.dtype == object else values
    return None


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


def _check_array(f: Field, arr: Any) -> tuple[Any, list[FieldError], int]:
    """Check a numpy column of a concrete dtype: its errors and its out-of-range count."""
    if f.shape and tuple(arr.shape[1:]) != f.shape:
        return arr, [FieldError(f.name, "shape", f"shape {list(f.shape)} per row",
                                f"shape {list(arr.shape[1:])}")], 0
    if not _dtype_fits(f.dtype, arr.dtype.kind):
        return arr, [FieldError(f.name, "type", f.expected(), f"dtype {arr.dtype}")], 0
    return arr, [], _outside_array(f, arr)


def _dtype_fits(dtype: str, kind: str) -> bool:
    return {"float": "fiub", "int": "iub", "bool": "b", "string": "UO"}[dtype].find(kind) >= 0


def _to_array(f: Field, values: list[Any] | None) -> Any:
    """Convert a checked column (a list) to a numpy array of the field's dtype."""
    import numpy as np

    if values is None:
        return None
    if f.dtype == "string":
        return np.asarray(values, dtype=object)
    if f.nullable:
        values = [math.nan if v is None else v for v in values]
    if f.shape:
        return np.asarray(values, dtype=np.float64 if f.dtype == "float" else None)
    dt = {"float": np.float64, "int": np.int64, "bool": np.bool_}[f.dtype]
    if f.nullable and f.dtype != "float":
        dt = np.float64  # NaN stands for null
    return np.asarray(values, dtype=dt)


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
    if f.dtype == "float":
        ok = isinstance(v, int | float) and not isinstance(v, bool)
        if ok and isinstance(v, int) and not -_F64 < v < _F64:
            return "type", "a number too large for a float64"
    elif f.dtype == "int":
        ok = ((isinstance(v, int) and not isinstance(v, bool))
              or (isinstance(v, float) and v.is_integer()))
        if ok and not -_I64 <= v < _I64:
            return "type", "an integer outside the int64 range"
    elif f.dtype == "bool":
        ok = isinstance(v, bool)
    else:
        ok = isinstance(v, str)
    return None if ok else ("type", _kind(v))


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


def _outside_array(f: Field, arr: Any) -> int:
    import numpy as np

    if f.categories is not None and f.dtype == "string":
        allowed = set(f.categories)
        return int(sum(1 for v in arr if v is not None and v not in allowed))
    if f.min is None or f.max is None or f.dtype not in ("float", "int") or f.shape:
        return 0
    values = np.asarray(arr, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        return int(np.count_nonzero((values < f.min) | (values > f.max)))
