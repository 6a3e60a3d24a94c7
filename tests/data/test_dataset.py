"""Dataset versions through the Python API: versions, formats, validation, quarantine, and
every bad input the data issue lists (each must leave the workspace unchanged)."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import reprise
from reprise.core.errors import UserError
from reprise.data import DataFormatError, Dataset, ValidationError, add_dataset, get_dataset

CSV = "id,age,plan,email\n1,34,basic,a@x.io\n2,51,pro,b@x.io\n3,29,basic,c@x.io\n4,42,pro,d@x.io\n"

SCHEMA = '''
import pandera.pandas as pa

schema = pa.DataFrameSchema({
    "id": pa.Column(int, unique=True),
    "age": pa.Column(int, pa.Check.in_range(0, 120)),
    "plan": pa.Column(str, pa.Check.isin(["basic", "pro"])),
    "email": pa.Column(str, pa.Check.str_matches(r"^[^@]+@[^@]+$")),
})

custom = pa.DataFrameSchema({
    "age": pa.Column(int, pa.Check(lambda s: s % 2 == 0, name="even_age")),
})
'''


@pytest.fixture
def ws(tmp_path: Path) -> Any:
    (tmp_path / "schemas.py").write_text(textwrap.dedent(SCHEMA))
    return reprise.init(tmp_path)


def write(ws: Any, name: str, text: str | bytes) -> Path:
    path = Path(ws.root) / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


def versions(ws: Any) -> list[str]:
    return [r.ref for r in ws.metadata.list_dataset_versions()]


def test_csv_versions_are_immutable_and_content_addressed(ws: Any) -> None:
    res = add_dataset("users", write(ws, "u.csv", CSV), workspace=ws)
    assert res.created and res.record.ref == "users@1" and res.record.rows == 4
    assert res.record.schema == {"id": "int64", "age": "int64", "plan": "string",
                                 "email": "string"}
    assert res.record.profile["columns"]["age"]["max"] == 51
    again = add_dataset("users", write(ws, "copy.csv", CSV), workspace=ws)
    assert not again.created and again.record.ref == "users@1"
    res2 = add_dataset("users", write(ws, "u.csv", CSV + "5,60,pro,e@x.io\n"), workspace=ws)
    assert res2.record.ref == "users@2" and res2.record.rows == 5
    assert versions(ws) == ["users@1", "users@2"]
    assert len(Dataset("users@1", workspace=ws).to_pandas()) == 4
    assert len(Dataset("users@latest", workspace=ws).to_pandas()) == 5
    assert get_dataset("users", workspace=ws).version == 2


def test_dataframe_arrow_jsonl_parquet_and_folders(ws: Any) -> None:
    df = pd.DataFrame({"x": [1.0, 2.0, 3.0], "k": ["a", "b", "a"]})
    a = add_dataset("frame", df, workspace=ws)
    b = add_dataset("frame", pa.Table.from_pandas(df, preserve_index=False), workspace=ws)
    assert a.record.format == "parquet" and not b.created  # same table, same bytes
    pd.testing.assert_frame_equal(Dataset("frame", workspace=ws).to_pandas(), df)
    j = add_dataset("events", write(ws, "e.jsonl", '{"a": 1, "b": "x"}\n{"a": 2, "b": "y"}\n'),
                    workspace=ws)
    assert j.record.format == "jsonl" and j.record.rows == 2
    pq.write_table(pa.table({"v": list(range(10))}), Path(ws.root) / "v.parquet")
    p = add_dataset("values", Path(ws.root) / "v.parquet", workspace=ws)
    assert p.record.rows == 10 and p.record.profile["columns"]["v"]["mean"] == 4.5
    assert Dataset("values", workspace=ws).parquet_path() is not None
    images = Path(ws.root) / "images"
    (images / "cats").mkdir(parents=True)
    (images / "cats" / "1.png").write_bytes(b"\x89PNG" + b"0" * 100)
    (images / "2.jpg").write_bytes(b"jpeg" * 10)
    d = add_dataset("pics", images, workspace=ws)
    assert d.record.format == "files"
    folder = Dataset("pics", workspace=ws).path()
    assert (folder / "cats" / "1.png").read_bytes().startswith(b"\x89PNG")


def test_schema_violation_reports_rows_and_registers_nothing(ws: Any) -> None:
    bad = CSV + "5,230,gold,not-an-email\n6,40,pro,f@x.io\n2,33,pro,g@x.io\n"
    with pytest.raises(ValidationError) as info:
        add_dataset("users", write(ws, "u.csv", bad), workspace=ws, schema="schemas.py:schema")
    report = info.value.report
    rules = {(f.column, f.rule.split("(")[0]): f for f in report.failures}
    assert rules[("age", "in_range")].examples[0]["row"] == 5
    assert rules[("age", "in_range")].examples[0]["record"]["plan"] == "gold"
    assert rules[("plan", "isin")].count == 1
    assert rules[("email", "str_matches")].count == 1
    assert rules[("id", "unique")].examples[0]["row"] == 7
    assert report.failing_rows == 2 and report.rows == 7
    message = str(info.value)
    assert "column 'age'" in message and "row 5" in message and "--quarantine" in message
    assert versions(ws) == []
    assert ws.metadata.get_dataset_schema("users") is None  # a failed add attaches nothing


def test_uniqueness_is_checked_across_batches(ws: Any) -> None:
    rows = "".join(f"{i},30,pro,u{i}@x.io\n" for i in range(1, 50)) + "3,30,pro,dup@x.io\n"
    with pytest.raises(ValidationError) as info:
        add_dataset("users", write(ws, "u.csv", "id,age,plan,email\n" + rows), workspace=ws,
                    schema="schemas.py:schema", batch_rows=8)
    (failure,) = info.value.report.failures
    assert failure.rule == "unique" and failure.examples[0]["row"] == 50
    assert "first seen at row 3" in failure.examples[0]["note"]


def test_quarantine_registers_clean_rows_and_keeps_the_failing_ones(ws: Any) -> None:
    bad = CSV + "5,230,basic,e@x.io\n6,40,gold,f@x.io\n"
    res = add_dataset("users", write(ws, "u.csv", bad), workspace=ws,
                      schema="schemas.py:schema", quarantine=True)
    assert res.record.rows == 4 and res.record.format == "parquet"
    assert res.quarantine is not None and res.quarantine["rows"] == 2
    held = pq.read_table(ws.artifacts.local_path(res.quarantine["hash"])).to_pydict()
    assert held["id"] == [5, 6]
    assert res.record.meta["quarantine"]["rows"] == 2 and "source_hash" in res.record.meta
    assert sorted(Dataset("users", workspace=ws).to_pandas()["id"]) == [1, 2, 3, 4]


def test_attached_schema_applies_to_later_adds_and_custom_checks_load_from_source(
        ws: Any) -> None:
    add_dataset("users", write(ws, "u.csv", CSV), workspace=ws, schema="schemas.py:schema")
    assert ws.metadata.get_dataset_schema("users")[0] is not None  # pandera JSON stored
    with pytest.raises(ValidationError):
        add_dataset("users", write(ws, "u.csv", CSV + "5,30,gold,e@x.io\n"), workspace=ws)
    reprise.data.attach_schema("ages", "schemas.py:custom", workspace=ws)
    spec, source = ws.metadata.get_dataset_schema("ages")
    assert spec is None and source == "schemas.py:custom"
    with pytest.raises(ValidationError, match="even_age"):
        add_dataset("ages", write(ws, "a.csv", "age\n2\n3\n"), workspace=ws)
    assert add_dataset("ages", write(ws, "a.csv", "age\n2\n4\n"), workspace=ws).created


def test_column_type_change_from_previous_version_is_refused(ws: Any) -> None:
    add_dataset("m", write(ws, "m.csv", "a,b\n1,2\n3,4\n"), workspace=ws)
    with pytest.raises(DataFormatError, match=r"'b' int64 -> double"):
        add_dataset("m", write(ws, "m.csv", "a,b\n1,2.5\n3,4\n"), workspace=ws)
    assert versions(ws) == ["m@1"]
    res = add_dataset("m", write(ws, "m.csv", "a,b\n1,2.5\n3,4\n"), workspace=ws,
                      allow_type_change=True)
    assert res.record.ref == "m@2"


@pytest.mark.parametrize("name,content,needle", [
    ("empty.csv", b"", "is empty"),
    ("header.csv", b"a,b\n", "no data rows"),
    ("ragged.csv", b"a,b\n1,2\n3,4\n5,6,7\n", "line 4 has 3 fields where the header has 2"),
    ("latin.csv", "a,b\n1,ok\n2,caf\xe9\n".encode("latin-1"), "not valid utf-8 (first at line 3"),
    ("mixed.csv", b"age\n" + b"".join(b"%d\n" % i for i in range(20)) + b"unknown\n",
     "column 'age' has mixed types"),
    ("mixed.jsonl", b'{"a": 1}\n{"a": "x"}\n', "field 'a' has mixed types"),
    ("trunc.parquet", None, "not a readable Parquet file"),
])
def test_bad_files_get_a_clear_error_and_change_nothing(ws: Any, name: str, content: bytes | None,
                                                        needle: str) -> None:
    if content is None:
        pq.write_table(pa.table({"v": list(range(1000))}), Path(ws.root) / name)
        data = (Path(ws.root) / name).read_bytes()
        content = data[: len(data) // 2]
    path = write(ws, name, content)
    blobs_before = set(ws.artifacts.iter_hashes())
    with pytest.raises(UserError) as info:
        add_dataset("d", path, workspace=ws)
    assert needle in str(info.value).replace("UTF-8", "utf-8")
    assert versions(ws) == [] and set(ws.artifacts.iter_hashes()) == blobs_before


def test_latin1_file_reads_with_its_encoding(ws: Any) -> None:
    path = write(ws, "latin.csv", "a,b\n1,ok\n2,caf\xe9\n".encode("latin-1"))
    res = add_dataset("d", path, workspace=ws, encoding="latin-1")
    assert Dataset("d", workspace=ws).to_pandas()["b"].tolist() == ["ok", "café"]
    assert res.record.rows == 2


def test_other_bad_inputs(ws: Any) -> None:
    with pytest.raises(UserError, match="does not exist"):
        add_dataset("d", Path(ws.root) / "missing.csv", workspace=ws)
    for bad in ("a/b", "../x", "x@1", "", "a\\b"):
        with pytest.raises(UserError, match="is not allowed"):
            add_dataset(bad, write(ws, "u.csv", CSV), workspace=ws)
    add_dataset("users", write(ws, "u.csv", CSV), workspace=ws)
    with pytest.raises(UserError, match=r"has no version 9 \(newest: users@1\)"):
        get_dataset("users@9", workspace=ws)
    with pytest.raises(UserError, match="no dataset named 'nope'"):
        Dataset("nope", workspace=ws).to_arrow()
    with pytest.raises(UserError, match="positive number or 'latest'"):
        Dataset("users@x")
    mixed = pd.DataFrame({"a": [1, "two", 3.0]})
    with pytest.raises(DataFormatError, match="mixed types"):
        add_dataset("frame", mixed, workspace=ws)
    assert versions(ws) == ["users@1"]


def test_compressed_csv_and_tsv_read_back_from_the_store(ws: Any) -> None:
    import gzip

    gz = Path(ws.root) / "u.csv.gz"
    gz.write_bytes(gzip.compress(CSV.encode()))
    add_dataset("gz", gz, workspace=ws)
    assert Dataset("gz", workspace=ws).to_pandas()["age"].tolist() == [34, 51, 29, 42]
    add_dataset("tsv", write(ws, "u.tsv", CSV.replace(",", "\t")), workspace=ws)
    assert Dataset("tsv", workspace=ws).to_pandas()["plan"].tolist()[:2] == ["basic", "pro"]


def test_link_mode_shares_the_inode_read_only_and_falls_back_to_copy(
        ws: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import os
    import stat

    src = write(ws, "big.bin", os.urandom(4096))
    res = add_dataset("raw", src, workspace=ws, link=True)
    blob = ws.artifacts.local_path(res.record.artifact_hash)
    assert os.stat(blob).st_ino == os.stat(src).st_ino
    assert not os.stat(src).st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)
    assert ws.artifacts.verify(res.record.artifact_hash)

    def no_links(*_: Any) -> None:
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", no_links)
    other = write(ws, "other.bin", os.urandom(4096))
    res2 = add_dataset("raw", other, workspace=ws, link=True)
    blob2 = ws.artifacts.local_path(res2.record.artifact_hash)
    assert os.stat(blob2).st_ino != os.stat(other).st_ino and res2.record.version == 2
