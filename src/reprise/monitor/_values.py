"""Arrow columns as the values a drift summary counts: numbers or category labels.

A window comes from anywhere (a dataset version, logged traffic as JSON), so its columns
do not always have the reference's types: a number column may arrive as text with
missing values spelled ``"NA"``, a category column as integers. These helpers turn any
Arrow array into what the reference's column kind needs, and count what could not be
used, instead of raising:

- *missing*: nulls, NaN, and text equal to one of the missing-value spellings (the same
  spellings every reader of the data layer uses, ``reprise.core._nulls``);
- *invalid* (numbers only): text that is not a number, and infinities (a value without
  a distance cannot enter a CDF or a Wasserstein distance).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["NumericValues", "as_value_set", "column_kind", "labels_of", "numbers_of"]


def column_kind(t: pa.DataType) -> str:
    """``numeric``, ``categorical`` or ``unsupported`` for a reference column's type."""
    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_boolean(t):
        return "categorical"  # two labels, not a scale
    if (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)
            or pa.types.is_temporal(t)):
        return "numeric"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "categorical"
    return "unsupported"


@dataclass
class NumericValues:
    values: np.ndarray  # finite float64 values
    missing: int
    invalid: int


def _spelled_null(arr: pa.Array, spellings: pa.Array) -> pa.Array:
    if len(spellings) == 0:
        return arr
    return pc.if_else(pc.is_in(arr, value_set=spellings), pa.scalar(None, arr.type), arr)


def _as_text(arr: pa.Array) -> pa.Array:
    if pa.types.is_dictionary(arr.type):
        arr = arr.cast(arr.type.value_type)
    if pa.types.is_large_string(arr.type):
        return arr.cast(pa.string())
    return arr if pa.types.is_string(arr.type) else arr.cast(pa.string())


def numbers_of(arr: pa.Array | pa.ChunkedArray, spellings: pa.Array) -> NumericValues:
    """The finite values of ``arr`` as float64, with the missing and invalid counts."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if pa.types.is_dictionary(arr.type):
        arr = arr.cast(arr.type.value_type)
    invalid = 0
    if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
        arr = _spelled_null(_as_text(arr), spellings)
        missing = arr.null_count
        x, invalid = _parse_numbers(arr.drop_null())
    elif pa.types.is_temporal(arr.type):
        missing = arr.null_count
        x = _temporal_numbers(arr.drop_null())
    elif pa.types.is_boolean(arr.type) or pa.types.is_integer(arr.type) or \
            pa.types.is_floating(arr.type) or pa.types.is_decimal(arr.type):
        missing = arr.null_count
        x = arr.drop_null().cast(pa.float64()).to_numpy(zero_copy_only=False)
    else:  # nested or binary data where numbers were expected: nothing usable
        return NumericValues(np.empty(0), arr.null_count, len(arr) - arr.null_count)
    nan = np.isnan(x)
    n_nan = int(nan.sum())
    if n_nan:
        x = x[~nan]
        missing += n_nan  # NaN is missing, as pandas and the data profiles treat it
    finite = np.isfinite(x)
    n_inf = len(x) - int(finite.sum())
    if n_inf:
        x = x[finite]
        invalid += n_inf
    return NumericValues(np.ascontiguousarray(x, dtype=np.float64), missing, invalid)


def _parse_numbers(text: pa.Array) -> tuple[np.ndarray, int]:
    """Numbers from text, and how many strings were no number (left out, counted)."""
    try:
        return np.asarray(text.cast(pa.float64()).to_numpy(zero_copy_only=False),
                          dtype=np.float64), 0
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    out = np.empty(len(text), dtype=np.float64)
    ok = np.zeros(len(text), dtype=bool)
    for i, s in enumerate(text.to_pylist()):  # only for a column with a bad value in it
        try:
            out[i] = float(s)
            ok[i] = True
        except (TypeError, ValueError):
            pass
    return out[ok], int(len(text) - ok.sum())


def _temporal_numbers(arr: pa.Array) -> np.ndarray:
    """Dates and times as numbers on their own unit (days, microseconds...)."""
    t = arr.type
    if pa.types.is_date32(t):
        ints = arr.cast(pa.int32()).cast(pa.int64())
    elif pa.types.is_timestamp(t) or pa.types.is_date64(t) or pa.types.is_time(t) \
            or pa.types.is_duration(t):
        if pa.types.is_timestamp(t) and t.tz is not None:
            arr = arr.cast(pa.timestamp(t.unit))
        ints = arr.cast(pa.int64())
    else:
        return np.empty(0)
    return np.asarray(ints.to_numpy(zero_copy_only=False), dtype=np.float64)


def labels_of(arr: pa.Array | pa.ChunkedArray, spellings: pa.Array) -> tuple[pa.Array, int]:
    """The non-missing labels of ``arr`` as text (with the number missing)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if pa.types.is_boolean(arr.type):
        text = arr.cast(pa.string())  # "true"/"false", as Arrow writes booleans
    elif pa.types.is_floating(arr.type):
        arr = pc.if_else(pc.is_nan(arr), pa.scalar(None, arr.type), arr)
        text = _as_text(arr)
    else:
        try:
            text = _as_text(arr)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return pa.array([], pa.string()), len(arr)
        text = _spelled_null(text, spellings)
    return text.drop_null(), text.null_count


def as_value_set(spellings: Any) -> pa.Array:
    return pa.array(list(spellings), type=pa.string())
