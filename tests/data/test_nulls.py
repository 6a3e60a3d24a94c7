"""Missing values spelled as text (``NA``, ``null``, an empty field) are nulls in every
column of every text format, as pandas reads them, and every consumer (profile,
validation, diff, split, reading back) sees the same nulls."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest

import reprise
from reprise.core._nulls import NA_VALUES, parse_na_values, resolve_na_values
from reprise.core.errors import UserError
from reprise.data import (
    Dataset,
    TabularSource,
    ValidationError,
    add_dataset,
    assign_splits,
)
from reprise.data._dataset import diff_datasets

# city: NAPLES is a value, NA / empty / "NA" quoted / null are missing (4 nulls);
# score: a number column with NA, empty and null (3 nulls); note: NAPLES again, 2 nulls
ROWS = [("1", "NAPLES", "1.5", "ok"), ("2", "NA", "NA", ""), ("3", "", "2.5", "null"),
        ("4", '"NA"', "", "NAPLES"), ("5", "Rome", "null", "x"), ("6", "null", "3.0", "y")]
NULLS = {"id": 0, "city": 4, "score": 3, "note": 2}


def csv_text(sep: str = ",") -> str:
    return "\n".join([sep.join(["id", "city", "score", "note"])]
                     + [sep.join(r) for r in ROWS]) + "\n"


def jsonl_text() -> str:
    def value(v: str, number: bool) -> Any:
        v = v.strip('"')
        return None if v == "null" else (float(v) if number and v not in NA_VALUES else v)

    return "".join(json.dumps({"id": int(r[0]), "city": value(r[1], False),
                               "score": value(r[2], True), "note": value(r[3], False)}) + "\n"
                   for r in ROWS)


def write(root: Path, kind: str) -> Path:
    if kind == "csv":
        path = root / "m.csv"
        path.write_text(csv_text())
    elif kind == "tsv":
        path = root / "m.tsv"
        path.write_text(csv_text("\t"))
    elif kind == "csv.gz":
        path = root / "m.csv.gz"
        path.write_bytes(gzip.compress(csv_text().encode()))
    else:
        path = root / "m.jsonl"
        path.write_text(jsonl_text())
    return path


@pytest.fixture
def ws(tmp_path: Path) -> Any:
    return reprise.init(tmp_path)


def test_defaults_are_pandas_spellings() -> None:
    from pandas._libs.parsers import STR_NA_VALUES

    assert set(NA_VALUES) == set(STR_NA_VALUES)


@pytest.mark.parametrize("kind", ["csv", "tsv", "csv.gz", "jsonl"])
def test_every_reader_makes_the_same_nulls_in_every_column(ws: Any, kind: str) -> None:
    path = write(Path(ws.root), kind)
    rec = add_dataset("m", path, workspace=ws).record
    columns = rec.profile["columns"]
    assert {c: columns[c]["nulls"] for c in NULLS} == NULLS
    assert rec.schema["score"] == "double"
    assert rec.meta["na_values"] == sorted(NA_VALUES)
    frame = Dataset("m@1", workspace=ws).to_pandas()
    assert frame.isna().sum().to_dict() == NULLS
    assert frame["city"].dropna().tolist() == ["NAPLES", "Rome"]
    if kind != "jsonl":  # the reference: pandas on the same file
        expected = pd.read_csv(path, sep="\t" if kind == "tsv" else ",")
        assert expected.isna().sum().to_dict() == NULLS


def test_na_values_replace_the_spellings_and_are_recorded(ws: Any) -> None:
    path = Path(ws.root) / "dash.csv"
    path.write_text("id,city,score\n1,NA,-\n2,,2.0\n3,-,\n")
    rec = add_dataset("dash", path, workspace=ws, na_values=["-", ""]).record
    assert rec.meta["na_values"] == ["", "-"]
    frame = Dataset("dash", workspace=ws).to_pandas()
    assert frame["city"].isna().tolist() == [False, True, True]
    assert frame["city"][0] == "NA"  # a value here
    assert frame["score"].isna().tolist() == [True, False, True]
    assert rec.profile["columns"]["city"]["nulls"] == 2


def test_the_same_bytes_with_other_spellings_are_refused(ws: Any) -> None:
    path = write(Path(ws.root), "csv")
    add_dataset("m", path, workspace=ws)
    with pytest.raises(UserError, match="spellings cannot change"):
        add_dataset("m", path, workspace=ws, na_values=["NA", "", "null"])
    assert not add_dataset("m", path, workspace=ws).created  # same spellings: unchanged


def test_validation_sees_the_nulls(ws: Any) -> None:
    import pandera.pandas as pa_

    schema = pa_.DataFrameSchema({"city": pa_.Column(str, nullable=False)})
    with pytest.raises(ValidationError) as err:
        add_dataset("m", write(Path(ws.root), "csv"), workspace=ws, schema=schema)
    assert err.value.report.failing_rows == 4
    assert "city" in str(err.value)


def test_diff_and_split_see_the_nulls(ws: Any) -> None:
    add_dataset("m", write(Path(ws.root), "csv"), workspace=ws)
    path = Path(ws.root) / "m2.csv"
    path.write_text(csv_text().replace("Rome", "NA"))
    add_dataset("m", path, workspace=ws)
    diff = diff_datasets("m@1", "m@2", workspace=ws)
    assert diff["columns"]["city"]["nulls_fraction"] == {"old": 4 / 6, "new": 5 / 6}
    with pytest.raises(UserError, match="'city' has 5 null"):
        assign_splits(Dataset("m@2", workspace=ws), by="city")


def test_jsonl_number_field_with_spelled_nulls_across_blocks(tmp_path: Path) -> None:
    """Arrow's JSON reader cannot read "NA" in a number field; the reader falls back to a
    copy with those written as null, without losing or repeating rows."""
    rows = [{"x": i, "s": "a"} for i in range(300)] + [{"x": "NA", "s": "NA"}]
    rows += [{"x": i, "s": "b"} for i in range(300)]
    path = tmp_path / "late.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    table = pa.Table.from_batches(list(TabularSource(path, "jsonl", block_size=4096).batches()))
    assert table.num_rows == 601 and pa.types.is_integer(table["x"].type)
    assert table["x"].null_count == 1 and table["s"].null_count == 1
    assert table["x"].to_pylist()[299:302] == [299, None, 0]
    path.write_text('{"x": 1}\n{"x": "oops"}\n')
    with pytest.raises(UserError, match="mixed types"):
        list(TabularSource(path, "jsonl").batches())


def test_parse_na_values() -> None:
    assert parse_na_values(None) is None
    assert parse_na_values("") == ("",)
    assert parse_na_values("none") == ()
    assert parse_na_values("NA,,-") == ("", "-", "NA")
    assert set(parse_na_values("default,?") or ()) == {*NA_VALUES, "?"}
    with pytest.raises(UserError, match="list of strings"):
        resolve_na_values("NA")
