"""A model's input signature: the columns (or tensors) it takes, their types, shapes,
and the ranges and categories seen in training — inferred from the training data,
stored in the model package, and checked on every request and batch prediction.

Validation never echoes the values it was given: an error names the field, what
was expected and what kind of thing was got (``"a string"``, ``"shape [3]"``),
because a payload may carry personal data and error bodies end up in logs.

Format (JSON)::

    {"inputs": [{"name": "age", "dtype": "float", "nullable": false,
                 "min": 18.0, "max": 90.0},
                {"name": "plan", "dtype": "string", "categories": ["gold", "basic"]},
                {"name": "image", "dtype": "float", "shape": [28, 28]}],
     "outputs": [{"name": "prediction", "dtype": "int"},
                 {"name": "probabilities", "dtype": "float", "shape": [2]}],
     "extra_columns": "reject",      # or "ignore"
     "out_of_range": "flag",         # or "reject"
     "task": "binary", "classes": [0, 1],
     "na_values": ["", "NA", ...]}   # text read as missing in the training data's files

``na_values`` (absent: pandas' defaults) is what batch prediction reads a CSV or JSON
Lines file with, so a row spelled as in training gives the same nulls.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from reprise.core.errors import UserError

__all__ = ["DTYPES", "Field", "FieldError", "Signature", "Validated", "infer_signature"]

DTYPES = ("float", "int", "bool", "string")
_MAX_CATEGORIES = 100  # more distinct strings than this: no category check


@dataclass(frozen=True)
class Field:
    """One input or output: a column (``shape == ()``) or a fixed-shape tensor per row."""

    name: str
    dtype: str
    shape: tuple[int, ...] = ()
    nullable: bool = False
    min: float | None = None
    max: float | None = None
    categories: tuple[Any, ...] | None = None

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise UserError(f"signature field {self.name!r}: dtype {self.dtype!r} is not one "
                            f"of {list(DTYPES)}")

    def expected(self) -> str:
        """What a value of this field must be, in words (for error messages)."""
        kind = {"float": "a number", "int": "an integer", "bool": "true or false",
                "string": "a string"}[self.dtype]
        if self.shape:
            kind = f"an array of shape {list(self.shape)} of {kind.split(' ', 1)[1]}s"
        return kind + (" or null" if self.nullable else "")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "dtype": self.dtype}
        if self.shape:
            out["shape"] = list(self.shape)
        if self.nullable:
            out["nullable"] = True
        if self.min is not None:
            out["min"], out["max"] = self.min, self.max
        if self.categories is not None:
            out["categories"] = list(self.categories)
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Field:
        cats = d.get("categories")
        return cls(name=str(d["name"]), dtype=str(d["dtype"]),
                   shape=tuple(int(n) for n in d.get("shape") or ()),
                   nullable=bool(d.get("nullable", False)), min=d.get("min"),
                   max=d.get("max"), categories=tuple(cats) if cats is not None else None)


@dataclass(frozen=True)
class FieldError:
    """A problem with one field of a request: never the value itself."""

    field: str
    problem: str  # missing | unexpected | type | shape | null | out_of_range | category | length
    expected: str
    got: str
    row: int | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"field": self.field, "problem": self.problem,
                               "expected": self.expected, "got": self.got}
        if self.row is not None:
            out["row"] = self.row
        return out


@dataclass
class Validated:
    """The outcome of :meth:`Signature.validate`: clean columns, errors, flagged values."""

    columns: dict[str, Any]
    rows: int
    errors: list[FieldError] = field(default_factory=list)
    out_of_range: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.errors


@dataclass
class Signature:
    """The inputs a model takes and the outputs it gives; see the module docstring."""

    inputs: list[Field]
    outputs: list[Field] = field(default_factory=list)
    extra_columns: str = "reject"
    out_of_range: str = "flag"
    task: str | None = None
    classes: list[Any] | None = None
    na_values: list[str] | None = None

    def __post_init__(self) -> None:
        if self.extra_columns not in ("reject", "ignore"):
            raise UserError(f"extra_columns must be 'reject' or 'ignore'; got "
                            f"{self.extra_columns!r}")
        if self.out_of_range not in ("flag", "reject"):
            raise UserError(f"out_of_range must be 'flag' or 'reject'; got "
                            f"{self.out_of_range!r}")
        names = [f.name for f in self.inputs]
        if not names or len(set(names)) != len(names):
            raise UserError(f"a signature needs distinct input names; got {names}")
        self._by_name = {f.name: f for f in self.inputs}
        self._plans = tuple(_Plan(f) for f in self.inputs)

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.inputs]

    def to_dict(self) -> dict[str, Any]:
        out = {"inputs": [f.to_dict() for f in self.inputs],
               "outputs": [f.to_dict() for f in self.outputs],
               "extra_columns": self.extra_columns, "out_of_range": self.out_of_range,
               "task": self.task, "classes": self.classes}
        if self.na_values is not None:
            out["na_values"] = list(self.na_values)
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Signature:
        try:
            return cls(inputs=[Field.from_dict(f) for f in d["inputs"]],
                       outputs=[Field.from_dict(f) for f in d.get("outputs") or []],
                       extra_columns=d.get("extra_columns", "reject"),
                       out_of_range=d.get("out_of_range", "flag"), task=d.get("task"),
                       classes=d.get("classes"), na_values=d.get("na_values"))
        except (KeyError, TypeError, ValueError) as exc:
            raise UserError(f"not a model signature ({type(exc).__name__}: {exc})") from None

    def with_policy(self, *, extra_columns: str | None = None,
                    out_of_range: str | None = None) -> Signature:
        return Signature(self.inputs, self.outputs, extra_columns or self.extra_columns,
                         out_of_range or self.out_of_range, self.task, self.classes,
                         self.na_values)

    # -- validation --------------------------------------------------------------------
    # Two stages, so that a server can check every request at once and convert to numpy
    # once per micro-batch: ``check_*`` is pure Python (plain lists in, plain lists out,
    # ~10 µs for a 20-column row), ``to_arrays`` converts. ``validate_*`` does both.

    def validate_records(self, records: Any) -> Validated:
        """Validate a list of ``{column: value}`` records (the JSON request form)."""
        return self._converted(self.check_records(records))

    def validate_columns(self, columns: Any) -> Validated:
        """Validate ``{column: list or array}`` (the columnar form); all columns one length."""
        return self._converted(self.check_columns(columns))

    def check_records(self, records: Any) -> Validated:
        """Like :meth:`validate_records`, but the clean columns stay Python lists (numpy
        arrays given stay arrays): hand them to :meth:`to_arrays`, alone or concatenated
        with other requests' columns."""
        if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
            return Validated({}, 0, [FieldError("$", "type", "a list of objects (records)",
                                                _kind(records))])
        if len(records) == 1:
            return self.check_columns({k: [v] for k, v in records[0].items()})
        names: dict[str, None] = {}
        for r in records:
            names.update(dict.fromkeys(r))
        return self.check_columns({n: [r.get(n, _ABSENT) for r in records] for n in names})

    def check_columns(self, columns: Any) -> Validated:
        """Like :meth:`validate_columns`, but without the conversion (see ``check_records``)."""
        if not isinstance(columns, Mapping):
            return Validated({}, 0, [FieldError("$", "type", "an object of columns",
                                                _kind(columns))])
        errors: list[FieldError] = []
        rows = _check_lengths(columns, errors)
        if self.extra_columns == "reject" and not columns.keys() <= self._by_name.keys():
            errors.extend(FieldError(name, "unexpected", "no such input (inputs: "
                                     + ", ".join(self.names) + ")", "a column")
                          for name in columns if name not in self._by_name)
        clean: dict[str, Any] = {}
        flagged: dict[str, int] = {}
        for plan in self._plans:
            f = plan.field
            values = columns.get(f.name, _ABSENT)
            if values is _ABSENT:
                errors.append(FieldError(f.name, "missing", f.expected(), "nothing"))
                continue
            if type(values) is not list:
                values = _as_sequence(values)
                if values is None:
                    errors.append(FieldError(f.name, "type", f"a list of {f.expected()}",
                                             _kind(columns[f.name])))
                    continue
            if isinstance(values, list):
                problems, outside = plan.scan(values)
            else:  # a numpy array with a concrete dtype
                values, problems, outside = _check_array(f, values)
            errors.extend(problems)
            if problems:
                clean[f.name] = values if not isinstance(values, list) else None
                continue
            if outside:
                flagged[f.name] = outside
                if self.out_of_range == "reject":
                    errors.append(FieldError(f.name, "out_of_range", _range_text(f),
                                             f"{outside} value(s) outside it"))
            clean[f.name] = values
        return Validated(clean, rows, errors, flagged)

    def to_arrays(self, columns: Mapping[str, Any]) -> dict[str, Any]:
        """Convert checked columns (lists from :meth:`check_columns`) to numpy arrays of the
        signature's dtypes; arrays pass through, ``None`` (a column with errors) stays."""
        out: dict[str, Any] = {}
        for plan in self._plans:
            if plan.field.name in columns:
                values = columns[plan.field.name]
                out[plan.field.name] = (_to_array(plan.field, values)
                                        if isinstance(values, list) else values)
        return out

    def _converted(self, checked: Validated) -> Validated:
        checked.columns = self.to_arrays(checked.columns)
        return checked


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


# -- inference ------------------------------------------------------------------------------


def infer_signature(data: Any, *, outputs: Iterable[Field] = (), task: str | None = None,
                    classes: Sequence[Any] | None = None, extra_columns: str = "reject",
                    out_of_range: str = "flag") -> Signature:
    """The signature of a model trained on ``data``: a DataFrame, an Arrow table, a
    mapping of columns, or ``{"name": ndarray}`` for tensor inputs (shape per row).

    Example:
        >>> import pandas as pd
        >>> sig = infer_signature(pd.DataFrame({"age": [20.0, 60.0], "plan": ["a", "b"]}))
        >>> [f.to_dict() for f in sig.inputs]  # doctest: +NORMALIZE_WHITESPACE
        [{'name': 'age', 'dtype': 'float', 'min': 20.0, 'max': 60.0},
         {'name': 'plan', 'dtype': 'string', 'categories': ['a', 'b']}]
    """
    columns = _columns_of(data)
    fields = [_infer_field(name, values) for name, values in columns.items()]
    return Signature(fields, list(outputs), extra_columns, out_of_range, task,
                     list(classes) if classes is not None else None)


def _columns_of(data: Any) -> dict[str, Any]:
    import numpy as np

    if hasattr(data, "to_pandas") and hasattr(data, "schema"):  # pyarrow.Table
        data = data.to_pandas()
    if hasattr(data, "columns") and hasattr(data, "dtypes"):  # pandas.DataFrame
        return {str(c): data[c].to_numpy() for c in data.columns}
    if isinstance(data, Mapping):
        return {str(k): np.asarray(v) for k, v in data.items()}
    raise UserError(f"cannot infer a signature from a {type(data).__name__}; give the "
                    "training features as a DataFrame, an Arrow table or {name: array}")


def _infer_field(name: str, values: Any) -> Field:
    import numpy as np

    arr = np.asarray(values)
    shape = tuple(int(n) for n in arr.shape[1:])
    kind = arr.dtype.kind
    if kind == "O":
        strings = [v for v in arr.tolist() if v is not None and v == v]
        if not all(isinstance(v, str) for v in strings):
            raise UserError(f"column {name!r} mixes types; convert it before training")
        distinct = sorted(set(strings))
        cats = tuple(distinct) if len(distinct) <= _MAX_CATEGORIES else None
        return Field(name, "string", nullable=len(strings) < len(arr), categories=cats)
    if kind == "U":
        distinct = sorted(set(arr.tolist()))
        cats = tuple(distinct) if len(distinct) <= _MAX_CATEGORIES else None
        return Field(name, "string", categories=cats)
    if kind == "b":
        return Field(name, "bool", shape=shape)
    if kind not in "iuf":
        raise UserError(f"column {name!r} has dtype {arr.dtype}, which a signature cannot "
                        "describe; use numbers, booleans or strings")
    dtype = "float" if kind == "f" else "int"
    finite = arr[np.isfinite(arr)] if kind == "f" else arr
    nullable = kind == "f" and bool(np.isnan(arr).any())
    if shape or finite.size == 0:
        return Field(name, dtype, shape=shape, nullable=nullable)
    lo, hi = finite.min(), finite.max()
    return Field(name, dtype, nullable=nullable,
                 min=float(lo) if dtype == "float" else int(lo),
                 max=float(hi) if dtype == "float" else int(hi))
