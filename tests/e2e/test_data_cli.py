"""``reprise data ...`` and Dataset inputs in pipelines, run as a user runs them."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.pipeline.test_pipelines import cli  # the CLI as a user runs it, in a subprocess

FLOW = '''
import reprise
from reprise import Dataset, step


@step
def count(ds: Dataset) -> int:
    return len(ds.to_pandas())


@step
def double(n: int) -> int:
    return 2 * n


@reprise.pipeline
def flow(data: Dataset = Dataset("users@latest")):
    return double(count(data))
'''

SCHEMA = '''
import pandera.pandas as pa

schema = pa.DataFrameSchema({
    "id": pa.Column(int, unique=True),
    "age": pa.Column(int, pa.Check.in_range(0, 120)),
})
'''


def js(root: Path, *args: str) -> Any:
    return json.loads(cli(root, *args, "--json").stdout)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    root.mkdir()
    (root / "flow.py").write_text(textwrap.dedent(FLOW))
    (root / "schemas.py").write_text(textwrap.dedent(SCHEMA))
    (root / "users.csv").write_text("id,age\n1,30\n2,40\n3,50\n")
    cli(root, "init", ".")
    return root


def test_add_list_show_diff_schema(project: Path) -> None:
    first = js(project, "data", "add", "users", "users.csv", "--schema", "schemas.py:schema")
    assert first["dataset"] == "users@1" and first["created"] and first["rows"] == 3
    assert first["validation"]["ok"]
    assert not js(project, "data", "add", "users", "users.csv")["created"]
    (project / "users.csv").write_text("id,age,plan\n1,30,a\n2,40,b\n3,50,a\n4,90,b\n")
    assert js(project, "data", "add", "users", "users.csv")["dataset"] == "users@2"
    listed = js(project, "data", "list")
    assert listed[0]["name"] == "users" and listed[0]["latest"] == 2
    shown = js(project, "data", "show", "users@1")
    assert shown["profile"]["columns"]["age"]["mean"] == 40 and shown["versions"] == [1, 2]
    diff = js(project, "data", "diff", "users@1", "users@2")
    assert diff["rows"]["old"] == 3 and diff["rows"]["new"] == 4
    assert "plan" in diff["columns_added"]
    text = cli(project, "data", "show", "users").stdout
    assert "users@2" in text and "age" in text
    assert "users@1 -> users@2" in cli(project, "data", "diff", "users@1", "users@2").stdout
    assert "users" in cli(project, "data", "list").stdout
    assert json.loads(cli(project, "data", "schema", "users", "--json").stdout)["spec"]


def test_validation_failure_prints_report_exits_2_and_registers_nothing(project: Path) -> None:
    cli(project, "data", "schema", "users", "schemas.py:schema")
    (project / "bad.csv").write_text("id,age\n1,30\n2,400\n2,50\n")
    res = cli(project, "data", "add", "users", "bad.csv", check=False)
    assert res.returncode == 2, res.stderr
    assert "column 'age'" in res.stderr and "row 2" in res.stderr and "unique" in res.stderr
    assert "Traceback" not in res.stderr
    assert js(project, "data", "list") == []
    ok = js(project, "data", "add", "users", "bad.csv", "--quarantine")
    assert ok["rows"] == 1 and ok["quarantine"]["rows"] == 2


@pytest.mark.parametrize("args,needle", [
    (["data", "add", "users", "missing.csv"], "does not exist"),
    (["data", "add", "a/b", "users.csv"], "is not allowed"),
    (["data", "show", "users@4"], "no dataset named 'users'"),
    (["data", "show", "users@x"], "positive number or 'latest'"),
    (["data", "add", "users", "users.csv", "--format", "xls"], "--format must be one of"),
    (["data", "add", "users", "users.csv", "--schema", "nope.py:schema"], "does not exist"),
    (["data", "schema", "users"], "no schema is attached"),
    (["data", "add", "users", "users.csv", "--delimiter", ";;"], "must be one character"),
])
def test_user_errors_exit_2(project: Path, args: list[str], needle: str) -> None:
    res = cli(project, *args, check=False)
    assert res.returncode == 2, res.stderr
    assert needle in res.stderr and "Traceback" not in res.stderr


def test_pipeline_dataset_input_follows_latest_and_records_lineage(project: Path) -> None:
    cli(project, "data", "add", "users", "users.csv")
    first = js(project, "run", "flow.py:flow")
    assert sorted(first["executed"]) == ["count", "double"]
    assert js(project, "run", "flow.py:flow")["executed"] == []
    (project / "users.csv").write_text("id,age\n1,30\n2,40\n3,50\n4,60\n")
    cli(project, "data", "add", "users", "users.csv")
    second = js(project, "run", "flow.py:flow")
    assert sorted(second["executed"]) == ["count", "double"]  # latest moved: re-run
    pinned = js(project, "run", "flow.py:flow", "-p", "data=users@1")
    assert pinned["executed"] == [] and pinned["outputs"] == first["outputs"]
    shown = js(project, "runs", "show", second["run_id"])
    assert shown["params"]["data"]["resolved"] == "users@2"
    lineage = cli(project, "lineage", second["run_id"]).stdout
    assert "users@2" in lineage
    report = js(project, "verify", second["run_id"])
    assert report["ok"]


def test_na_values_on_the_fast_path_and_through_typer(project: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    (project / "m.csv").write_text("id,city,score\n1,NAPLES,1.5\n2,NA,-\n3,,2.5\n4,null,\n")
    res = cli(project, "data", "add", "m", "m.csv", check=False)  # "-" is not a default
    assert res.returncode == 2 and "--na-values 'default,-'" in res.stderr, res.stderr
    dash = js(project, "data", "add", "m", "m.csv", "--na-values", "default,-")
    shown = js(project, "data", "show", dash["dataset"])
    assert shown["schema"]["score"] == "double" and "-" in shown["meta"]["na_values"]
    assert "NA" in shown["meta"]["na_values"]
    assert shown["profile"]["columns"]["score"]["nulls"] == 2
    assert shown["profile"]["columns"]["city"]["nulls"] == 3
    res = cli(project, "data", "add", "m", "m.csv", "--na-values", "-,", check=False)
    assert res.returncode == 2 and "spellings cannot change" in res.stderr

    from typer.testing import CliRunner

    from reprise.cli._app import app

    monkeypatch.chdir(project)
    monkeypatch.delenv("REPRISE_WORKSPACE", raising=False)
    out = CliRunner().invoke(app, ["data", "add", "typed", "m.csv", "--na-values", "NA,,-",
                                   "--json"])
    assert out.exit_code == 0, out.output
    shown = js(project, "data", "show", "typed")
    assert shown["meta"]["na_values"] == ["", "-", "NA"]
    assert shown["profile"]["columns"]["city"]["nulls"] == 2  # "null" is a value here


def test_delimiter_sniffed_or_given_on_the_fast_path_and_through_typer(
        project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (project / "eu.csv").write_text("id;price;city\n1;2.5;Lyon, FR\n2;3;Paris\n")
    out = cli(project, "data", "add", "eu", "eu.csv").stdout
    assert "delimiter ';'" in out, out
    shown = js(project, "data", "show", "eu")
    assert shown["meta"]["delimiter"] == ";" and sorted(shown["schema"]) == ["city", "id", "price"]
    (project / "tabs.txt").write_text("a\tb\n1\t2\n")
    assert js(project, "data", "add", "tabs", "tabs.txt", "--format", "csv",
              "--delimiter", "\\t")["delimiter"] == "\t"

    from typer.testing import CliRunner

    from reprise.cli._app import app

    monkeypatch.chdir(project)
    monkeypatch.delenv("REPRISE_WORKSPACE", raising=False)
    res = CliRunner().invoke(app, ["data", "add", "one", "eu.csv", "--delimiter", ",", "--json"])
    assert "looks ';'-delimited" in str(res.exception), res.output  # main() makes it exit 2


def test_folder_add_diff_and_checkout(project: Path) -> None:
    pics = project / "pics"
    (pics / "cats").mkdir(parents=True)
    (pics / "cats" / "1.png").write_bytes(b"png1")
    (pics / "2.jpg").write_bytes(b"jpg2")
    first = js(project, "data", "add", "pics", "pics")
    (pics / "cats" / "3.png").write_bytes(b"png3")
    second = js(project, "data", "add", "pics", "pics", "--link")
    assert first["format"] == "files" and second["dataset"] == "pics@2"
    out = cli(project, "data", "diff", "pics@1", "pics@2").stdout
    assert "+ cats/3.png" in out and "2.jpg" not in out
    cli(project, "data", "checkout", "pics@1", "v1")
    assert sorted(p.relative_to(project / "v1").as_posix()
                  for p in (project / "v1").rglob("*") if p.is_file()) == ["2.jpg", "cats/1.png"]
    assert (project / "v1" / "cats" / "1.png").read_bytes() == b"png1"
    bad = cli(project, "data", "checkout", "pics@1", "v1", check=False)
    assert bad.returncode == 2 and "not an empty folder" in bad.stderr
