"""Content hashing (BLAKE3) and canonical JSON.

BLAKE3 is used for every content address: it is several times faster than
SHA-256 and parallelises over a memory map. Hashes are 64 lowercase hex
characters (256 bits).

Canonical JSON is this project's own: Python's ``json`` gives the same text for
``{1: "a"}`` and ``{"1": "a"}`` and for tuples and lists, which would let two
different parameter sets share a cache key. :func:`canonical_json` refuses the
ambiguous cases instead of guessing.
"""

from __future__ import annotations

import json
import math
import mmap
import os
import re
from collections.abc import Mapping
from typing import Any

import blake3

__all__ = [
    "HASH_RE",
    "canonical_json",
    "hash_bytes",
    "hash_file",
    "hash_value",
    "is_hash",
    "new_hasher",
]

HASH_RE = re.compile(r"^[0-9a-f]{64}$")

# Below this size a plain read beats setting up a memory map and threads.
_MMAP_THRESHOLD = 8 * 1024 * 1024
# Mapped pages count in the process's resident memory until unmapped, so a file is
# mapped one window at a time: memory stays bounded whatever the file's size.
_MMAP_WINDOW = 32 * 1024 * 1024


def new_hasher() -> Any:
    """Return an incremental BLAKE3 hasher (``update(bytes)``, ``hexdigest()``)."""
    return blake3.blake3()


def hash_bytes(data: bytes | bytearray | memoryview) -> str:
    """Return the BLAKE3 hex digest of ``data``.

    Example:
        >>> hash_bytes(b"")[:16]
        'af1349b9f5f9a1a6'
    """
    return blake3.blake3(data).hexdigest()


def hash_file(path: str | os.PathLike[str]) -> str:
    """Return the BLAKE3 hex digest of a file's bytes.

    Large files are hashed through a memory map with all cores, one 32 MiB window
    at a time, so resident memory stays bounded whatever the file's size (the
    pages are the page cache's, and each window is unmapped before the next).
    """
    with open(path, "rb", buffering=0) as f:
        size = os.fstat(f.fileno()).st_size
        if size < _MMAP_THRESHOLD:
            hasher = blake3.blake3()
            while chunk := f.read(1 << 20):
                hasher.update(chunk)
            return hasher.hexdigest()
        hasher = blake3.blake3(max_threads=blake3.blake3.AUTO)
        for offset in range(0, size, _MMAP_WINDOW):
            length = min(_MMAP_WINDOW, size - offset)
            with mmap.mmap(f.fileno(), length, offset=offset, access=mmap.ACCESS_READ) as m:
                hasher.update(m)
        return hasher.hexdigest()


def is_hash(value: str) -> bool:
    """True when ``value`` looks like a full content hash."""
    return bool(HASH_RE.match(value))


def canonical_json(value: Any) -> str:
    """Serialise a JSON-able value to one canonical text.

    Dict keys are sorted; no whitespace; floats in shortest round-trip form;
    ``NaN`` and infinities are encoded as tagged strings so that they are
    representable. Dict keys must be strings; tuples are written as lists.
    Anything else (sets, bytes, objects) raises ``TypeError``.

    Example:
        >>> canonical_json({"b": 1, "a": [1.5, None, True]})
        '{"a":[1.5,null,true],"b":1}'
    """
    return json.dumps(_normalise(value), sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False, allow_nan=False)


def hash_value(value: Any) -> str:
    """BLAKE3 of :func:`canonical_json` of ``value``."""
    return hash_bytes(canonical_json(value).encode())


def _normalise(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return {"$float": repr(value)}
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeError(
                    f"canonical JSON needs string keys; got key {k!r} of type "
                    f"{type(k).__name__}. Convert keys to str first."
                )
            out[k] = _normalise(v)
        return out
    if isinstance(value, (list, tuple)):
        return [_normalise(v) for v in value]
    # numpy scalars and similar expose .item(); accept them without importing numpy.
    item = getattr(value, "item", None)
    if callable(item) and type(value).__module__ == "numpy":
        return _normalise(item())
    raise TypeError(
        f"value of type {type(value).__module__}.{type(value).__qualname__} is not "
        "JSON-able; use str, int, float, bool, None, lists and dicts with string keys."
    )
