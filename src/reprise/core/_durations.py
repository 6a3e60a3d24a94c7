"""Durations written as text in policies and on the command line: ``250ms``, ``60s``,
``5m``, ``1h``, ``1d``. Parsed here once; each caller words its own error (which key,
which example) and checks its own range."""

from __future__ import annotations

import re
from typing import Any

__all__ = ["UNITS", "duration_seconds"]

UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]+)?\s*$")


def duration_seconds(value: Any, *, units: tuple[str, ...] = tuple(UNITS),
                     bare: bool = True) -> float | None:
    """Seconds in ``value``, a number followed by one of ``units``, or (``bare``) a plain
    number of seconds; None when it is neither.

    Example:
        >>> duration_seconds("5m"), duration_seconds("250ms"), duration_seconds(2)
        (300.0, 0.25, 2.0)
        >>> duration_seconds("1d", units=("s", "m", "h")) is None
        True
    """
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value) if bare else None
    m = _DURATION.match(value) if isinstance(value, str) else None
    if m is None:
        return None
    unit = m.group(2)
    if unit is None:
        return float(m.group(1)) if bare else None
    return float(m.group(1)) * UNITS[unit] if unit in units else None
