"""The artifacts part of the dashboard's API: a run's artifacts (those it logged, and the
outputs of its pipeline steps), a preview of one (a table's first rows, a text's first
bytes, a folder's files, an image or HTML report for the page to show) and its bytes.

An artifact is addressed by the run's id and its name as the store records it (a step's
output as ``STEP/OUTPUT``): the name is looked up among the run's own records, and only the
content hash found there reaches the artifact store, which accepts nothing but a hash. No
client-given string ever becomes a path."""

from __future__ import annotations

import csv
import io
import re
import tarfile
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, BinaryIO

from reprise.core.errors import NotFoundError, UserError
from reprise.ui._context import UiContext, clean

if TYPE_CHECKING:
    from fastapi import APIRouter

    from reprise.core._types import ArtifactRecord

__all__ = ["media_type", "router", "run_artifacts"]

_CHUNK = 1 << 16
_TEXT_MAX = 1 << 20  # the most a text preview may ask for
_MEDIA = {
    ".csv": "text/csv", ".tsv": "text/tab-separated-values", ".txt": "text/plain",
    ".log": "text/plain", ".md": "text/markdown", ".py": "text/x-python",
    ".yaml": "application/yaml", ".yml": "application/yaml", ".toml": "application/toml",
    ".json": "application/json", ".jsonl": "application/jsonl",
    ".html": "text/html", ".htm": "text/html", ".svg": "image/svg+xml",
    ".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif",
    ".webp": "image/webp", ".parquet": "application/vnd.apache.parquet",
    ".npy": "application/x-npy", ".tar": "application/x-tar", ".pdf": "application/pdf",
}
_KIND_MEDIA = {"dataframe": "application/vnd.apache.parquet",
               "table": "application/vnd.apache.parquet", "json": "application/json",
               "array": "application/x-npy", "dir": "application/x-tar"}
# images a browser may show from a blob: URL (SVG is left out: it can carry scripts)
_IMAGES = {"image/png", "image/jpeg", "image/gif", "image/webp"}
_TEXTS = {"application/json", "application/jsonl", "application/yaml", "application/toml"}
# what an HTML artifact may do when opened: nothing active (no scripts, no fetches)
HTML_CSP = ("sandbox; default-src 'none'; style-src 'unsafe-inline'; "
            "img-src data:; font-src data:")


def media_type(name: str, rec: ArtifactRecord) -> str:
    """The media type of an artifact: from its kind where the store knows the format,
    else from its name's (or its file's) extension; bytes of unknown type otherwise."""
    if rec.kind in _KIND_MEDIA:
        return _KIND_MEDIA[rec.kind]
    for candidate in (name, str(rec.meta.get("name") or "")):
        m = re.search(r"(\.[A-Za-z0-9]+)$", candidate)
        if m and m.group(1).lower() in _MEDIA:
            return _MEDIA[m.group(1).lower()]
    return "application/octet-stream"


def _preview_kind(mt: str) -> str:
    if mt in ("application/vnd.apache.parquet", "text/csv", "text/tab-separated-values",
              "application/x-npy"):
        return "table"
    if mt in _IMAGES:
        return "image"
    if mt == "text/html":
        return "html"
    if mt == "application/x-tar":
        return "dir"
    if mt.startswith("text/") or mt in _TEXTS:
        return "text"
    return "none"


def run_artifacts(ctx: UiContext, run_id: str) -> tuple[str, dict[str, dict[str, Any]]]:
    """(the run's full id, its artifacts by name): what it logged itself, then each of its
    steps' outputs as ``STEP/OUTPUT`` (a name the run logged itself wins)."""
    store = ctx.store
    rec = store.get_run(run_id)
    out: dict[str, dict[str, Any]] = {}
    for name, a in store.run_artifacts(rec.id).items():
        out[name] = {"name": name, "record": a, "origin": "run", "step": None}
    for st in store.get_step_runs(rec.id):
        for edge in st.get("outputs") or ():
            name = f"{st['step_name']}/{edge['name']}"
            if name in out:
                continue
            try:
                a = store.get_artifact(edge["hash"])
            except NotFoundError:
                continue
            out[name] = {"name": name, "record": a, "origin": "step",
                         "step": st["step_name"], "step_status": st["status"]}
    return rec.id, out


def _describe(entry: dict[str, Any]) -> dict[str, Any]:
    a: ArtifactRecord = entry["record"]
    mt = media_type(entry["name"], a)
    return {"name": entry["name"], "hash": a.hash, "size": a.size, "kind": a.kind,
            "materializer": a.materializer, "media_type": mt, "preview": _preview_kind(mt),
            "origin": entry["origin"], "step": entry["step"], "meta": a.meta}


def _open(ctx: UiContext, a: ArtifactRecord) -> BinaryIO:
    from reprise.core.errors import ArtifactNotFoundError

    try:
        return ctx.workspace.artifacts.open(a.hash)
    except ArtifactNotFoundError:
        raise NotFoundError(f"the bytes of artifact {a.hash[:12]} are not in the artifact "
                            "store (garbage-collected?).") from None


def _read_text(f: BinaryIO, limit: int) -> tuple[str, bool]:
    data = f.read(limit + 1)
    text = data[:limit].decode("utf-8", errors="replace")
    return text, len(data) > limit


def _parquet_rows(f: BinaryIO, rows: int) -> dict[str, Any]:
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(f)
    columns = [str(c) for c in pf.schema_arrow.names]
    got: list[dict[str, Any]] = []
    for batch in pf.iter_batches(batch_size=rows):
        got = batch.to_pylist()[:rows]
        break
    return {"columns": columns, "rows": [_jsonable_row(r) for r in got],
            "total_rows": pf.metadata.num_rows}


def _jsonable_row(row: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in row.items():
        out[str(k)] = v if isinstance(v, (int, float, bool, str, type(None))) else str(v)
    return out


def _npy_rows(f: BinaryIO, rows: int) -> dict[str, Any]:
    """The first rows of a ``.npy`` array, read from its header and the bytes of those rows
    alone (one column per item of a row, at most 100)."""
    import numpy as np
    from numpy.lib import format as npf

    version = npf.read_magic(f)
    if version == (1, 0):
        shape, fortran, dtype = npf.read_array_header_1_0(f)
    else:
        shape, fortran, dtype = npf.read_array_header_2_0(f)
    if dtype.hasobject or fortran:
        raise ValueError("only C-ordered arrays without Python objects have a preview")
    total = shape[0] if shape else 1
    per_row = int(np.prod(shape[1:])) if len(shape) > 1 else 1
    n = min(rows, total)
    data = f.read(n * per_row * dtype.itemsize)
    arr = np.frombuffer(data, dtype=dtype, count=n * per_row).reshape(n, per_row)
    width = min(per_row, 100)
    columns = ["value"] if len(shape) <= 1 else [str(i) for i in range(width)]
    got = [{c: (v.item() if hasattr(v, "item") else v) for c, v in zip(columns, r[:width],
                                                                        strict=False)}
           for r in arr]
    return {"columns": columns, "rows": [_jsonable_row(r) for r in got], "total_rows": total}


def _csv_rows(f: BinaryIO, rows: int, delimiter: str) -> dict[str, Any]:
    text, truncated = _read_text(f, 1 << 18)
    if truncated:  # a cut line is not a row
        text = text[:text.rfind("\n") + 1] if "\n" in text else text
    reader = csv.reader(io.StringIO(text), delimiter=delimiter)
    header = next(reader, [])
    got = [dict(zip(header, r, strict=False)) for _, r in zip(range(rows), reader,
                                                                strict=False)]
    return {"columns": header, "rows": got, "total_rows": None}


_MAX_FILES = 500  # of a folder's files, the first this many are shown


def _tar_files(f: BinaryIO, limit: int) -> list[dict[str, Any]]:
    """The regular files of a stored folder (a tar) with their text when it is UTF-8
    (the first ``_MAX_FILES``)."""
    files: list[dict[str, Any]] = []
    with tarfile.open(fileobj=f, mode="r:") as tar:
        for info in tar:
            if not info.isreg():
                continue
            if len(files) == _MAX_FILES:
                break
            member = tar.extractfile(info)
            data = member.read(limit + 1) if member is not None else b""
            try:
                text: str | None = data[:limit].decode("utf-8")
            except UnicodeDecodeError:
                text = None
            files.append({"path": info.name, "size": info.size, "text": text,
                          "truncated": len(data) > limit})
    return files


def _disposition(name: str) -> str:
    """``attachment`` with the artifact's last name part: an ASCII fallback made only of
    safe characters, and the UTF-8 name percent-encoded (RFC 6266)."""
    from urllib.parse import quote

    base = name.rsplit("/", 1)[-1] or "artifact"
    ascii_name = re.sub(r"[^A-Za-z0-9._-]", "_", base)[:120] or "artifact"
    return f"attachment; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(base, safe='')}"


def router(ctx: UiContext) -> APIRouter:
    from fastapi import APIRouter, Query
    from fastapi.responses import Response, StreamingResponse

    router = APIRouter(tags=["artifacts"])
    name_q = Query(..., min_length=1, max_length=1000,
                   description="The artifact's name as the run's list gives it "
                   "(a step's output: STEP/OUTPUT).")

    def lookup(run_id: str, name: str) -> tuple[str, dict[str, Any]]:
        ctx.fresh()
        rid, arts = run_artifacts(ctx, run_id)
        if name not in arts:
            raise NotFoundError(f"run {rid} has no artifact named {name!r}.")
        return rid, arts[name]

    @router.get("/api/runs/{run_id}/artifacts",
                summary="A run's artifacts: name, size, hash, kind, media type")
    def artifacts(run_id: str) -> dict[str, Any]:
        ctx.fresh()
        rid, arts = run_artifacts(ctx, run_id)
        answer: dict[str, Any] = clean({"run_id": rid,
                                        "artifacts": [_describe(e) for e in arts.values()]})
        return answer

    @router.get("/api/runs/{run_id}/artifact/preview",
                summary="A preview of one artifact: a table's first rows, a text's first "
                "bytes, a folder's files (as text), else its description")
    def preview(
        run_id: str, name: str = name_q,
        rows: int = Query(20, ge=1, le=1000, description="Rows of a table."),
        max_bytes: int = Query(4096, ge=1, le=_TEXT_MAX,
                               description="Bytes of a text (and of each file of a "
                               "folder)."),
    ) -> dict[str, Any]:
        rid, entry = lookup(run_id, name)
        out = _describe(entry)
        a: ArtifactRecord = entry["record"]
        mt, kind = out["media_type"], out["preview"]
        try:
            with _open(ctx, a) as f:
                if kind == "table" and mt == "application/vnd.apache.parquet":
                    out["table"] = _parquet_rows(f, rows)
                elif kind == "table" and mt == "application/x-npy":
                    out["table"] = _npy_rows(f, rows)
                elif kind == "table":
                    out["table"] = _csv_rows(f, rows, "\t" if "tab" in mt else ",")
                elif kind == "text":
                    out["text"], out["truncated"] = _read_text(f, max_bytes)
                elif kind == "dir":
                    out["files"] = _tar_files(f, max_bytes)
        except (OSError, ValueError, tarfile.TarError, csv.Error) as exc:
            raise UserError(f"artifact {name!r} of run {rid} cannot be previewed as "
                            f"{kind}: {exc}") from None
        except Exception as exc:  # pyarrow's errors: a file that is not what it says
            if type(exc).__module__.startswith("pyarrow"):
                raise UserError(f"artifact {name!r} of run {rid} cannot be previewed as "
                                f"{kind}: {exc}") from None
            raise
        answer: dict[str, Any] = clean(out)
        return answer

    @router.get("/api/runs/{run_id}/artifact/download",
                summary="One artifact's bytes (streamed; HTML is sandboxed by its CSP)",
                response_class=Response, response_model=None,
                responses={200: {"content": {"application/octet-stream": {}}}})
    def download(run_id: str, name: str = name_q) -> Response:
        rid, entry = lookup(run_id, name)
        a: ArtifactRecord = entry["record"]
        mt = media_type(name, a)
        f = _open(ctx, a)

        def chunks() -> Iterator[bytes]:
            with f:
                while chunk := f.read(_CHUNK):
                    yield chunk

        headers = {"Content-Disposition": _disposition(name),
                   "X-Content-Type-Options": "nosniff", "Content-Length": str(a.size),
                   "Content-Security-Policy": HTML_CSP, "Cache-Control": "no-store"}
        if mt.startswith("text/") or mt in _TEXTS:
            mt += "; charset=utf-8"
        return StreamingResponse(chunks(), media_type=mt, headers=headers)

    @router.get("/api/runs/{run_id}/code",
                summary="The run's code snapshot: its files, as text where they are UTF-8")
    def code(run_id: str,
             max_bytes: int = Query(262_144, ge=1, le=_TEXT_MAX,
                                    description="Bytes of each file.")) -> dict[str, Any]:
        ctx.fresh()
        rec = ctx.store.get_run(run_id)
        snapshot = (rec.tags or {}).get("reprise.code_snapshot")
        if not isinstance(snapshot, str) or not snapshot:
            return {"run_id": rec.id, "hash": None, "files": []}
        try:
            a = ctx.store.get_artifact(snapshot)
        except NotFoundError:
            return {"run_id": rec.id, "hash": snapshot, "files": [], "missing": True}
        with _open(ctx, a) as f:
            files = _tar_files(f, max_bytes)
        return {"run_id": rec.id, "hash": snapshot, "files": files}

    return router

