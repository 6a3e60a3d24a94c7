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

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from reprise.core.errors import UserError
from reprise.registry._checks import (
    _ABSENT,
    _as_sequence,
    _check_array,
    _check_lengths,
    _clean_row,
    _kind,
    _Plan,
    _range_text,
    _row_plan,
    _to_array,
)
from reprise.registry._fields import Field, FieldError, Validated

__all__ = ["Field", "FieldError", "Signature", "Validated"]

_LISTED = 10  # unknown columns (and inputs) named in an error; the rest are counted


def _short(name: Any) -> str:
    text = str(name)
    return text if len(text) <= 64 else text[:61] + "..."


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
        self._row = _row_plan(self._plans)

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
            clean = _clean_row(self._row, records[0])
            if clean is not None:  # the common case: nothing to report
                return Validated(clean, 1)
            return self.check_columns({k: [v] for k, v in records[0].items()})
        # one column per *input*, never per key sent: distinct keys in many records must
        # not make a column each as long as the record list (time and memory quadratic)
        seen: dict[Any, None] = {}
        for r in records:
            seen.update(dict.fromkeys(r))
        columns = {n: [r.get(n, _ABSENT) for r in records] for n in self._by_name
                   if n in seen}
        rows = len(records) if seen else 0  # records without a key: no columns, no rows
        errors = [] if rows else [FieldError("$", "length", "at least one row", "no rows")]
        return self._check(columns, rows, errors, [n for n in seen if n not in self._by_name])

    def check_columns(self, columns: Any) -> Validated:
        """Like :meth:`validate_columns`, but without the conversion (see ``check_records``)."""
        if not isinstance(columns, Mapping):
            return Validated({}, 0, [FieldError("$", "type", "an object of columns",
                                                _kind(columns))])
        errors: list[FieldError] = []
        rows = _check_lengths(columns, errors)
        return self._check(columns, rows, errors,
                           [n for n in columns if n not in self._by_name])

    def _check(self, columns: Mapping[str, Any], rows: int, errors: list[FieldError],
               unknown: list[Any]) -> Validated:
        if self.extra_columns == "reject" and unknown:
            errors.extend(self._unexpected(unknown))
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

    def _unexpected(self, unknown: list[Any]) -> list[FieldError]:
        """Errors for the first few unknown columns (names cut short), and a count of the
        rest: an error body stays small whatever the request sent."""
        inputs = ", ".join(self.names[:_LISTED]) + (", ..." if len(self.names) > _LISTED
                                                      else "")
        out = [FieldError(_short(n), "unexpected", f"no such input (inputs: {inputs})",
                          "a column") for n in unknown[:_LISTED]]
        if len(unknown) > _LISTED:
            out.append(FieldError("$", "unexpected", "only the model's inputs",
                                  f"{len(unknown) - _LISTED} more unknown columns"))
        return out

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


# -- inference ------------------------------------------------------------------------------


