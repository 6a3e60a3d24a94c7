"""Reading dataset sources as streams of Arrow record batches, with readable errors.

pyarrow does the parsing; this module turns its failures (and the silent ones:
undecodable bytes read as ``binary``, a column of numbers with a few words in
it) into a message that names the file, the row or line, and what to do next.
Every reader is streaming, so checking and profiling a file larger than memory
takes memory bounded by the batch size.
"""

from __future__ import annotations

import codecs
import csv
import dataclasses
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from reprise.core._nulls import resolve_na_values
from reprise.core.errors import UserError

__all__ = [
    "TABULAR_FORMATS",
    "ColumnTypesWidened",
    "DataFormatError",
    "TabularSource",
    "check_delimiter",
    "detect_format",
    "mixed_type_problem",
    "read_whole",
]

TABULAR_FORMATS = ("csv", "parquet", "jsonl")
_SUFFIXES = {".csv": "csv", ".tsv": "csv", ".parquet": "parquet", ".pq": "parquet",
             ".jsonl": "jsonl", ".ndjson": "jsonl"}
_COMPRESSION = {".gz": "gzip", ".bz2": "bz2", ".zst": "zstd", ".lz4": "lz4"}
# CSV/JSON block: the unit of type inference and of memory use, and the longest row (or JSON
# object) the reader takes. 4 MiB rather than 8: on the 1M x 20 bench file `data add` used
# 2.98 CPU-s and 412 MB peak instead of 3.25 CPU-s and 525 MB (bigger blocks fall out of the
# CPU caches while Arrow parses them); 1 MiB saved more memory (290 MB) but would refuse rows
# between 1 and 4 MiB long.
BLOCK_SIZE = 4 << 20
_NUMBER = r"^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*$"


class DataFormatError(UserError):
    """The source cannot be read as the format it claims to be."""


class ColumnTypesWidened(DataFormatError):
    """A block further on holds values that the column types in use cannot read, and
    ``column_types`` (every inferred column's type over the whole file, see
    ``reprise.data._infer``) can: read the file again with them, as
    :func:`read_whole` does. Batches already read used the narrower types."""

    def __init__(self, source: TabularSource, column_types: dict[str, Any],
                 changed: list[tuple[str, Any, Any]]) -> None:
        desc = ", ".join(f"{c!r} {a} -> {b}" for c, a, b in changed)
        super().__init__(f"{source.path}: column types inferred from the start of the file do "
                         f"not hold further on ({desc}); read it again with these types.")
        self.column_types, self.changed = column_types, changed


T = TypeVar("T")


def read_whole(source: TabularSource, consume: Callable[[TabularSource], T]) -> T:
    """``consume(source)``, again with wider column types each time a later block
    shows that a column's type must widen (:class:`ColumnTypesWidened`): so the
    types come from the whole file, not from where its first block ends.

    Every retry widens at least one column along a finite order of types, so this
    ends; a consistent file (nearly all) is read once.
    """
    while True:
        try:
            return consume(source)
        except ColumnTypesWidened as exc:
            source = dataclasses.replace(source, inferred_types=exc.column_types)


def check_delimiter(delimiter: str | None) -> str | None:
    """A CSV delimiter as given (``\\t`` and ``tab`` mean a tab): one character that
    is not a quote or a line break."""
    if delimiter is None:
        return None
    value = {"\\t": "\t", "tab": "\t"}.get(delimiter, delimiter)
    if len(value) != 1 or value in "\"\r\n":
        raise UserError(f"--delimiter must be one character (for example ';', '|' or '\\t' "
                        f"for a tab), not {delimiter!r}.")
    return value


def detect_format(path: Path, fmt: str | None = None) -> str:
    """``csv``, ``parquet``, ``jsonl``, ``files`` (a directory) or ``file`` (opaque bytes)."""
    if fmt is not None:
        allowed = (*TABULAR_FORMATS, "files", "file")
        if fmt not in allowed:
            raise UserError(f"--format must be one of {', '.join(allowed)}, not {fmt!r}.")
        return fmt
    if path.is_dir():
        return "files"
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] in _COMPRESSION:
        suffixes = suffixes[:-1]
    return _SUFFIXES.get(suffixes[-1], "file") if suffixes else "file"


@dataclass
class TabularSource:
    """A CSV, Parquet or JSON Lines file read as Arrow record batches.

    Example:
        >>> import tempfile, pathlib
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "t.csv"
        >>> _ = p.write_text("a,b\\n1,x\\n2,y\\n")
        >>> src = TabularSource(p, "csv")
        >>> sum(b.num_rows for b in src.batches())
        2
    """

    path: Path
    format: str
    encoding: str = "utf-8"
    delimiter: str | None = None
    """CSV only; by default a tab for ``.tsv`` names, else sniffed (``_infer.sniff_delimiter``)."""
    column_types: dict[str, Any] | None = None
    """Declared types (a schema's): a value they cannot read is an error."""
    inferred_types: dict[str, Any] | None = None
    """Types found over the whole file (:func:`read_whole`): widened when they fail."""
    _sniffed: str | None = dataclasses.field(default=None, init=False, repr=False, compare=False)
    block_size: int = dataclasses.field(default_factory=lambda: BLOCK_SIZE)
    """Bytes per CSV/JSON block (``BLOCK_SIZE``, read when the source is made)."""
    compression: str | None = None
    """gzip, bz2, zstd or lz4; by default from the file name (stored blobs have none)."""
    na_values: tuple[str, ...] | None = None
    """Text that means a missing value in CSV and JSON Lines, in every column (see
    ``reprise.core._nulls``); None: pandas' defaults."""

    @property
    def null_spellings(self) -> tuple[str, ...]:
        return resolve_na_values(self.na_values)

    @property
    def csv_delimiter(self) -> str:
        """The delimiter a CSV file is read with: given, a tab for ``.tsv``, or sniffed
        from the file's start (a comma unless the comma cannot be right)."""
        if self.delimiter is not None:
            return self.delimiter
        if ".tsv" in self.path.name.lower():
            return "\t"
        if self._sniffed is None:
            from reprise.data._infer import sniff_delimiter

            self._sniffed = sniff_delimiter(self._sample()) or ","
        return self._sniffed

    def _sample(self) -> str:
        from reprise.data._infer import SNIFF_BYTES

        opened = self._open()
        raw: bytes
        if hasattr(opened, "read"):
            with opened:
                raw = opened.read(SNIFF_BYTES)
        else:
            with open(opened, "rb") as f:
                raw = f.read(SNIFF_BYTES)
        try:
            return raw.decode(self.encoding, errors="replace")
        except LookupError:
            return raw.decode("utf-8", errors="replace")

    def _open(self) -> Any:
        import pyarrow as pa

        codec = self.compression or compression_of(self.path.name)
        return pa.input_stream(self.path, compression=codec) if codec else self.path

    def batches(self, batch_rows: int = 131_072) -> Iterator[Any]:
        """Record batches in file order; raise :class:`DataFormatError` on bad content."""
        if self.format == "parquet":
            yield from self._parquet(batch_rows)
        elif self.format == "csv":
            yield from self._csv()
        elif self.format == "jsonl":
            yield from self._jsonl()
        else:
            raise UserError(f"{self.path} is not tabular ({self.format}).")

    def schema(self) -> Any:
        """The Arrow schema (reads one block for CSV and JSON Lines)."""
        if self.format == "parquet":
            return self._parquet_file().schema_arrow
        for batch in self.batches():
            return batch.schema
        raise self._empty()

    # -- Parquet ---------------------------------------------------------------------
    def _parquet_file(self) -> Any:
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            # pre_buffer would read every row group ahead: memory would grow with the file
            return pq.ParquetFile(self.path, pre_buffer=False, buffer_size=1 << 20)
        except (pa.ArrowInvalid, OSError) as exc:
            raise DataFormatError(
                f"{self.path} is not a readable Parquet file (truncated or corrupt?): {exc}. "
                "Re-export it, or pass --format if it is another format.") from None

    def _parquet(self, batch_rows: int) -> Iterator[Any]:
        import pyarrow as pa

        pf = self._parquet_file()
        try:
            yield from pf.iter_batches(batch_size=batch_rows)
        except (pa.ArrowInvalid, OSError) as exc:
            raise DataFormatError(
                f"{self.path}: Parquet data is damaged (truncated or corrupt?): {exc}. "
                "Re-export the file.") from None

    # -- CSV -------------------------------------------------------------------------
    def _csv_reader(self, column_types: dict[str, Any] | None = None) -> Any:
        import pyarrow.csv as pcsv

        if column_types is None:
            column_types = {**(self.inferred_types or {}), **(self.column_types or {})}
        return pcsv.open_csv(
            self._open(),
            read_options=pcsv.ReadOptions(block_size=self.block_size, encoding=self.encoding),
            parse_options=pcsv.ParseOptions(delimiter=self.csv_delimiter),
            # text columns too (Arrow's default leaves "NA" a string there), quoted or not,
            # as pandas.read_csv does
            convert_options=pcsv.ConvertOptions(
                column_types=column_types, null_values=list(self.null_spellings),
                strings_can_be_null=True, quoted_strings_can_be_null=True))

    def _csv(self) -> Iterator[Any]:
        import pyarrow as pa

        if self.path.stat().st_size == 0:
            raise self._empty()
        schema = None
        try:
            for batch in self._csv_reader():
                schema = batch.schema
                self._check_decoded(batch)
                yield _nulls_as_float(batch)
        except pa.ArrowInvalid as exc:
            raise self._csv_problem(str(exc), schema) from None
        except UnicodeDecodeError as exc:
            raise self._decode_problem(exc) from None

    def _check_decoded(self, batch: Any) -> None:
        import pyarrow as pa

        for name, column in zip(batch.schema.names, batch.columns, strict=True):
            if pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type):
                line, detail = _first_undecodable_line(self.path, self.encoding)
                raise DataFormatError(
                    f"{self.path}: column {name!r} holds bytes that are not valid "
                    f"{self.encoding} (first at line {line}{detail}). Pass --encoding with "
                    "the file's encoding (for example latin-1 or cp1252), or re-save it as UTF-8.")

    def _csv_problem(self, message: str, schema: Any = None) -> DataFormatError:
        m = re.search(r"Expected (\d+) columns, got (\d+)", message)
        if m:
            line = _first_ragged_line(self.path, self.encoding, int(m.group(1)),
                                      self.csv_delimiter)
            return DataFormatError(
                f"{self.path}: line {line} has {m.group(2)} fields where the header has "
                f"{m.group(1)} (a ragged row). Fix or remove that line, or quote fields that "
                f"contain the delimiter.{self._delimiter_hint()}")
        # "invalid value 'x'", "expected no zone offset in 'x'"...
        m = re.search(r"In CSV column #(\d+): CSV conversion error to ([^:]+): [^']*'(.*)'",
                      message)
        if m:
            col, typ, value = int(m.group(1)), m.group(2), m.group(3)
            widened = self._widened(schema, col, value)
            if widened is not None:
                return widened
            name, line = _locate_value(self.path, self.encoding, col, value, self.csv_delimiter)
            if typ == "null":
                return DataFormatError(
                    f"{self.path}: column {name!r} is empty in the first block of rows and "
                    f"then holds {value!r} at line {line}, so its type cannot be inferred. "
                    "Declare the column's type in a schema (reprise data schema NAME ...).")
            return DataFormatError(
                f"{self.path}: column {name!r} has mixed types: earlier rows read as {typ} but "
                f"line {line} holds {value!r}. Fix the value, or declare the column's type in "
                "a schema (reprise data schema NAME ...).")
        if "empty" in message.lower():
            return self._empty()
        return DataFormatError(f"{self.path}: cannot read as CSV: {message}")

    def _widened(self, schema: Any, col: int, value: str) -> ColumnTypesWidened | None:
        """The types to read again with when column ``col`` (not declared) cannot take
        ``value``: found over the whole file the first time, then the failing column's
        next type (``reprise.data._infer``). None when the names are not unique."""
        from reprise.data._infer import infer_csv_types, widen_csv_type

        names = schema.names if schema is not None else self._header()
        if col >= len(names) or names[col] in (self.column_types or {}) \
                or len(set(names)) != len(names):
            return None
        name = names[col]
        if self.inferred_types is None:
            kinds = infer_csv_types(self, names)
            old = schema.field(col).type if schema is not None else None
            if old is not None and kinds[name] == old:
                return None
        else:
            kinds = dict(self.inferred_types)
            old = kinds.get(name)
            wider = widen_csv_type(old, value) if old is not None else None
            if wider is None:
                return None
            kinds[name] = wider
        changed = [(name, old or "first block", kinds[name])]
        return ColumnTypesWidened(self, kinds, changed)

    def _header(self) -> list[str]:
        for _, row in _csv_lines(self.path, self.encoding, self.csv_delimiter):
            return row
        return []

    def _delimiter_hint(self) -> str:
        """`` The file looks ';'-delimited: ...`` when the header splits on another
        delimiter and not on the one in use."""
        header = self._header()
        if len(header) > 1 or not header:
            return ""
        line = header[0]
        for other in (";", "\t", "|", ","):
            if other != self.csv_delimiter and other in line:
                shown = "\\t" if other == "\t" else other
                return (f" The header has no {self.csv_delimiter!r} but has {other!r}: the "
                        f"file looks {other!r}-delimited; pass --delimiter '{shown}'.")
        return ""

    def _decode_problem(self, exc: UnicodeDecodeError) -> DataFormatError:
        line, detail = _first_undecodable_line(self.path, self.encoding)
        return DataFormatError(
            f"{self.path}: bytes that are not valid {self.encoding} at line {line}{detail}. "
            "Pass --encoding with the file's encoding (for example latin-1), or re-save it "
            "as UTF-8.")

    # -- JSON Lines ------------------------------------------------------------------
    def _jsonl(self) -> Iterator[Any]:
        import pyarrow as pa

        if self.path.stat().st_size == 0:
            raise self._empty()
        if self.encoding.replace("-", "").lower() != "utf8":
            raise UserError("JSON Lines files must be UTF-8 (JSON requires it); re-save the "
                            "file as UTF-8.")
        done, schema = 0, None
        try:
            for batch in self._jsonl_reader(self._open()):
                done, schema = done + batch.num_rows, batch.schema
                yield _nulls_as_float(batch)
        except pa.ArrowInvalid as exc:
            message = str(exc)
            if not (re.search(r"changed from \w+ to \w+", message) and self.null_spellings):
                raise self._jsonl_widened(message, schema) or self._jsonl_problem(message) \
                    from None
        else:
            return
        # a number (or boolean) field that spells some missing values as text ("NA"):
        # read a copy with those strings written as null, from the row that failed
        yield from _jsonl_spelled_nulls(self, done, schema)

    def _jsonl_reader(self, source: Any) -> Iterator[Any]:
        import pyarrow as pa
        import pyarrow.json as pjson

        from reprise.data._nullspell import null_spelled_strings

        kinds = {**(self.inferred_types or {}), **(self.column_types or {})}
        parse = pjson.ParseOptions(explicit_schema=pa.schema(list(kinds.items())),
                                   unexpected_field_behavior="infer") if kinds else None
        reader = pjson.open_json(source, read_options=pjson.ReadOptions(
            block_size=self.block_size), parse_options=parse)
        spellings = self.null_spellings
        for batch in reader:
            yield null_spelled_strings(batch, spellings)

    def _jsonl_widened(self, message: str, schema: Any) -> ColumnTypesWidened | None:
        """The types to read again with when a later block holds a field's values that
        the first block's types cannot (an int64 field's ``2.5``; a value in a field
        that was all null): found over the whole file (``reprise.data._infer``)."""
        from reprise.data._infer import infer_jsonl_types

        if self.inferred_types is not None or not re.search(
                r"Failed to convert JSON to|changed from \w+ to \w+", message):
            return None
        kinds = infer_jsonl_types(self)
        old = {f.name: f.type for f in schema} if schema is not None else {}
        changed = [(n, old.get(n, "first block"), t) for n, t in kinds.items()
                   if n in old and old[n] != t]
        return ColumnTypesWidened(self, kinds, changed or [("?", "first block", "whole file")])

    def _jsonl_problem(self, message: str) -> DataFormatError:
        m = re.search(r"Column\(/([^)]*)\) changed from (\w+) to (\w+) in row (\d+)", message)
        if m:
            return DataFormatError(
                f"{self.path}: field {m.group(1)!r} has mixed types: {m.group(2)} earlier, "
                f"{m.group(3)} in row {int(m.group(4)) + 1} of its block. Make the field's "
                "type consistent (write a missing value as null).")
        if "utf" in message.lower() or "invalid" in message.lower() and "encod" in message:
            line, detail = _first_undecodable_line(self.path, "utf-8")
            return DataFormatError(f"{self.path}: invalid UTF-8 at line {line}{detail}; "
                                   "re-save the file as UTF-8.")
        return DataFormatError(f"{self.path}: cannot read as JSON Lines: {message}")

    def _empty(self) -> DataFormatError:
        return DataFormatError(f"{self.path} is empty: there is nothing to register. "
                               "Check that the export finished.")


def _jsonl_spelled_nulls(src: TabularSource, skip_rows: int, schema: Any) -> Iterator[Any]:
    import pyarrow as pa

    from reprise.data._nullspell import rewrite_jsonl_nulls

    with rewrite_jsonl_nulls(src._open(), src.null_spellings) as clean:
        try:
            for batch in src._jsonl_reader(clean):
                schema = batch.schema
                if skip_rows >= batch.num_rows:
                    skip_rows -= batch.num_rows
                    continue
                yield _nulls_as_float(batch.slice(skip_rows))
                skip_rows = 0
        except pa.ArrowInvalid as exc:
            message = str(exc)
            raise src._jsonl_widened(message, schema) or src._jsonl_problem(message) from None


def _nulls_as_float(batch: Any) -> Any:
    """``batch`` with its columns of Arrow's ``null`` type (no value in the file) as
    float64, as pandas reads them: a type a schema, a model and a profile can use."""
    import pyarrow as pa

    if not any(pa.types.is_null(t) for t in batch.schema.types):
        return batch
    schema = pa.schema([f.with_type(pa.float64()) if pa.types.is_null(f.type) else f
                        for f in batch.schema])
    return batch.cast(schema)


def compression_of(name: str) -> str | None:
    """The compression a file name implies (``data.csv.gz`` -> ``gzip``), or None."""
    return _COMPRESSION.get(Path(name).suffix.lower())


def mixed_type_problem(batch: Any, first_row: int, skip: set[str]) -> str | None:
    """A text column whose values are mostly numbers: the tell-tale of a numeric column
    with a few stray words (``"n/a"``, ``"12 kg"``) that made the whole column text.

    Returns a message naming the column and the first offending row, or None. Columns
    in ``skip`` (declared as text in a schema) are not checked.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from reprise.data._values import _arrow_mask, _maybe_number_or_blank, _numpy

    for name, column in zip(batch.schema.names, batch.columns, strict=True):
        if name in skip or not (pa.types.is_string(column.type)
                                or pa.types.is_large_string(column.type)):
            continue
        valid = pc.drop_null(column)
        if len(valid) == 0:
            continue
        # only values that might be numbers or blank need the regex; when fewer than half
        # might, numbers cannot outnumber the text
        maybe = _maybe_number_or_blank(valid)
        n_maybe = int(np.count_nonzero(maybe))
        if 2 * n_maybe < len(valid):
            continue
        if n_maybe < len(valid):
            valid = valid.filter(_arrow_mask(maybe))
        numeric = pc.match_substring_regex(valid, _NUMBER)
        n_numeric = pc.sum(numeric).as_py() or 0
        n_blank = int(np.count_nonzero(_numpy(pc.utf8_length(pc.utf8_trim_whitespace(valid)))
                                       == 0))
        n_text = len(column) - column.null_count - n_numeric - n_blank
        if n_numeric and n_text and n_numeric >= n_text:
            is_text = pc.and_(pc.invert(pc.match_substring_regex(column, _NUMBER)),
                              pc.greater(pc.utf8_length(pc.utf8_trim_whitespace(column)), 0))
            idx = pc.index(is_text, True).as_py()
            value = column[idx].as_py()
            return (f"column {name!r} has mixed types: {n_numeric} values are numbers but row "
                    f"{first_row + idx + 1} holds {value!r} ({n_text} such values). Fix those "
                    "rows, or declare the column as text in a schema; if the value means "
                    f"missing, add it to the null spellings (--na-values 'default,{value}').")
    return None


# -- locating problems (error path only: plain Python scans are fine here) ------------

def _first_undecodable_line(path: Path, encoding: str) -> tuple[int, str]:
    decoder_factory = codecs.getincrementaldecoder(encoding)
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                decoder_factory().decode(raw, final=True)
            except UnicodeDecodeError as exc:
                return number, f", byte {exc.start + 1} of that line: {raw[exc.start:exc.end]!r}"
    return 0, ""


def _csv_lines(path: Path, encoding: str, delimiter: str) -> Iterator[tuple[int, list[str]]]:
    with open(path, encoding=encoding, errors="replace", newline="") as f:
        reader = csv.reader(f, delimiter=delimiter)
        for row in reader:
            yield reader.line_num, row


def _first_ragged_line(path: Path, encoding: str, expected: int, delimiter: str) -> int:
    for line, row in _csv_lines(path, encoding, delimiter):
        if len(row) != expected:
            return line
    return 0


def _locate_value(path: Path, encoding: str, col: int, value: str,
                  delimiter: str) -> tuple[str, int]:
    name = str(col)
    for line, row in _csv_lines(path, encoding, delimiter):
        if line == 1:
            name = row[col] if col < len(row) else name
        elif col < len(row) and row[col] == value:
            return name, line
    return name, 0
