"""Missing values spelled as text, in JSON Lines: Arrow's JSON reader has no option
for them (its CSV reader has), so the readers in ``_formats`` call these.

A JSON ``null`` is always missing; a string field's value equal to one of the
spellings (``"NA"``, ``""``...) is too, as it would be in a CSV file, so the same
data gives the same nulls in either format.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["null_spelled_strings", "rewrite_jsonl_nulls", "rewrite_lines"]


def null_spelled_strings(batch: Any, spellings: Sequence[str]) -> Any:
    """``batch`` with every string equal to one of ``spellings`` made null."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not spellings:
        return batch
    columns = list(batch.columns)
    value_set = pa.array(list(spellings), type=pa.string())
    changed = False
    for i, column in enumerate(columns):
        if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
            continue
        spelled = pc.is_in(column, value_set=value_set.cast(column.type))
        if pc.any(spelled).as_py():
            columns[i] = pc.if_else(spelled, pa.scalar(None, column.type), column)
            changed = True
    return pa.RecordBatch.from_arrays(columns, schema=batch.schema) if changed else batch


@contextmanager
def rewrite_jsonl_nulls(source: Any, spellings: Sequence[str]) -> Iterator[Path]:
    """A temporary copy of the JSON Lines ``source`` (a path or an Arrow input stream)
    whose top-level string values equal to a spelling are written as ``null``; only
    used when a number field holds such strings, which Arrow cannot read."""
    wanted = frozenset(spellings)
    with tempfile.TemporaryDirectory(prefix="reprise-jsonl-") as tmp:
        out = Path(tmp) / "clean.jsonl"
        with _lines(source) as lines, open(out, "wb") as f:
            for line in lines:
                f.write(_rewrite_line(line, wanted))
        yield out


def rewrite_lines(text: bytes, spellings: Sequence[str]) -> bytes:
    """:func:`rewrite_jsonl_nulls` for JSON Lines held in memory (a piece of a file)."""
    wanted = frozenset(spellings)
    return b"".join(_rewrite_line(line, wanted) for line in text.splitlines(keepends=True))


def _rewrite_line(line: bytes, wanted: frozenset[str]) -> bytes:
    if not line.strip():
        return line
    try:
        row = json.loads(line)
    except ValueError:
        return line  # Arrow reports it, with its row
    if not isinstance(row, dict):
        return line
    row = {k: None if isinstance(v, str) and v in wanted else v for k, v in row.items()}
    return json.dumps(row, ensure_ascii=False).encode() + b"\n"


@contextmanager
def _lines(source: Any) -> Iterator[Any]:
    if isinstance(source, str | os.PathLike):
        with open(source, "rb") as f:
            yield f
        return
    import io

    try:  # an Arrow stream (a compressed file): read it through a buffered reader
        yield io.BufferedReader(source)  # type: ignore[arg-type]
    finally:
        source.close()
