"""Reading the request log, storing feedback, exporting labelled rows, pruning.

The request log is written by ``reprise serve`` (``reprise.serve._reqlog``): Parquet
chunks in the artifact store, indexed in the metadata store (table ``request_log``).
A chunk has one row per input row of a logged request: ``request_id``, ``row``,
``time`` (Unix seconds of the answer), ``version``, ``latency_ms``, then
``input.<column>`` and ``output.<name>``. Columns excluded at serving time (PII) are in
no chunk. Feedback (table ``feedback``) is one label per ``(model, request id)``; it
joins the log by request id whenever it arrives, before or after the chunk is written.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reprise.core._reqlog_types import INPUT_PREFIX, RequestChunk, check_feedback_items
from reprise.core.errors import NotFoundError, UserError

if TYPE_CHECKING:
    import pyarrow as pa

    from reprise.store import Workspace
    from reprise.store._request_log import PruneReport

__all__ = ["ExportReport", "add_feedback", "add_feedback_file", "export_labelled",
           "iter_requests", "list_request_chunks", "prune_requests", "read_requests"]

_FEEDBACK_FORMATS = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet",
                     ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl"}


@dataclass(frozen=True)
class ExportReport:
    """What :func:`export_labelled` wrote: rows with a label, logged rows seen."""

    path: str
    rows: int
    logged_rows: int
    columns: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "rows": self.rows, "logged_rows": self.logged_rows,
                "columns": self.columns}


def _workspace(workspace: Workspace | None) -> Workspace:
    if workspace is not None:
        return workspace
    from reprise.store import Workspace

    return Workspace.open()


def _parse_ref(ref: str) -> tuple[str, int | None]:
    """``NAME`` or ``NAME:VERSION``."""
    name, sep, version = ref.partition(":")
    if not name or (sep and not version.isdigit()):
        raise UserError(f"{ref!r} is not NAME or NAME:VERSION (e.g. churn or churn:3)")
    return name, int(version) if sep else None


def list_request_chunks(ref: str, start: float | None = None, end: float | None = None, *,
                        workspace: Workspace | None = None) -> list[RequestChunk]:
    """The chunks of ``NAME[:VERSION]`` with answers in ``[start, end]``, oldest first."""
    name, version = _parse_ref(ref)
    return _workspace(workspace).metadata.list_request_chunks(name, version=version,
                                                              start=start, end=end)


def iter_requests(ref: str, start: float | None = None, end: float | None = None, *,
                  workspace: Workspace | None = None) -> Iterator[pa.Table]:
    """The logged rows of ``NAME[:VERSION]`` answered in ``[start, end]`` (Unix seconds;
    ``None``: unbounded), one Arrow table per chunk, oldest chunk first.

    Example:
        >>> for table in iter_requests("churn:3", time.time() - 3600):  # doctest: +SKIP
        ...     print(table.num_rows)
    """
    import pyarrow.compute as pc

    from reprise.store._request_log import read_request_chunk

    ws = _workspace(workspace)
    for chunk in list_request_chunks(ref, start, end, workspace=ws):
        table = read_request_chunk(ws, chunk)
        if start is not None and chunk.first_at < start:
            table = table.filter(pc.greater_equal(table["time"], start))
        if end is not None and chunk.last_at > end:
            table = table.filter(pc.less_equal(table["time"], end))
        if table.num_rows:
            yield table


def read_requests(ref: str, start: float | None = None, end: float | None = None, *,
                  workspace: Workspace | None = None) -> pa.Table:
    """:func:`iter_requests` as one table (columns of all chunks; null where a chunk,
    say of another version, lacks one). Empty (no columns) when nothing was logged."""
    import pyarrow as pa

    tables = list(iter_requests(ref, start, end, workspace=workspace))
    if not tables:
        return pa.table({})
    return pa.concat_tables(tables, promote_options="permissive")


def add_feedback(name: str, items: Sequence[dict[str, Any]], *,
                 workspace: Workspace | None = None) -> int:
    """Store ``[{"request_id": ..., "label": ...}, ...]`` for model ``name`` (a label
    sent again replaces the stored one); FeedbackError names every bad item."""
    checked = check_feedback_items(list(items))
    return _workspace(workspace).metadata.add_feedback(name, checked, time.time())


def add_feedback_file(name: str, path: str | Path, *, workspace: Workspace | None = None,
                      batch: int = 10_000) -> int:
    """Store the labels of a CSV, Parquet or JSON-lines file with columns
    ``request_id`` and ``label``; the whole file is checked before anything is stored.

    Example:
        >>> add_feedback_file("churn", "labels.csv")  # doctest: +SKIP
        1200
    """
    items = _read_feedback_file(Path(path))
    checked = check_feedback_items(items, where="row")
    store = _workspace(workspace).metadata
    now = time.time()
    for i in range(0, len(checked), batch):
        store.add_feedback(name, checked[i:i + batch], now)
    return len(checked)


def _read_feedback_file(path: Path) -> list[dict[str, Any]]:
    import pyarrow as pa

    if not path.is_file():
        raise NotFoundError(f"no feedback file {str(path)!r}")
    fmt = _FEEDBACK_FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise UserError(f"{path.name}: unknown feedback format; use .csv, .parquet or "
                        ".jsonl with columns request_id and label")
    try:
        table = _read_table(path, fmt)
    except (pa.ArrowInvalid, OSError) as exc:
        raise UserError(f"{path.name} could not be read as {fmt}: {exc}") from None
    missing = [c for c in ("request_id", "label") if c not in table.column_names]
    if missing:
        raise UserError(f"{path.name} has no column {', '.join(missing)}; its columns are "
                        f"{', '.join(table.column_names[:20])}; feedback needs request_id "
                        "and label")
    rids, labels = table["request_id"].to_pylist(), table["label"].to_pylist()
    return [{"request_id": r, "label": lab} for r, lab in zip(rids, labels, strict=True)]


def _read_table(path: Path, fmt: str) -> pa.Table:
    import pyarrow as pa

    if fmt == "parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path)
    if fmt == "csv":
        from pyarrow import csv

        # ids stay text, even when they look like numbers
        return csv.read_csv(path, convert_options=csv.ConvertOptions(
            column_types={"request_id": pa.string()}))
    from pyarrow import json as pj

    return pj.read_json(path, parse_options=pj.ParseOptions(
        explicit_schema=pa.schema([("request_id", pa.string())]),
        unexpected_field_behavior="infer"))


def export_labelled(name: str, output: str | Path, *, version: int | None = None,
                    start: float | None = None, end: float | None = None,
                    label_column: str = "label", with_meta: bool = False,
                    workspace: Workspace | None = None) -> ExportReport:
    """Write the logged inputs of model ``name`` that have a label, with the label, to
    a Parquet file: one row per logged input row, input columns under their own names
    (PII columns were never logged), then ``label_column``; ``with_meta`` adds
    ``request_id``, ``time``, ``version`` and the ``output.`` columns. A label applies
    to every row of its request; labels of mixed types are written as their JSON text.

    The log is read a chunk at a time, so memory holds one chunk and its labels however
    long the log: each chunk's labelled rows go to a part file beside the output, and
    the parts are then written into one file under the schema they share (a column one
    version lacks is null there). The output appears whole or not at all.

    Example:
        >>> export_labelled("churn", "labelled.parquet")  # doctest: +SKIP
        ExportReport(path='labelled.parquet', rows=1200, ...)
    """
    import tempfile

    import pyarrow as pa
    import pyarrow.parquet as pq

    ws = _workspace(workspace)
    ref = name if version is None else f"{name}:{version}"
    dest = Path(output)
    dest.parent.mkdir(parents=True, exist_ok=True)
    logged = 0
    empty: dict[str, Any] | None = None  # the columns an export with no label has
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=f".{dest.name}.") as tmp:
        parts: list[Path] = []
        text_labels = False  # some part's labels mix types: every part writes JSON text
        for table in iter_requests(ref, start, end, workspace=ws):
            logged += table.num_rows
            if empty is None:
                empty = _labelled_columns(table.slice(0, 0), label_column, with_meta)
            ids = table["request_id"].to_pylist()
            labels = ws.metadata.get_feedback(name, ids)
            keep = [i for i, rid in enumerate(ids) if rid in labels]
            if not keep:
                continue
            part = table.take(pa.array(keep, pa.int64()))
            values = [json.loads(labels[ids[i]][0]) for i in keep]
            out = _labelled_columns(part, label_column, with_meta)
            out[label_column] = _label_array(values)
            text_labels |= _is_text(out[label_column], values)
            out[_JSON_LABEL] = pa.array([json.dumps(v) for v in values], pa.string())
            parts.append(Path(tmp) / f"{len(parts):06d}.parquet")
            pq.write_table(pa.table(out), parts[-1])
        written = _join_parts(parts, Path(tmp) / dest.name, label_column, text_labels, empty)
        (Path(tmp) / dest.name).replace(dest)  # a reader never sees half a file
    return ExportReport(str(dest), written[0], logged, written[1])


_JSON_LABEL = "__reprise_label_json"  # each part's labels as JSON text, for mixed types


def _is_text(array: pa.Array, values: list[Any]) -> bool:
    """Whether :func:`_label_array` fell back to JSON text for these values."""
    import pyarrow as pa

    return pa.types.is_string(array.type) and not all(isinstance(v, str) for v in values)


def _join_parts(parts: list[Path], path: Path, label_column: str, text_labels: bool,
                empty: dict[str, Any] | None) -> tuple[int, list[str]]:
    """Write the part files into ``path`` under one schema: (rows, column names)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not parts:
        out = dict(empty or {})
        out[label_column] = pa.array([], pa.null())
        table = pa.table(out)
        pq.write_table(table, path)
        return 0, table.column_names
    schemas = [pq.read_schema(p).remove(pq.read_schema(p).get_field_index(_JSON_LABEL))
               for p in parts]
    try:
        schema = pa.unify_schemas(schemas, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        text_labels = True  # e.g. one chunk's labels are numbers, another's words
        schema = pa.unify_schemas([s.remove(s.get_field_index(label_column)) for s in schemas],
                                  promote_options="permissive")
        schema = schema.append(pa.field(label_column, pa.string()))
    if text_labels:
        schema = schema.set(schema.get_field_index(label_column),
                            pa.field(label_column, pa.string()))
    names = [f.name for f in schema if f.name != label_column] + [label_column]
    schema = pa.schema([schema.field(n) for n in names])  # the label last, as documented
    rows = 0
    with pq.ParquetWriter(path, schema) as writer:
        for p in parts:
            table = pq.read_table(p)
            if text_labels:
                table = table.set_column(table.schema.get_field_index(label_column),
                                         label_column, table[_JSON_LABEL])
            columns = [table[n] if n in table.column_names
                       else pa.nulls(table.num_rows, schema.field(n).type) for n in names]
            writer.write_table(pa.Table.from_arrays(columns, names=names).cast(schema))
            rows += table.num_rows
    return rows, names


def _labelled_columns(table: pa.Table, label_column: str, with_meta: bool,
                      ) -> dict[str, pa.ChunkedArray]:
    out: dict[str, Any] = {}
    if with_meta and table.num_columns:
        for c in ("request_id", "time", "version"):
            out[c] = table[c]
    for c in table.column_names:
        if c.startswith(INPUT_PREFIX):
            plain = c[len(INPUT_PREFIX):]
            if plain == label_column:
                raise UserError(f"the model has an input named {label_column!r}; choose "
                                "another name for the label (--label-column)")
            out[plain] = table[c]
        elif with_meta and c.startswith("output."):
            out[c] = table[c]
    return out


def _label_array(values: list[Any]) -> pa.Array:
    import pyarrow as pa

    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError):  # mixed types: their JSON text
        return pa.array([json.dumps(v) for v in values], pa.string())


def prune_requests(name: str | None = None, *, max_age_days: float | None = None,
                   max_mb: float | None = None, workspace: Workspace | None = None,
                   ) -> PruneReport:
    """Remove request-log chunks (of ``name``, else of every model) older than
    ``max_age_days``, then the oldest beyond ``max_mb`` per model.

    Example:
        >>> prune_requests("churn", max_age_days=30)  # doctest: +SKIP
        PruneReport(chunks=[...], rows=52000, bytes_freed=1843200)
    """
    from reprise.store._request_log import prune_request_log

    if max_age_days is None and max_mb is None:
        raise UserError("say what to remove: --max-age-days DAYS and/or --max-mb MB")
    for label, value in (("--max-age-days", max_age_days), ("--max-mb", max_mb)):
        if value is not None and value < 0:
            raise UserError(f"{label} must not be negative; got {value}")
    return prune_request_log(
        _workspace(workspace), name=name,
        max_age_s=None if max_age_days is None else max_age_days * 86400.0,
        max_bytes=None if max_mb is None else int(max_mb * 1024 * 1024))
