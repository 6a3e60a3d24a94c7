"""Sizes in bytes written as numbers or with units ("5GB", "512 MiB")."""

from __future__ import annotations

import contextlib
import math

from reprise.core.errors import ConfigError

__all__ = ["parse_size"]

_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "m": 10**6, "mb": 10**6, "g": 10**9,
          "gb": 10**9, "t": 10**12, "tb": 10**12, "kib": 1 << 10, "mib": 1 << 20,
          "gib": 1 << 30, "tib": 1 << 40}


def parse_size(value: object, what: str) -> int:
    """Bytes from an int or a string such as ``"10GB"``/``"512 MiB"``; ``ConfigError`` else.

    Example:
        >>> parse_size("2 GiB", "cache_size")
        2147483648
    """
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str):
        text = value.strip().lower()
        number = text.rstrip("abcdefghijklmnopqrstuvwxyz ")
        unit = text[len(number):].strip()
        with contextlib.suppress(ValueError):
            amount = float(number)
            if unit in _UNITS and math.isfinite(amount) and amount >= 0:
                return int(amount * _UNITS[unit])
    raise ConfigError(f"{what} must be a size in bytes such as 5000000000, \"5GB\" or "
                      f"\"512MiB\", got {value!r}.")
