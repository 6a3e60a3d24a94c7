"""Column types of a CSV or JSON Lines file from its whole content, and the CSV delimiter.

Arrow's streaming readers fix every column's type from the first block (8 MiB by
default): an integer column with one ``2.5`` further on, or a column empty until
then, fails to read, although ``pandas.read_csv`` reads it (as float64, or as the
later values' type). So whether a file is accepted would depend on where its
blocks are cut. :class:`~reprise.data._formats.TabularSource` reads optimistically
(most files are consistent, and this costs them nothing); when a later block
disagrees it calls :func:`infer_csv_types` or :func:`infer_jsonl_types`, one more
streaming pass over the whole file, and raises
:class:`~reprise.data._formats.ColumnTypesWidened` with the types found: the
caller reads again with them (:func:`~reprise.data._formats.read_whole`). Memory
stays bounded by the block: nothing but one type per column is kept between blocks.

The CSV types are Arrow's own inference, run on each block's values (read as text)
and merged along Arrow's order of candidate types (null, int64, bool, date32,
time32, timestamp[s], timestamp[ns], double, string): a column takes the widest
type of its blocks. Where that type does not hold for a value of another block
(``1``/``0`` in one block and ``true`` in another make ``bool``, but ``5`` does
not), the read with it fails and the column moves on to the next candidate that
holds the value (:func:`widen_csv_type`), so the result is the type Arrow would
infer reading the file as a single block, whatever its size or row order. A column
with no value at all is float64, as pandas reads it (Arrow's ``null`` type has no
use in a schema, a model or a profile).
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from reprise.data._formats import TabularSource

__all__ = ["infer_csv_types", "infer_jsonl_types", "merge_types", "sniff_delimiter",
           "type_from_name", "widen_csv_type"]

_TEXT = 8  # rank of string: nothing is wider


def _rank(kind: Any) -> int:
    """Position in Arrow's CSV inference order (timestamps with a zone share their unit's)."""
    import pyarrow.types as pat

    checks = (pat.is_null, pat.is_integer, pat.is_boolean, pat.is_date, pat.is_time)
    for rank, check in enumerate(checks):
        if check(kind):
            return rank
    if pat.is_timestamp(kind):
        return 5 if kind.unit == "s" else 6
    return 7 if pat.is_floating(kind) else _TEXT


def merge_types(a: Any, b: Any) -> Any:
    """The type of a column whose blocks have types ``a`` and ``b``: the later in
    Arrow's inference order (text where both are timestamps of the same unit, one
    with a time zone and one without, which no single type holds)."""
    import pyarrow as pa

    if a == b:
        return a
    ra, rb = _rank(a), _rank(b)
    if ra == rb:
        return pa.string()
    return a if ra > rb else b


def _candidates() -> list[Any]:
    import pyarrow as pa

    return [pa.int64(), pa.bool_(), pa.date32(), pa.time32("s"), pa.timestamp("s"),
            pa.timestamp("ns"), pa.float64(), pa.string()]


def _single_value_type(value: str, kind: Any = None) -> Any:
    """Arrow's CSV inference for one value (``kind``: whether it converts to that type;
    None when it does not)."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    sink = pa.BufferOutputStream()
    pcsv.write_csv(pa.table({"v": [value]}), sink, pcsv.WriteOptions(include_header=False))
    try:
        table = pcsv.read_csv(
            pa.BufferReader(sink.getvalue()), read_options=pcsv.ReadOptions(column_names=["v"]),
            parse_options=pcsv.ParseOptions(newlines_in_values=True),
            convert_options=pcsv.ConvertOptions(
                null_values=[], strings_can_be_null=False,
                column_types={"v": kind} if kind is not None else None))
    except pa.ArrowInvalid:
        return None
    return table.schema.field(0).type


def widen_csv_type(kind: Any, value: str) -> Any:
    """The first type after ``kind`` in Arrow's inference order that reads ``value``
    (``value`` did not convert to ``kind``); None when ``kind`` is text already."""
    import pyarrow as pa

    rank = _rank(kind)
    if rank >= _TEXT:
        return None
    own = _single_value_type(value)
    if own is not None and _rank(own) > rank:
        return own  # the value's own type comes first (and keeps a time zone)
    for candidate in _candidates():
        if _rank(candidate) > rank and _single_value_type(value, candidate) is not None:
            return candidate
    return pa.string()


def _text_types(columns: Sequence[Any]) -> list[Any]:
    """Arrow's CSV inference for text columns (nulls stay nulls): the columns are
    written back as CSV, quoted, and read by Arrow's table reader, which infers over
    all of its input."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    names = [f"c{i}" for i in range(len(columns))]
    sink = pa.BufferOutputStream()
    pcsv.write_csv(pa.table(list(columns), names=names), sink,
                   pcsv.WriteOptions(include_header=False))  # text quoted, nulls unquoted
    table = pcsv.read_csv(
        pa.BufferReader(sink.getvalue()), read_options=pcsv.ReadOptions(column_names=names),
        parse_options=pcsv.ParseOptions(newlines_in_values=True),
        convert_options=pcsv.ConvertOptions(null_values=[""], strings_can_be_null=True,
                                            quoted_strings_can_be_null=False))
    return list(table.schema.types)


def infer_csv_types(src: TabularSource, names: Sequence[str]) -> dict[str, Any]:
    """The type of every undeclared column of ``src`` over the whole file (declared
    columns, ``src.column_types``, are read with their types and not inferred)."""
    import pyarrow as pa

    declared = src.column_types or {}
    open_ = [i for i, name in enumerate(names) if name not in declared]
    kinds = {names[i]: pa.null() for i in open_}
    try:
        for batch in src._csv_reader({**{names[i]: pa.string() for i in open_}, **declared}):
            open_ = [i for i in open_ if _rank(kinds[names[i]]) < _TEXT]
            if not open_:
                break  # every column is text: nothing left to learn
            found = _text_types([batch.column(i) for i in open_])
            for i, kind in zip(open_, found, strict=True):
                kinds[names[i]] = merge_types(kinds[names[i]], kind)
    except pa.ArrowInvalid as exc:  # a problem past where the first read stopped
        raise src._csv_problem(str(exc)) from None
    except UnicodeDecodeError as exc:
        raise src._decode_problem(exc) from None
    return {name: pa.float64() if pa.types.is_null(kind) else kind
            for name, kind in kinds.items()}


# -- JSON Lines ----------------------------------------------------------------------

def _jsonl_chunks(src: TabularSource) -> Iterator[bytes]:
    """The (decompressed) file in pieces of about one block, each ending with a line."""
    import pyarrow as pa

    opened = src._open()
    with opened if hasattr(opened, "read") else pa.input_stream(opened) as raw:
        carry = b""
        while data := raw.read(src.block_size):
            data = carry + data
            cut = data.rfind(b"\n") + 1
            carry = data[cut:]
            if cut:
                yield data[:cut]
        if carry:
            yield carry


def infer_jsonl_types(src: TabularSource) -> dict[str, Any]:
    """The type of every top-level field of a JSON Lines file over the whole file.

    Each piece is read by Arrow's JSON reader (which infers over all of it); strings
    that spell a missing value count as missing; the pieces' schemas are unified
    with Arrow's permissive promotion (null to anything, int64 to double). A field
    that is a number in one place and text in another is a real mix of types and
    raises the same error as one inside a block.
    """
    import pyarrow as pa

    from reprise.data._formats import DataFormatError

    schema, spelled = pa.schema([]), set()
    for chunk in _jsonl_chunks(src):
        piece, only_spelled = _jsonl_piece_schema(src, chunk)
        spelled |= only_spelled
        try:
            schema = pa.unify_schemas(list(_strings_as_text(schema, piece)),
                                      promote_options="permissive")
        except (pa.ArrowTypeError, pa.ArrowInvalid) as exc:
            m = re.search(r"Field (\S+) has incompatible types: (\S+) vs (\S+)", str(exc))
            what = (f"field {m.group(1)!r} has mixed types: {m.group(2)} in one part of the "
                    f"file, {m.group(3)} in another" if m else f"fields have mixed types ({exc})")
            raise DataFormatError(f"{src.path}: {what}. Make the field's type consistent "
                                  "(write a missing value as null).") from None
    # a field of strings that all spell a missing value stays text, as when the first
    # block holds all of them; one with no value at all is float64
    return {f.name: (pa.string() if f.name in spelled else pa.float64())
            if pa.types.is_null(f.type) else f.type for f in schema}


def _strings_as_text(a: Any, b: Any) -> tuple[Any, Any]:
    """Schemas ``a`` and ``b`` with a field that is a timestamp (or date) in one and text in
    the other made text in both: JSON wrote both as strings, and Arrow reads a field of
    such strings as text when they are in one block."""
    import pyarrow as pa
    import pyarrow.types as pat

    def stringy(t: Any) -> bool:
        return bool(pat.is_string(t) or pat.is_large_string(t) or pat.is_timestamp(t)
                    or pat.is_date(t))

    mixed = {f.name for f in b if f.name in a.names and a.field(f.name).type != f.type
             and stringy(f.type) and stringy(a.field(f.name).type)}
    if not mixed:
        return a, b

    def text(schema: Any) -> Any:
        return pa.schema([f.with_type(pa.string()) if f.name in mixed else f for f in schema])

    return text(a), text(b)


def _jsonl_piece_schema(src: TabularSource, chunk: bytes) -> tuple[Any, set[str]]:
    """The schema of one piece, with fields holding only spelled missing values as
    ``null`` (they can join any type), and the names of those fields."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.json as pjson

    from reprise.data._nullspell import rewrite_lines

    options = pjson.ReadOptions(block_size=max(len(chunk) + 1, 1 << 20))
    try:
        table = pjson.read_json(pa.BufferReader(chunk), read_options=options)
    except pa.ArrowInvalid as exc:
        if not (src.null_spellings and re.search(r"changed from \w+ to \w+", str(exc))):
            raise src._jsonl_problem(str(exc)) from None
        try:  # a number field with spelled missing values ("NA"): read them as null
            table = pjson.read_json(pa.BufferReader(rewrite_lines(chunk, src.null_spellings)),
                                    read_options=options)
        except pa.ArrowInvalid as again:
            raise src._jsonl_problem(str(again)) from None
    spellings = pa.array(list(src.null_spellings), type=pa.string())
    fields, spelled = [], set()
    for name, column in zip(table.schema.names, table.columns, strict=True):
        kind = column.type
        if pa.types.is_string(kind) or pa.types.is_large_string(kind):
            present = pc.drop_null(column)
            if not pc.any(pc.invert(pc.is_in(present, value_set=spellings.cast(kind)))).as_py():
                kind = pa.null()  # only spelled missing values: no type of its own
                spelled.add(name)
        fields.append(pa.field(name, kind))
    return pa.schema(fields), spelled


# -- CSV delimiter -------------------------------------------------------------------

_DELIMITERS = (",", ";", "\t", "|")
SNIFF_BYTES = 1 << 16


def sniff_delimiter(sample: str) -> str | None:
    """The delimiter of a CSV sample: ``,`` unless it gives rows of unequal length or a
    single column while exactly one of ``;``, tab, ``|`` splits every row into the same
    number (two or more) of fields, or (rows uneven on every delimiter) a header with no
    comma holds exactly one of them; None when nothing fits.

    Written here rather than with ``csv.Sniffer``, which guesses from character
    frequencies and picks letters or spaces on ordinary files; this rule only moves
    away from the comma when the comma cannot be right.

    Example:
        >>> sniff_delimiter("a;b\\n1,5;2\\n")
        ';'
        >>> sniff_delimiter("a,b\\n1,2\\n")
        ','
    """
    lines = sample.splitlines(keepends=True)
    if len(lines) > 1 and not sample.endswith(("\n", "\r")):
        lines = lines[:-1]  # the sample may end inside a line
    text = "".join(lines)

    def widths(delimiter: str) -> set[int]:
        return {len(row) for row in csv.reader(io.StringIO(text), delimiter=delimiter) if row}

    comma = widths(",")
    if len(comma) == 1 and comma != {1}:
        return ","
    others = [d for d in _DELIMITERS[1:] if len(w := widths(d)) == 1 and w != {1}]
    if len(others) == 1:
        return others[0]
    header = text.partition("\n")[0]
    if "," not in header:  # the header names one column but splits on exactly one other
        splits = [d for d in _DELIMITERS[1:] if d in header]
        if len(splits) == 1:
            return splits[0]  # its ragged rows are then reported with the right delimiter
    return "," if len(comma) == 1 else None


def type_from_name(name: str) -> Any:
    """The Arrow type a version's schema names (``int64``, ``timestamp[s, tz=UTC]``...),
    or None for a name this cannot read back."""
    import pyarrow as pa

    m = re.fullmatch(r"timestamp\[(s|ms|us|ns)(?:, tz=(.+))?\]", name)
    if m:
        return pa.timestamp(m.group(1), tz=m.group(2))
    try:
        return pa.type_for_alias(name)
    except (ValueError, KeyError):
        return None
