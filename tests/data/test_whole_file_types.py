"""Column types come from a file's whole content, not from where its first block ends
(issue 22.3), and the smaller reading defects of issue 22.4: all-null columns and
other delimiters."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.csv as pcsv
import pytest

import reprise
from reprise.core.errors import UserError
from reprise.data import Dataset, _formats, _infer, add_dataset, list_datasets
from reprise.data._formats import TabularSource, read_whole

BLOCK = 1 << 12  # 4 KiB blocks: a few hundred rows make a file of many blocks


@pytest.fixture
def ws(tmp_path: Path) -> Any:
    return reprise.init(tmp_path)


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_formats, "BLOCK_SIZE", BLOCK)


def _csv(path: Path, header: str, rows: list[str]) -> Path:
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


def _whole_file_types(path: Path) -> dict[str, str]:
    """What Arrow infers reading the file as one block (null read as double, as pandas)."""
    table = pcsv.read_csv(path, read_options=pcsv.ReadOptions(block_size=1 << 26))
    return {f.name: "double" if pa.types.is_null(f.type) else str(f.type) for f in table.schema}


def _read_all(src: TabularSource) -> pa.Table:
    return read_whole(src, lambda s: pa.Table.from_batches(list(s.batches())))


@pytest.mark.parametrize("where", ["last", "middle"])
def test_an_integer_column_with_a_float_past_the_first_block_is_double(
        ws: Any, small_blocks: None, where: str) -> None:
    rows = [f"{i},{i % 50}" for i in range(2000)]
    rows.insert(len(rows) if where == "last" else 1000, "2000,2.5")
    path = _csv(Path(ws.root) / "late.csv", "id,x", rows)
    assert path.stat().st_size > 3 * BLOCK
    res = add_dataset("d", path, workspace=ws)
    assert res.record.schema == {"id": "int64", "x": "double"}
    assert pd.read_csv(path)["x"].dtype == "float64"  # as pandas reads it
    x = res.record.profile["columns"]["x"]
    assert x["count"] == 2001 and x["max"] == 49 and x["min"] == 0
    back = Dataset("d", workspace=ws).to_arrow()  # read back with the same types
    assert back.schema.field("x").type == pa.float64() and 2.5 in back.column("x").to_pylist()
    assert back.num_rows == 2001


@pytest.mark.parametrize(("late", "kind"), [
    ("7", "int64"), ("1.5", "double"), ("word", "string"), ("2021-03-04", "date32[day]"),
    ("2021-03-04T05:06:07Z", "timestamp[s, tz=UTC]"), ("true", "bool"),
])
def test_a_column_empty_until_past_the_first_block_takes_the_later_type(
        ws: Any, small_blocks: None, late: str, kind: str) -> None:
    path = _csv(Path(ws.root) / "fill.csv", "id,y", [f"{i}," for i in range(2000)] + [f"2000,{late}"])
    res = add_dataset("d", path, workspace=ws)
    assert res.record.schema == {"id": "int64", "y": kind} == _whole_file_types(path)
    back = Dataset("d", workspace=ws).to_arrow()
    assert str(back.schema.field("y").type) == kind and back.column("y").null_count == 2000


@pytest.mark.parametrize("blocks", [
    [["1", "0"] * 400, ["true"]],  # 1/0 then true: bool over the whole file
    [["1", "0"] * 400, ["true"], ["5"]],  # and a 5: no type but text holds all three
    [["2020-01-01"] * 800, ["2020-01-01T10:00:00"]],  # dates, then a time: timestamp
    [["2020-01-01T00:00:00"] * 800, ["2020-01-01T00:00:00Z"]],  # naive, then zoned: text
    [["3"] * 800, ["NA"], ["-"]],  # "-" is not a missing value: text, as pandas reads it
    [["12:30:00"] * 800, ["1.5"]],
])
def test_types_are_arrows_inference_over_the_whole_file(tmp_path: Path, small_blocks: None,
                                                       blocks: list[list[str]]) -> None:
    values = [v for block in blocks for v in block]
    path = _csv(tmp_path / "t.csv", "id,v", [f"{i},{v}" for i, v in enumerate(values)])
    table = _read_all(TabularSource(path, "csv"))
    assert {f.name: str(f.type) for f in table.schema} == _whole_file_types(path)
    assert table.num_rows == len(values)
    # whatever the order of the rows
    backwards = _csv(tmp_path / "b.csv", "id,v", [f"{i},{v}" for i, v in enumerate(values[::-1])])
    assert _read_all(TabularSource(backwards, "csv")).schema == table.schema


def test_a_consistent_file_is_read_once(tmp_path: Path, small_blocks: None,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(_infer, "infer_csv_types",
                        lambda *a: calls.append("infer") or {})  # type: ignore[func-returns-value]
    path = _csv(tmp_path / "ok.csv", "id,x", [f"{i},{i / 3}" for i in range(2000)])
    assert _read_all(TabularSource(path, "csv")).num_rows == 2000 and calls == []


def test_a_value_a_declared_text_column_cannot_hold_is_still_an_error(
        tmp_path: Path, small_blocks: None) -> None:
    path = _csv(tmp_path / "d.csv", "id,x", [f"{i},{i}" for i in range(2000)] + ["2000,2.5"])
    src = TabularSource(path, "csv", column_types={"id": pa.int32(), "x": pa.int64()})
    with pytest.raises(_formats.DataFormatError, match=r"'x' has mixed types.*line 2002 holds '2.5'"):
        _read_all(src)


def test_a_late_float_past_a_real_8_mib_block(ws: Any) -> None:
    path = Path(ws.root) / "big.csv"
    with open(path, "w") as f:
        f.write("id,x\n")
        f.writelines(f"{i},{i % 1000}\n" for i in range(820_000))
        f.write("820000,0.5\n")
    assert path.stat().st_size > _formats.BLOCK_SIZE + (256 << 10)
    res = add_dataset("big", path, workspace=ws)
    assert res.record.schema == {"id": "int64", "x": "double"} and res.record.rows == 820_001
    assert res.record.profile["columns"]["x"]["min"] == 0


def test_jsonl_fields_widen_past_the_first_block(ws: Any, small_blocks: None) -> None:
    lines = [json.dumps({"id": i, "x": i % 50, "y": None, "s": "NA" if i % 7 else "a",
                         "na": "NA"}) for i in range(2000)]
    lines += [json.dumps({"id": 2000, "x": 2.5, "y": "late", "s": "b", "na": "NA"})]
    path = Path(ws.root) / "late.jsonl"
    path.write_text("\n".join(lines) + "\n")
    res = add_dataset("j", path, workspace=ws)
    assert res.record.schema == {"id": "int64", "x": "double", "y": "string", "s": "string",
                                 "na": "string"}  # only "NA" strings: text, as without widening
    back = Dataset("j", workspace=ws).to_arrow()
    assert back.column("x").to_pylist()[-1] == 2.5 and back.column("y").null_count == 2000
    assert back.column("s").null_count == sum(1 for i in range(2000) if i % 7)
    mixed = Path(ws.root) / "mixed.jsonl"
    mixed.write_text("\n".join(lines[:1500] + [json.dumps({"id": 1, "x": "text"})]) + "\n")
    with pytest.raises(_formats.DataFormatError, match="field 'x' has mixed types"):
        add_dataset("m", mixed, workspace=ws)


@pytest.mark.parametrize("late", [
    {"v": 2.5}, {"v": "2020-01-01T00:00:00.5"}, {"v": "soon"}, {"w": 3}, {"w": [1, 2]},
])
def test_jsonl_types_are_arrows_over_the_whole_file(tmp_path: Path, small_blocks: None,
                                                    late: dict[str, Any]) -> None:
    import pyarrow.json as pjson

    first = {"v": 1, "w": None} if "v" not in late or isinstance(late["v"], float) \
        else {"v": "2020-01-01T00:00:00", "w": None}
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"id": i, **first}) + "\n" for i in range(1500))
                    + json.dumps({"id": 1500, **first, **late}) + "\n")
    got = _read_all(TabularSource(path, "jsonl"))
    whole = pjson.read_json(path, read_options=pjson.ReadOptions(block_size=1 << 26)).schema
    assert got.schema == pa.schema([f.with_type(pa.float64()) if pa.types.is_null(f.type) else f
                                    for f in whole])
    assert got.num_rows == 1501


# -- 22.4: all-null columns and delimiters ---------------------------------

def test_an_all_null_column_is_double_and_may_fill_later(ws: Any) -> None:
    path = _csv(Path(ws.root) / "n.csv", "id,empty", ["1,", "2,NA", "3,"])
    res = add_dataset("n", path, workspace=ws)
    assert res.record.schema == {"id": "int64", "empty": "double"}
    assert pd.read_csv(path)["empty"].dtype == "float64"
    assert res.record.profile["columns"]["empty"]["nulls"] == 3
    assert Dataset("n", workspace=ws).to_arrow().schema.field("empty").type == pa.float64()
    # a column without values has no type of its own: filling it is no type change
    filled = add_dataset("n", _csv(Path(ws.root) / "n.csv", "id,empty", ["1,4", "2,5"]),
                         workspace=ws)
    assert filled.record.schema["empty"] == "int64" and filled.record.version == 2
    emptied = add_dataset("n", path.write_text("id,empty\n1,\n") and path, workspace=ws)
    assert emptied.record.version == 3
    pq_null = add_dataset("pn", pa.table({"a": [1, 2], "b": pa.nulls(2)}), workspace=ws)
    assert pq_null.record.schema["b"] == "null"  # Parquet keeps the type it declares


@pytest.mark.parametrize(("text", "sep"), [
    ("a;b;c\n1,5;2;x\n3;4,25;y\n", ";"),  # decimal commas: the comma gives ragged rows
    ("a;b\n1;2\n3;4\n", ";"),  # the comma gives one column
    ("a|b\n1|2\n", "|"),
    ("a\tb\n1\t2\n", "\t"),
    ("a,b\n1;2,3\n", ","),
    ("name\nx;y\n", ","),  # one column whose values hold a ';'
])
def test_the_delimiter_is_sniffed_when_only_one_fits(tmp_path: Path, text: str, sep: str) -> None:
    path = tmp_path / "d.csv"
    path.write_text(text)
    assert TabularSource(path, "csv").csv_delimiter == sep


def test_a_semicolon_file_registers_with_its_delimiter_recorded(ws: Any) -> None:
    path = _csv(Path(ws.root) / "s.csv", "id;city;score", ["1;Paris;3", "2;Lyon;4"])
    res = add_dataset("s", path, workspace=ws)
    assert res.record.meta["delimiter"] == ";"
    assert res.record.schema == {"id": "int64", "city": "string", "score": "int64"}
    assert Dataset("s", workspace=ws).to_pandas()["city"].tolist() == ["Paris", "Lyon"]
    given = add_dataset("g", path, workspace=ws, delimiter=",")  # a one-column file, as asked
    assert list(given.record.schema) == ["id;city;score"]
    with pytest.raises(UserError, match="delimiter cannot change"):
        add_dataset("g", path, workspace=ws, delimiter=";")
    with pytest.raises(UserError, match="--delimiter must be one character"):
        add_dataset("x", path, workspace=ws, delimiter=";;")
    with pytest.raises(UserError, match="--delimiter applies to CSV files"):
        add_dataset("x", pa.table({"a": [1]}), workspace=ws, delimiter=";")


def test_a_ragged_file_that_looks_otherwise_delimited_says_so(ws: Any) -> None:
    path = _csv(Path(ws.root) / "r.csv", "a;b;c", ["1,5;2;3", "4;5;6,5"])
    with pytest.raises(_formats.DataFormatError,
                       match=r"looks ';'-delimited; pass --delimiter ';'"):
        add_dataset("r", path, workspace=ws, delimiter=",")
    assert list_datasets(workspace=ws) == []
