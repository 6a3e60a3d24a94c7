"""Time-sortable ids (ULID layout: 48-bit milliseconds + 80 random bits).

Written here rather than taken from a package because it is twelve lines and
sits on the hot path of run creation. Ids are lowercase Crockford base32, 26
characters; the first 10 encode the creation time, so ``ORDER BY id`` is
``ORDER BY created``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable

__all__ = ["new_id", "shortest_unique_prefixes", "ID_LENGTH"]

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"
ID_LENGTH = 26
_MIN_SHORT = 8


def new_id(now_ms: int | None = None) -> str:
    """Return a new 26-character id that sorts by creation time.

    Example:
        >>> len(new_id())
        26
    """
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    n = (ms << 80) | int.from_bytes(os.urandom(10), "big")
    chars = []
    for _ in range(ID_LENGTH):
        chars.append(_ALPHABET[n & 31])
        n >>= 5
    return "".join(reversed(chars))


def shortest_unique_prefixes(ids: Iterable[str], minimum: int = _MIN_SHORT) -> dict[str, str]:
    """Map each id to its shortest prefix (at least ``minimum`` long) unique among ``ids``."""
    ordered = sorted(set(ids))
    out: dict[str, str] = {}
    for i, cur in enumerate(ordered):
        need = minimum
        for other in (ordered[i - 1] if i else None, ordered[i + 1] if i + 1 < len(ordered) else None):
            if other is None:
                continue
            common = 0
            while common < len(cur) and common < len(other) and cur[common] == other[common]:
                common += 1
            need = max(need, common + 1)
        out[cur] = cur[: min(need, len(cur))]
    return out
