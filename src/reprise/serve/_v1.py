"""Reprise's own prediction API: ``POST /v1/models/NAME[/versions/V]/predict``.

Bodies: ``{"records": [{column: value}, ...]}``, a bare list of records, or
``{"columns": {column: [values]}}``. Answers name the version that computed them:
``{"model": NAME, "version": V, "predictions": ...}`` — a list with one entry per row
for records (the value itself when the model has one output, else ``{output: value}``),
or ``{output: [values]}`` for columns; ``out_of_range`` counts flagged values per field.

A missing value is JSON ``null``, here and in OIP tensors; strings are taken as sent
(``"NA"`` is a string, not a missing value, unlike in a CSV file read by ``reprise
predict``): a JSON client can always say ``null``, and rewriting a value it sent on
purpose would be silent.
"""

from __future__ import annotations

from typing import Any

from reprise.registry import Validated
from reprise.serve._batcher import Result
from reprise.serve._http import HTTPError
from reprise.serve._models import ServedModel

__all__ = ["check_v1", "v1_answer"]

_FORMS = 'a JSON object {"records": [...]} or {"columns": {...}}, or a list of records'


def check_v1(model: ServedModel, payload: Any) -> tuple[Validated, bool]:
    """Check a parsed body against the model's signature; (checked, columnar)."""
    sig = model.signature
    if isinstance(payload, list):
        return sig.check_records(payload), False
    if isinstance(payload, dict) and len(payload) == 1:
        if "records" in payload:
            return sig.check_records(payload["records"]), False
        if "columns" in payload:
            return sig.check_columns(payload["columns"]), True
    got = ("an object with keys " + ", ".join(k[:64] for k in sorted(map(str, payload))[:10])
           if isinstance(payload, dict) else f"a JSON {type(payload).__name__}")
    raise HTTPError(422, f"the body must be {_FORMS}", kind="invalid",
                    fields=[{"field": "$", "problem": "type", "expected": _FORMS, "got": got}])


def v1_answer(model: ServedModel, checked: Validated, result: Result,
              columnar: bool) -> dict[str, Any]:
    outputs = result.outputs
    predictions: Any
    if columnar:
        predictions = outputs
    elif len(outputs) == 1:
        (predictions,) = outputs.values()
    else:
        names = list(outputs)
        predictions = [dict(zip(names, row, strict=True))
                       for row in zip(*outputs.values(), strict=True)]
    out: dict[str, Any] = {"model": model.name, "version": model.version,
                           "predictions": predictions}
    if checked.out_of_range:
        out["out_of_range"] = checked.out_of_range
    return out
