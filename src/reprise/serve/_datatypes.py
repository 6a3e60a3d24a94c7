"""Checking an Open Inference Protocol tensor's declared ``datatype`` against its JSON
values: integers for the integer types and within their range, numbers within the range
of the floating-point types, booleans for BOOL and strings for BYTES.

Tensors sent as binary data need no such check: their bytes were decoded as the
declared type (``_binary.py``). ``null`` (a missing value) fits every type; whether the
input may be missing is the signature's to say.
"""

from __future__ import annotations

import sys
from typing import Any

from reprise.serve._http import HTTPError

__all__ = ["check_datatype"]

_INT_RANGE = {f"INT{b}": (-(2 ** (b - 1)), 2 ** (b - 1) - 1) for b in (8, 16, 32, 64)} | {
    f"UINT{b}": (0, 2**b - 1) for b in (8, 16, 32, 64)}
_FLOAT_MAX = {"FP16": 65504.0, "FP32": 3.4028234663852886e38, "FP64": sys.float_info.max}
_NONE = type(None)
_NUMBERS = frozenset({int, float, _NONE})


def _bad(name: str, datatype: str, message: str) -> HTTPError:
    return HTTPError(400, f"input {name!r}: {datatype} {message}", kind="invalid")


def check_datatype(name: str, datatype: str, values: list[Any]) -> None:
    """Raise a 400 naming the input when a value does not fit ``datatype`` (never the
    value itself); one pass over the values, most of it in C."""
    types = set(map(type, values))
    if datatype in _INT_RANGE:
        _integers(name, datatype, values, types)
    elif datatype in _FLOAT_MAX:
        if not types <= _NUMBERS:
            raise _bad(name, datatype, "elements must be numbers; send BOOL or BYTES "
                       "tensors for other values")
        if datatype != "FP64" or int in types:  # JSON floats are all within FP64
            _within(name, datatype, values, types, _FLOAT_MAX[datatype])
    elif datatype == "BOOL" and not types <= {bool, _NONE}:
        raise _bad(name, datatype, "elements must be true or false")
    elif datatype == "BYTES" and not types <= {str, _NONE}:
        raise _bad(name, datatype, "elements must be strings")


def _integers(name: str, datatype: str, values: list[Any], types: set[type]) -> None:
    if not types <= _NUMBERS:
        raise _bad(name, datatype, "elements must be integers (JSON numbers without a "
                   "fraction)")
    if float in types:
        for i, v in enumerate(values):
            if type(v) is float and not v.is_integer():
                raise _bad(name, datatype, f"elements must be integers; element {i} has a "
                           "fraction")
    lo, hi = _INT_RANGE[datatype]
    _within(name, datatype, values, types, hi, lo)


def _within(name: str, datatype: str, values: list[Any], types: set[type], hi: float,
            lo: float | None = None) -> None:
    numbers = [v for v in values if v is not None] if _NONE in types else values
    if not numbers:
        return
    low = -hi if lo is None else lo
    if low <= min(numbers) and max(numbers) <= hi:
        return
    for i, v in enumerate(values):
        if v is not None and not low <= v <= hi:
            raise _bad(name, datatype, f"cannot hold element {i}: it is outside the "
                       f"type's range [{low:g}, {hi:g}]; send a wider datatype")
