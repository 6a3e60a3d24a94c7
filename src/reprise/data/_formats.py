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
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reprise.core._nulls import resolve_na_values
from reprise.core.errors import UserError

__all__ = [
    "TABULAR_FORMATS",
    "DataFormatError",
    "TabularSource",
    "detect_format",
    "mixed_type_problem",
]

TABULAR_FORMATS = ("csv", "parquet", "jsonl")
_SUFFIXES = {".csv": "csv", ".tsv": "csv", ".parquet": "parquet", ".pq": "parquet",
             ".jsonl": "jsonl", ".ndjson": "jsonl"}
_COMPRESSION = {".gz": "gzip", ".bz2": "bz2", ".zst": "zstd", ".lz4": "lz4"}
BLOCK_SIZE = 8 << 20  # CSV/JSON block: the unit of type inference and of memory use
_NUMBER = r"^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*$"


class DataFormatError(UserError):
    """The source cannot be read as the format it claims to be."""


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
    column_types: dict[str, Any] | None = None
    block_size: int = BLOCK_SIZE
    compression: str | None = None
    """gzip, bz2, zstd or lz4; by default from the file name (stored blobs have none)."""
    na_values: tuple[str, ...] | None = None
    """Text that means a missing value in CSV and JSON Lines, in every column (see
    ``reprise.core._nulls``); None: pandas' defaults."""

    @property
    def null_spellings(self) -> tuple[str, ...]:
        return resolve_na_values(self.na_values)

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
    def _csv_reader(self) -> Any:
        import pyarrow.csv as pcsv

        delimiter = self.delimiter or ("\t" if ".tsv" in self.path.name.lower() else ",")
        return pcsv.open_csv(
            self._open(),
            read_options=pcsv.ReadOptions(block_size=self.block_size, encoding=self.encoding),
            parse_options=pcsv.ParseOptions(delimiter=delimiter),
            # text columns too (Arrow's default leaves "NA" a string there), quoted or not,
            # as pandas.read_csv does
            convert_options=pcsv.ConvertOptions(
                column_types=self.column_types or {}, null_values=list(self.null_spellings),
                strings_can_be_null=True, quoted_strings_can_be_null=True))

    def _csv(self) -> Iterator[Any]:
        import pyarrow as pa

        if self.path.stat().st_size == 0:
            raise self._empty()
        try:
            for batch in self._csv_reader():
                self._check_decoded(batch)
                yield batch
        except pa.ArrowInvalid as exc:
            raise self._csv_problem(str(exc)) from None
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

    def _csv_problem(self, message: str) -> DataFormatError:
        m = re.search(r"Expected (\d+) columns, got (\d+)", message)
        if m:
            line = _first_ragged_line(self.path, self.encoding, int(m.group(1)))
            return DataFormatError(
                f"{self.path}: line {line} has {m.group(2)} fields where the header has "
                f"{m.group(1)} (a ragged row). Fix or remove that line, or quote fields that "
                "contain the delimiter.")
        m = re.search(r"In CSV column #(\d+): CSV conversion error to (\w+): invalid value '(.*)'",
                      message)
        if m:
            col, typ, value = int(m.group(1)), m.group(2), m.group(3)
            name, line = _locate_value(self.path, self.encoding, col, value)
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
        done = 0
        try:
            for batch in self._jsonl_reader(self._open()):
                done += batch.num_rows
                yield batch
        except pa.ArrowInvalid as exc:
            message = str(exc)
            if not (re.search(r"changed from \w+ to \w+", message) and self.null_spellings):
                raise self._jsonl_problem(message) from None
        else:
            return
        # a number (or boolean) field that spells some missing values as text ("NA"):
        # read a copy with those strings written as null, from the row that failed
        yield from _jsonl_spelled_nulls(self, done)

    def _jsonl_reader(self, source: Any) -> Iterator[Any]:
        import pyarrow.json as pjson

        from reprise.data._nullspell import null_spelled_strings

        reader = pjson.open_json(source, read_options=pjson.ReadOptions(
            block_size=self.block_size))
        spellings = self.null_spellings
        for batch in reader:
            yield null_spelled_strings(batch, spellings)

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


def _jsonl_spelled_nulls(src: TabularSource, skip_rows: int) -> Iterator[Any]:
    import pyarrow as pa

    from reprise.data._nullspell import rewrite_jsonl_nulls

    with rewrite_jsonl_nulls(src._open(), src.null_spellings) as clean:
        try:
            for batch in src._jsonl_reader(clean):
                if skip_rows >= batch.num_rows:
                    skip_rows -= batch.num_rows
                    continue
                yield batch.slice(skip_rows)
                skip_rows = 0
        except pa.ArrowInvalid as exc:
            raise src._jsonl_problem(str(exc)) from None


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


def _csv_lines(path: Path, encoding: str) -> Iterator[tuple[int, list[str]]]:
    with open(path, encoding=encoding, errors="replace", newline="") as f:
        reader = csv.reader(f, delimiter="\t" if ".tsv" in path.name.lower() else ",")
        for row in reader:
            yield reader.line_num, row


def _first_ragged_line(path: Path, encoding: str, expected: int) -> int:
    for line, row in _csv_lines(path, encoding):
        if len(row) != expected:
            return line
    return 0


def _locate_value(path: Path, encoding: str, col: int, value: str) -> tuple[str, int]:
    name = str(col)
    for line, row in _csv_lines(path, encoding):
        if line == 1:
            name = row[col] if col < len(row) else name
        elif col < len(row) and row[col] == value:
            return name, line
    return name, 0
