"""The parts of a signature: a :class:`Field` (one input or output column or tensor),
a :class:`FieldError` (what was wrong with one, never the value itself) and the
:class:`Validated` result of a check.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from reprise.core.errors import UserError

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
