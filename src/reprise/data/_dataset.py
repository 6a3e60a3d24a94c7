"""Dataset versions: ``name@N``, immutable and content-addressed.

``add_dataset`` reads the source once as a stream of Arrow batches, checking the
content (format problems, mixed types, the declared schema), profiling it and, on
request, splitting failing rows off into a quarantine file, all in that single
pass. Only when everything passed are the bytes stored and the version row
written, in that order, so an error at any point leaves the workspace as it was
(a blob without a version row is unreferenced and ``reprise gc`` removes it).
"""

from __future__ import annotations

import itertools
import os
import re
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reprise.core._nulls import resolve_na_values
from reprise.core._types import ArtifactRecord, DatasetRecord
from reprise.core.errors import UserError
from reprise.data._formats import (
    TABULAR_FORMATS,
    DataFormatError,
    TabularSource,
    check_delimiter,
    compression_of,
    detect_format,
    read_whole,
)

__all__ = [
    "AddResult",
    "Dataset",
    "DatasetNotFoundError",
    "add_dataset",
    "attach_schema",
    "checkout_dataset",
    "diff_datasets",
    "get_dataset",
    "list_datasets",
    "parse_ref",
    "summarise_datasets",
]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
BATCH_ROWS = 131_072


class DatasetNotFoundError(UserError):
    """No such dataset or version."""


def validate_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name) or ".." in name:
        raise UserError(
            f"dataset name {name!r} is not allowed: use letters, digits, '.', '_' and '-' "
            "(no path separators, no '@', at most 200 characters), starting with a letter "
            "or digit.")
    return name


def parse_ref(ref: str) -> tuple[str, int | None]:
    """``"churn@3"`` -> ("churn", 3); ``"churn"`` and ``"churn@latest"`` -> ("churn", None)."""
    name, sep, version = ref.partition("@")
    validate_name(name)
    if not sep or version == "latest":
        return name, None
    if not version.isdigit() or int(version) < 1:
        raise UserError(f"dataset version in {ref!r} must be a positive number or 'latest'.")
    return name, int(version)


@dataclass
class AddResult:
    record: DatasetRecord
    created: bool
    report: Any = None
    """The validation report (None when no schema applied)."""
    quarantine: dict[str, Any] | None = None


def _workspace(workspace: Any) -> Any:
    from reprise.tracking._api import resolve_workspace

    return resolve_workspace(workspace)


def attach_schema(name: str, schema: Any, *, workspace: Any = None) -> tuple[str | None, str | None]:
    """Attach a pandera schema (object, ``FILE.py:NAME`` or YAML/JSON) to a dataset name;
    later ``add_dataset`` calls for that name enforce it."""
    from reprise.data._validate import load_schema

    validate_name(name)
    ws = _workspace(workspace)
    _, spec, source = load_schema(schema, Path(ws.root))
    if spec is None and source is None:
        raise UserError("this schema has custom checks that pandera cannot serialise; attach "
                        "it as FILE.py:NAME so it can be loaded again.")
    if spec is None and source is not None and ".py:" in source:
        source = _relative_ref(source, Path(ws.root))
    ws.metadata.set_dataset_schema(name, spec, source)
    return spec, source


def _relative_ref(ref: str, root: Path) -> str:
    path, _, attr = ref.rpartition(":")
    try:
        return f"{Path(path).resolve().relative_to(root.resolve()).as_posix()}:{attr}"
    except ValueError:
        return f"{Path(path).resolve()}:{attr}"


def add_dataset(name: str, source: Any, *, workspace: Any = None, schema: Any = None,
                quarantine: bool = False, fmt: str | None = None, encoding: str = "utf-8",
                allow_type_change: bool = False, batch_rows: int = BATCH_ROWS,
                link: bool = False, na_values: Any = None,
                delimiter: str | None = None) -> AddResult:
    """Register ``source`` (a file, a directory, a pandas DataFrame or an Arrow table) as
    the next version of ``name``; unchanged content returns the newest version.

    Raises :class:`~reprise.data._validate.ValidationError` (a ``UserError``) with the
    report when rows break the schema and ``quarantine`` is off; nothing is registered.

    ``link=True`` hard-links the file into a local store instead of copying it (the
    file becomes read-only; see ``LocalArtifactStore.link_file``).

    ``na_values``: the text that means a missing value in CSV/TSV and JSON Lines, in
    every column (default: pandas' spellings, ``reprise.data.NA_VALUES``); recorded on
    the version, which is always read back with them.

    ``delimiter``: a CSV file's field delimiter (default: a tab for ``.tsv`` names,
    else a comma unless the file's start shows that only ``;``, tab or ``|`` splits
    its rows evenly); recorded on the version, as are the column types, which are
    inferred over the whole file (see ``reprise.data._infer``).
    """
    validate_name(name)
    ws = _workspace(workspace)
    meta = ws.metadata
    delimiter = check_delimiter(delimiter)
    with tempfile.TemporaryDirectory(prefix="reprise-data-") as tmp:
        path, fmt, origin = _source_path(source, fmt, Path(tmp))
        if delimiter is not None and fmt != "csv":
            raise UserError(f"--delimiter applies to CSV files; {origin} is read as {fmt}.")
        declared, spec_source = _schema_for(name, schema, ws)
        previous = meta.get_dataset_version(name)
        spellings = resolve_na_values(na_values)
        if fmt in TABULAR_FORMATS:
            scan = _scan_tabular(path, fmt, encoding, declared, quarantine, Path(tmp), batch_rows,
                                 spellings, delimiter)
            if previous is not None and previous.schema and not allow_type_change:
                _check_type_changes(name, previous, scan.schema, scan.profile)
            if scan.report is not None and not scan.report.ok and (
                    not quarantine or scan.report.table_level):
                from reprise.data._validate import ValidationError

                hint = ("" if quarantine else
                        "\nFix the rows, or pass --quarantine to register the valid rows and set "
                        "the failing ones aside.")
                raise ValidationError(
                    f"{origin} does not match the schema of {name!r}; nothing was registered.\n"
                    + scan.report.render() + hint, scan.report)
            if scan.rows == 0 and scan.clean_path is None:
                raise DataFormatError(f"{origin} has a header but no data rows; there is "
                                      "nothing to register.")
            stored_path, stored_fmt = (scan.clean_path, "parquet") if scan.clean_path else (path, fmt)
            rows, schema_map, profile = scan.clean_rows, scan.schema, scan.profile
        elif fmt == "files":
            if not path.is_dir():
                raise UserError(f"{origin} is not a folder; --format files needs one.")
            from reprise.data._folder import store_folder

            stored_path, stored_fmt, rows, schema_map = path, "files", None, None
            art, profile = store_folder(ws, path, origin, link=link)
        else:
            if path.stat().st_size == 0:
                raise DataFormatError(f"{origin} is empty: there is nothing to register.")
            stored_path, stored_fmt, rows, schema_map = path, "file", None, None
            profile = {"format_version": 1, "bytes": path.stat().st_size}
        if stored_fmt != "files":
            art = _store(ws, stored_path, link=link and stored_path == path)
        record_meta: dict[str, Any] = {"source": origin,
                                       "size": art.meta.get("bytes", art.size),
                                       "stored_name": art.meta.get("name")}
        if stored_fmt in ("csv", "jsonl") and compression_of(stored_path.name):
            record_meta["compression"] = compression_of(stored_path.name)
        if stored_fmt == "csv":
            record_meta["encoding"] = encoding
            record_meta["delimiter"] = scan.delimiter
        if stored_fmt in ("csv", "jsonl"):
            record_meta["na_values"] = list(spellings)
        if spec_source is not None:
            record_meta["schema"] = spec_source
        quarantined = None
        if fmt in TABULAR_FORMATS and scan.report is not None:
            record_meta["validation"] = {"rows": scan.report.rows,
                                         "failing_rows": scan.report.failing_rows}
            if scan.bad_path is not None and scan.report.failing_rows:
                bad = _store(ws, scan.bad_path)
                quarantined = {"hash": bad.hash, "rows": scan.report.failing_rows,
                               "report": scan.report.to_dict()}
                record_meta["quarantine"] = {"hash": bad.hash, "rows": scan.report.failing_rows}
                record_meta["source_hash"] = _store(ws, path).hash
        record = DatasetRecord(name=name, version=0, artifact_hash=art.hash, format=stored_fmt,
                               rows=rows, schema=schema_map, profile=profile, meta=record_meta,
                               created_at=time.time())
        if stored_fmt in ("csv", "jsonl"):
            _check_same_reading(name, previous, art.hash, spellings, record_meta.get("delimiter"))
        stored, created = meta.add_dataset_version(record)
        if created and schema is not None:
            attach_schema(name, schema, workspace=ws)
        return AddResult(stored, created, scan.report if fmt in TABULAR_FORMATS else None,
                         quarantined)


def _source_path(source: Any, fmt: str | None, tmp: Path) -> tuple[Path, str, str]:
    """A local file for ``source``; in-memory tables are written as deterministic Parquet."""
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if not path.exists():
            raise UserError(f"{path} does not exist. Check the path (relative paths are from "
                            f"{Path.cwd()}).")
        if not (path.is_file() or path.is_dir()):
            raise UserError(f"{path} is not a regular file or a directory.")
        return path, detect_format(path, fmt), str(path)
    table = _as_arrow(source)
    out = tmp / "table.parquet"
    from reprise.store._value_materializers import _write_parquet

    with open(out, "wb") as f:
        _write_parquet(table, f)
    return out, "parquet", f"<{type(source).__name__}>"


def _as_arrow(obj: Any) -> Any:
    import pyarrow as pa

    if isinstance(obj, pa.Table):
        return obj
    if type(obj).__module__.startswith("pandas") and type(obj).__name__ == "DataFrame":
        try:
            return pa.Table.from_pandas(obj, preserve_index=False)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            m = re.search(r"for column (\S+) with type", str(exc))
            col = f"column {m.group(1)!r}" if m else "a column"
            raise DataFormatError(
                f"{col} of the DataFrame has mixed types ({exc}). Convert it to one type "
                "(for example df[col].astype(str)) before adding.") from None
    raise UserError(f"cannot add a {type(obj).__name__}: give a path, a pandas DataFrame or a "
                    "pyarrow Table.")


def _schema_for(name: str, schema: Any, ws: Any) -> tuple[Any, str | None]:
    from reprise.data import _validate as v

    if schema is not None:
        obj, spec, source = v.load_schema(schema, Path(ws.root))
        if source is not None and ".py:" in source:
            source = _relative_ref(source, Path(ws.root))
        return obj, source or "(given in Python)"
    stored = ws.metadata.get_dataset_schema(name)
    if stored is None:
        return None, None
    spec, source = stored
    return v.schema_from_stored(spec, source, Path(ws.root)), source or "(attached)"


@dataclass
class _Scan:
    rows: int = 0
    clean_rows: int = 0
    schema: dict[str, str] = field(default_factory=dict)
    profile: dict[str, Any] | None = None
    report: Any = None
    clean_path: Path | None = None
    bad_path: Path | None = None
    delimiter: str | None = None


def _scan_tabular(path: Path, fmt: str, encoding: str, declared: Any, quarantine: bool,
                  tmp: Path, batch_rows: int, na_values: tuple[str, ...],
                  delimiter: str | None = None) -> _Scan:
    """One pass: read, detect mixed types, validate, quarantine, profile (again with
    wider column types if a later block needs them: ``read_whole``)."""
    from reprise.data._validate import arrow_column_types

    column_types = arrow_column_types(declared) if declared is not None and fmt == "csv" else None
    src = TabularSource(path, fmt, encoding=encoding, column_types=column_types,
                        na_values=na_values, delimiter=delimiter)
    return read_whole(src, lambda s: _scan_once(s, declared, quarantine, tmp, batch_rows))


def _scan_once(src: TabularSource, declared: Any, quarantine: bool, tmp: Path,
               batch_rows: int) -> _Scan:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from reprise.data._formats import mixed_type_problem
    from reprise.data._profile import profile_batches
    from reprise.data._validate import StreamValidator, text_columns

    path = src.path
    skip = text_columns(declared) if declared is not None else set()
    validator = StreamValidator(declared) if declared is not None else None
    scan = _Scan(report=validator.report if validator else None,
                 delimiter=src.csv_delimiter if src.format == "csv" else None)
    writers: dict[str, Any] = {}
    stream = src.batches(batch_rows)
    first = next(stream, None)
    if first is None:
        raise DataFormatError(f"{path} has a header but no data rows; there is nothing to "
                              "register." if path.stat().st_size else
                              f"{path} is empty: there is nothing to register.")
    arrow_schema = first.schema
    scan.schema = {f.name: str(f.type) for f in arrow_schema}

    def checked() -> Iterator[Any]:
        row = 0
        for batch in itertools.chain([first], stream):
            problem = mixed_type_problem(batch, row, skip)
            if problem:
                raise DataFormatError(f"{path}: {problem}")
            good = batch
            if validator is not None:
                mask = validator.check(batch, row)
                if quarantine and mask.any():
                    bad = batch.filter(pa.array(mask))
                    good = batch.filter(pa.array(~mask))
                    _write(writers, "bad", tmp / "quarantine.parquet", bad)
            if quarantine and validator is not None:
                _write(writers, "clean", tmp / "clean.parquet", good)
            row += batch.num_rows
            scan.clean_rows += good.num_rows
            yield good
        scan.rows = row

    try:
        scan.profile = profile_batches(arrow_schema, checked())
    finally:
        for w in writers.values():
            w.close()
    if quarantine and validator is not None and validator.report.failing_rows:
        scan.clean_path = tmp / "clean.parquet"
        if not scan.clean_path.exists():  # every row failed: an empty table, same schema
            pq.write_table(arrow_schema.empty_table(), scan.clean_path)
        scan.bad_path = tmp / "quarantine.parquet"
    return scan


def _write(writers: dict[str, Any], key: str, path: Path, batch: Any) -> None:
    import pyarrow.parquet as pq

    if batch.num_rows == 0 and key in writers:
        return
    w = writers.get(key)
    if w is None:
        w = writers[key] = pq.ParquetWriter(path, batch.schema, compression="zstd",
                                            version="2.6")
    w.write_batch(batch)


def _check_type_changes(name: str, previous: DatasetRecord, new: dict[str, str],
                        profile: dict[str, Any] | None) -> None:
    """Refuse changed column types; a column with no value (in either version) has
    no type of its own and may take any."""
    old = previous.schema or {}
    empty = _empty_columns(previous.profile) | _empty_columns(profile)
    changed = [(c, old[c], t) for c, t in new.items() if c in old and old[c] != t
               and "null" not in (old[c], t) and c not in empty]
    if changed:
        desc = ", ".join(f"{c!r} {a} -> {b}" for c, a, b in changed)
        raise DataFormatError(
            f"column types changed from {previous.ref}: {desc}. If this is intended, pass "
            "--allow-type-change; otherwise fix the export.")


def _empty_columns(profile: dict[str, Any] | None) -> set[str]:
    columns = (profile or {}).get("columns") or {}
    return {c for c, p in columns.items() if isinstance(p, dict) and p.get("count") == 0}


def _check_same_reading(name: str, previous: DatasetRecord | None, artifact_hash: str,
                        spellings: tuple[str, ...], delimiter: str | None) -> None:
    """The same bytes read with other missing-value spellings (or another delimiter)
    would be other data, but a name's newest version cannot be re-added with the same
    bytes: say so."""
    if previous is None or previous.artifact_hash != artifact_hash:
        return
    was = previous.meta.get("delimiter")
    if delimiter is not None and was is not None and was != delimiter:
        raise UserError(
            f"{previous.ref} already holds these bytes, read with the delimiter {was!r}; a "
            f"version's delimiter cannot change. Add the file under another name to read it "
            f"with {delimiter!r}.")
    old = resolve_na_values(previous.meta.get("na_values"))
    if old != spellings:
        raise UserError(
            f"{previous.ref} already holds these bytes, read with the missing-value spellings "
            f"{list(old)}; a version's spellings cannot change. Add the file under another "
            f"name (e.g. {name}-na) to read it with {list(spellings)}.")


def _store(ws: Any, path: Path, link: bool = False) -> ArtifactRecord:
    from reprise.store._materializers import save_object

    if link:
        h, size = ws.artifacts.link_file(path)
        record = ArtifactRecord(hash=h, size=size, kind="file", materializer="file",
                                meta={"name": path.name}, created=time.time())
    else:
        record = save_object(ws.artifacts, path)
    ws.metadata.put_artifact(record)
    return record


def get_dataset(ref: str, *, workspace: Any = None) -> DatasetRecord:
    """The record of ``name@N`` / ``name@latest`` / ``name``."""
    name, version = parse_ref(ref)
    ws = _workspace(workspace)
    record: DatasetRecord | None = ws.metadata.get_dataset_version(name, version)
    if record is None:
        known = ws.metadata.get_dataset_version(name)
        if known is None:
            raise DatasetNotFoundError(f"no dataset named {name!r}; `reprise data list` shows "
                                       "them, `reprise data add` creates one.")
        raise DatasetNotFoundError(f"dataset {name!r} has no version {version} (newest: "
                                   f"{known.ref}).")
    return record


def list_datasets(*, workspace: Any = None) -> list[DatasetRecord]:
    """Every version of every dataset, by name and version."""
    return list(_workspace(workspace).metadata.list_dataset_versions())


def summarise_datasets(*, workspace: Any = None) -> list[dict[str, Any]]:
    """One row per dataset: its newest version and how many versions it has."""
    newest: dict[str, DatasetRecord] = {}
    counts: dict[str, int] = {}
    for r in _workspace(workspace).reader.list_dataset_versions():
        newest[r.name] = r
        counts[r.name] = counts.get(r.name, 0) + 1
    return [{"name": n, "latest": r.version, "versions": counts[n], "format": r.format,
             "rows": r.rows, "size": r.meta.get("size"), "created_at": r.created_at}
            for n, r in sorted(newest.items())]


def diff_datasets(old: str, new: str, *, workspace: Any = None) -> dict[str, Any]:
    """What changed between two versions: whether the bytes are identical, and the
    profile diff when both profiles are comparable (two tables, or two folders)."""
    from reprise.data._profile_diff import diff_profiles

    ws = _workspace(workspace)
    a, b = get_dataset(old, workspace=ws), get_dataset(new, workspace=ws)
    out: dict[str, Any] = {"old": a.ref, "new": b.ref,
                           "identical": a.artifact_hash == b.artifact_hash}
    comparable = (a.profile is not None and b.profile is not None
                  and "file" not in (a.format, b.format)
                  and (a.format == "files") == (b.format == "files"))
    if comparable:
        out.update(diff_profiles(a.profile or {}, b.profile or {}))
    if a.format == b.format == "files" and not out["identical"]:
        from reprise.data._folder import diff_folders

        out.update(diff_folders(ws, a, b))
    return out


def checkout_dataset(ref: str, dest: str | os.PathLike[str], *, workspace: Any = None) -> Path:
    """Write a version's bytes to ``dest``: a folder dataset as the folder it was added
    from (``dest`` must not exist or be empty), any other as one file in (or at)
    ``dest``. Every file is checked against its hash; returns what was written.

    Example:
        >>> checkout_dataset("images@2", "images-v2")  # doctest: +SKIP
        PosixPath('images-v2')
    """
    from reprise.data._folder import checkout_folder

    ws = _workspace(workspace)
    return checkout_folder(ws, get_dataset(ref, workspace=ws), Path(dest))


def _recorded_types(record: DatasetRecord) -> dict[str, Any] | None:
    """A text version's column types as registered (inferred over the whole file, or
    declared), so it reads back with them wherever its blocks are cut."""
    from reprise.data._infer import type_from_name

    if record.format not in ("csv", "jsonl") or not record.schema:
        return None
    kinds = {name: type_from_name(kind) for name, kind in record.schema.items()}
    return {name: kind for name, kind in kinds.items() if kind is not None} or None


class Dataset:
    """A reference to a dataset version, usable as a pipeline input.

    ``Dataset("churn@3")`` pins a version; ``Dataset("churn@latest")`` (or just
    ``"churn"``) follows the newest, and since the resolved version's content hash
    enters the cache key, a new version re-runs exactly the steps that read it.

    Example:
        >>> Dataset("churn@2").name, Dataset("churn@2").version
        ('churn', 2)
    """

    def __init__(self, ref: str, *, workspace: Any = None) -> None:
        self.ref = ref
        self.name, self.version = parse_ref(ref)
        self._workspace = workspace
        self._record: DatasetRecord | None = None

    def __repr__(self) -> str:
        return f"Dataset({self.ref!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Dataset) and other.ref == self.ref

    def __hash__(self) -> int:
        return hash(("Dataset", self.ref))

    @classmethod
    def from_param(cls, value: str) -> Dataset:
        """``-p data=churn@3`` on the command line."""
        return cls(value)

    @property
    def record(self) -> DatasetRecord:
        if self._record is None:
            self._record = get_dataset(self.ref, workspace=self._workspace)
        return self._record

    @property
    def format(self) -> str:
        return self.record.format

    def path(self) -> Path:
        """A local, read-only path to the version's bytes (a file, or a folder for
        ``files`` datasets), verified on first use."""
        ws = _workspace(self._workspace)
        rec = self.record
        if rec.format == "files":
            from reprise.data._folder import folder_path

            return folder_path(ws, rec)
        local = ws.artifacts.local_path(rec.artifact_hash)
        if local is not None:
            return Path(local)
        cache = Path(ws.config.workspace_dir) / "cache" / "datasets" / rec.artifact_hash
        if not cache.exists():  # remote store: cached locally on first read
            # durable: later reads trust this copy without hashing it again
            ws.artifacts.copy_to(rec.artifact_hash, cache, verify=True)
        return cache

    def parquet_path(self) -> Path | None:
        return self.path() if self.format == "parquet" else None

    @property
    def na_values(self) -> tuple[str, ...]:
        """The missing-value spellings this version was registered (and is read) with."""
        return resolve_na_values(self.record.meta.get("na_values"))

    def batches(self, batch_rows: int = BATCH_ROWS, *, na_values: Any = None) -> Iterator[Any]:
        """The rows as Arrow batches; ``na_values`` overrides the recorded spellings."""
        if self.format not in TABULAR_FORMATS:
            raise UserError(f"{self.record.ref} is {self.format} data, not a table.")
        meta = self.record.meta
        spellings = self.na_values if na_values is None else resolve_na_values(na_values)
        return TabularSource(self.path(), self.format, encoding=meta.get("encoding", "utf-8"),
                             delimiter=meta.get("delimiter"), compression=meta.get("compression"),
                             na_values=spellings,
                             column_types=_recorded_types(self.record)).batches(batch_rows)

    def to_arrow(self) -> Any:
        """The version as one Arrow table; its schema metadata records the spellings
        (``reprise.na_values``), which ``package_model`` keeps for batch prediction."""
        import json

        import pyarrow as pa

        batches = list(self.batches())
        if not batches:
            raise UserError(f"{self.record.ref} has no rows.")
        table = pa.Table.from_batches(batches)
        return table.replace_schema_metadata({**(table.schema.metadata or {}),
                                              b"reprise.na_values": json.dumps(self.na_values)})

    def to_pandas(self) -> Any:
        df = self.to_arrow().to_pandas()
        df.attrs["reprise.na_values"] = list(self.na_values)
        return df

    # -- pipeline input protocol (see reprise.pipeline._external) ---------------------
    def reprise_input_key(self) -> str:
        return f"dataset:{self.ref}"

    def reprise_resolve(self, workspace: Any) -> dict[str, Any]:
        """What a pipeline run records: the content hash for the cache key, the pinned
        version, and how a worker process rebuilds this input."""
        self._workspace = workspace
        rec = self.record
        art = workspace.metadata.get_artifact(rec.artifact_hash)
        return {"content_hash": rec.artifact_hash, "artifact": art.to_dict(),
                "source": rec.ref,
                "rebuild": {"factory": "reprise.data._dataset:Dataset.reprise_rebuild",
                            "payload": {"ref": rec.ref, "root": str(workspace.root)}}}

    @classmethod
    def reprise_rebuild(cls, payload: dict[str, Any]) -> Dataset:
        from reprise.tracking import open_workspace

        return cls(payload["ref"], workspace=open_workspace(payload["root"]))
