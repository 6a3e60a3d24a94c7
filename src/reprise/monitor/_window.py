"""A window of current data, summarised on a reference's bins, batch by batch.

A :class:`Window` holds one summary per reference column (fixed size) and the row count;
``update`` adds a batch, ``merge`` adds another window (from another batch stream or
server process), ``to_dict``/``from_dict`` carry it as JSON. Columns the reference does
not have are only named (``extra``); reference columns a batch lacks are counted
(``absent_rows``), never an error.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from reprise.core.errors import UserError
from reprise.monitor._parallel import each
from reprise.monitor._reference import Reference, Summary
from reprise.monitor._summary import CategoricalSummary, NumericSummary

__all__ = ["Window"]


class Window:
    """Current data summarised against ``reference``.

    Not thread-safe: one writer at a time (merge the windows of several writers).

    Example:
        >>> import pyarrow as pa
        >>> from reprise.monitor import fit_reference
        >>> ref = fit_reference(pa.table({"x": [float(i) for i in range(100)]}))
        >>> w = Window(ref); w.update(pa.table({"x": [1.0, None]})); w.rows
        2
    """

    def __init__(self, reference: Reference) -> None:
        self.reference = reference
        self.reference_id = reference.id
        self.rows = 0
        self.columns: dict[str, Summary] = {n: reference.empty(n) for n in reference.columns}
        self.absent_rows: dict[str, int] = {}
        self.extra: set[str] = set()
        self._spellings = reference.spellings()

    def update(self, data: Any) -> None:
        """Add a record batch, a table or a pandas DataFrame."""
        if not isinstance(data, pa.RecordBatch | pa.Table):
            if hasattr(data, "columns") and hasattr(data, "iloc"):
                data = pa.Table.from_pandas(data, preserve_index=False)
            else:
                raise UserError(f"a window takes Arrow batches or tables or pandas "
                                f"DataFrames, not {type(data).__name__}.")
        names = set(data.schema.names)
        self.extra |= names - set(self.reference.kinds)
        self.rows += data.num_rows
        present = []
        for name, summary in self.columns.items():
            if name in names:
                present.append((summary, data.column(name)))
            else:
                self.absent_rows[name] = self.absent_rows.get(name, 0) + data.num_rows
        each(lambda sc: sc[0].update(sc[1], self._spellings), present, data.num_rows)

    def merge(self, other: Window) -> Window:
        """A window of both (neither is changed)."""
        if other.reference_id != self.reference_id:
            raise UserError("these two windows were summarised against different references "
                            f"({self.reference_id} and {other.reference_id}); only windows "
                            "of one reference can be merged.")
        out = Window(self.reference)
        out.rows = self.rows + other.rows
        out.columns = {n: s.merge(other.columns[n])  # type: ignore[arg-type]
                       for n, s in self.columns.items()}
        out.absent_rows = {n: self.absent_rows.get(n, 0) + other.absent_rows.get(n, 0)
                           for n in set(self.absent_rows) | set(other.absent_rows)}
        out.extra = self.extra | other.extra
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"reference_id": self.reference_id, "rows": self.rows,
                "columns": {n: s.to_dict() for n, s in self.columns.items()},
                "absent_rows": dict(sorted(self.absent_rows.items())),
                "extra": sorted(self.extra)}

    @classmethod
    def from_dict(cls, reference: Reference, d: dict[str, Any]) -> Window:
        if d.get("reference_id") != reference.id:
            raise UserError(f"this window was summarised against reference "
                            f"{d.get('reference_id')!r}, not {reference.id!r}; summarise it "
                            "again against this reference.")
        w = cls(reference)
        w.rows = int(d["rows"])
        for name, s in w.columns.items():
            if isinstance(s, NumericSummary):
                w.columns[name] = NumericSummary.from_dict(s.spec, d["columns"][name])
            elif isinstance(s, CategoricalSummary):
                w.columns[name] = CategoricalSummary.from_dict(s.spec, d["columns"][name])
        w.absent_rows = {str(k): int(v) for k, v in d.get("absent_rows", {}).items()}
        w.extra = set(d.get("extra", []))
        return w
