"""Inferring a signature from training data: types, nullability, shapes, ranges and
the categories seen.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from reprise.core.errors import UserError
from reprise.registry._fields import _MAX_CATEGORIES, Field
from reprise.registry._signature import Signature


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
