"""Refusing non-finite numbers on the way in and out of a model (422, never a 200 with
``null`` or a prediction computed from infinity).

Inputs are checked as the model will see them: a servable whose ``float_dtype`` is
``"float32"`` (a torch package) turns any number beyond ±3.4e38 into infinity, so those
count as non-finite too. JSON cannot carry NaN or infinity (the parser refuses the
literals), but binary tensor data can. Outputs: any NaN or infinity in a float output
(probabilities of ``1e308`` through ``exp``, say).

Each check is one ``sum`` (plus ``min``/``max`` for float32) over a column, in C (over a
column of rows, such as probabilities, chained end to end); only a column that fails is
walked in Python to find the first bad row.
"""

from __future__ import annotations

import math
import weakref
from itertools import chain
from typing import Any

from reprise.serve._batcher import Result
from reprise.serve._http import HTTPError
from reprise.serve._models import ServedModel

__all__ = ["check_inputs", "check_outputs"]

_LIMITS = {"float64": math.inf, "float32": 3.4028234663852886e38}
_FLOAT_INPUTS: weakref.WeakKeyDictionary[ServedModel, list[str]] = weakref.WeakKeyDictionary()


def check_inputs(model: ServedModel, columns: dict[str, Any]) -> None:
    """Raise a 422 naming the first float input with a non-finite value (as converted)."""
    limit = _LIMITS.get(getattr(model.servable, "float_dtype", "float64"), math.inf)
    names = _float_inputs(model)
    if limit == math.inf:  # the common case: one sum over every float column
        try:
            if math.isfinite(sum([sum(columns[n], 0.0) for n in names], 0.0)):
                return
        except (TypeError, OverflowError, KeyError):  # nulls, tensors, huge integers
            pass
    else:  # float32: one sum, min and max over every float column, in C
        try:
            flat = list(chain.from_iterable(
                v for n in names if type(v := columns.get(n)) is list))
            if not flat or (math.isfinite(sum(flat, 0.0))
                            and -limit <= min(flat) and max(flat) <= limit):
                return
        except (TypeError, OverflowError):  # nulls, tensors, huge integers
            pass
    for name in names:
        values = columns.get(name)
        row = _first_bad(values, limit) if type(values) is list else None
        if row is not None:
            model.metrics.non_finite(model.name, str(model.version), "input", name)
            dtype = "float32" if limit < math.inf else "float64"
            raise HTTPError(422, f"input {name!r} row {row} is not a finite {dtype} "
                            "number (NaN, infinity, or too large for the model's "
                            f"{dtype}); send finite values within its range",
                            kind="non_finite")


def _float_inputs(model: ServedModel) -> list[str]:
    names = _FLOAT_INPUTS.get(model)
    if names is None:
        names = _FLOAT_INPUTS[model] = [f.name for f in model.signature.inputs
                                        if f.dtype == "float"]
    return names


def check_outputs(model: ServedModel, result: Result) -> None:
    """Raise a 422 naming the first output with a NaN or infinity for this request."""
    for name, values in result.outputs.items():
        kind = result.kinds.get(name)
        if kind is not None and kind[0] not in "fcO":
            continue  # integers, booleans, strings: always finite
        row = _first_bad(values, math.inf)
        if row is not None:
            model.metrics.non_finite(model.name, str(model.version), "output", name)
            raise HTTPError(422, f"the model's output {name!r} is not a finite number for "
                            f"row {row} (NaN or infinity); the input is probably outside "
                            "what the model can compute with (check /v1/models and the "
                            "training ranges)", kind="non_finite")


def _first_bad(values: list[Any], limit: float) -> int | None:
    """The first row holding a non-finite number (or one beyond ``limit``), else None."""
    try:
        total = sum(values, 0.0)  # NaN or infinity anywhere make it non-finite
        if math.isfinite(total) and (limit == math.inf or (
                -limit <= min(values) and max(values) <= limit)):
            return None
    except (TypeError, OverflowError):  # nulls, strings, nested rows, huge integers
        if limit == math.inf:
            try:  # rows of numbers (probabilities, a tensor per row): one sum, in C
                if math.isfinite(sum(chain.from_iterable(values), 0.0)):
                    return None
            except (TypeError, OverflowError):  # nulls, strings, deeper nesting
                pass
    for i, v in enumerate(values):
        if not _finite(v, limit):
            return i
    return None


def _finite(value: Any, limit: float) -> bool:
    if type(value) is float:
        return -limit <= value <= limit if limit < math.inf else math.isfinite(value)
    if type(value) is int:
        return -limit <= value <= limit
    if isinstance(value, list):  # a tensor row: its innermost lists are summed in C
        return _first_bad(value, limit) is None
    return True  # null (missing), strings, booleans
