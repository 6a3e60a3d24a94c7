"""``reprise.monitor``'s request-log reader, bulk feedback from files, the labelled
export and the ``reprise monitor`` commands (exit 2 with a clear message on bad input)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import reprise
import reprise.monitor as monitor
from reprise.cli import main
from reprise.core._reqlog_types import FeedbackError
from reprise.monitor import (
    add_feedback,
    add_feedback_file,
    export_labelled,
    iter_requests,
    prune_requests,
    read_requests,
)
from reprise.store._request_log import write_request_chunk


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.chdir(tmp_path)
    w = reprise.init(tmp_path)
    yield w
    w.close()


def _chunk(ws: Any, ids: list[str], at: float, version: int = 1, **extra: list[Any]) -> None:
    n = len(ids)
    cols: dict[str, Any] = {"request_id": ids, "row": pa.array([0] * n, pa.int32()),
                            "time": [at + i for i in range(n)], "version": [version] * n,
                            "latency_ms": [1.0] * n, "input.x": [float(i) for i in range(n)],
                            "output.score": [0.5] * n}
    cols.update({f"input.{k}": v for k, v in extra.items()})
    write_request_chunk(ws, pa.table(cols), name="churn", version=version, server="s",
                        first_at=at, last_at=at + n - 1, requests=n)


def test_the_package_exports_what_it_lists() -> None:
    assert {"ExportReport", "add_feedback", "add_feedback_file", "export_labelled",
            "iter_requests", "list_request_chunks", "prune_requests",
            "read_requests"} <= set(monitor.__all__)  # beside the drift statistics
    for name in monitor.__all__:
        assert getattr(monitor, name) is not None


def test_rows_are_read_by_version_and_time_range(ws: Any) -> None:
    _chunk(ws, ["a", "b", "c"], 100.0)
    _chunk(ws, ["d", "e"], 200.0, version=2, plan=["x", "y"])
    assert read_requests("churn", workspace=ws)["request_id"].to_pylist() == list("abcde")
    assert read_requests("churn:2", workspace=ws)["request_id"].to_pylist() == ["d", "e"]
    # a range cutting through chunks keeps only its rows
    assert read_requests("churn", 101, 200, workspace=ws)["request_id"].to_pylist() == \
        ["b", "c", "d"]
    tables = list(iter_requests("churn", workspace=ws))
    assert [t.num_rows for t in tables] == [3, 2]
    both = read_requests("churn", workspace=ws)  # a column of one chunk only: null elsewhere
    assert both["input.plan"].to_pylist() == [None, None, None, "x", "y"]
    assert read_requests("nothing", workspace=ws).num_rows == 0
    with pytest.raises(reprise.errors.UserError, match="NAME:VERSION"):
        read_requests("churn:latest", workspace=ws)


@pytest.mark.parametrize("fmt", ["csv", "parquet", "jsonl"])
def test_feedback_files_in_each_format_join_the_log(ws: Any, tmp_path: Path, fmt: str) -> None:
    _chunk(ws, ["101", "b", "c"], 100.0)
    table = pa.table({"request_id": ["101", "c", "not-logged"], "label": [1, 0, 1]})
    path = tmp_path / f"labels.{fmt}"
    if fmt == "csv":
        path.write_text("request_id,label\n101,1\nc,0\nnot-logged,1\n")
    elif fmt == "parquet":
        pq.write_table(table, path)
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in table.to_pylist()))
    assert add_feedback_file("churn", path, workspace=ws) == 3
    report = export_labelled("churn", tmp_path / "out" / "l.parquet", workspace=ws,
                             with_meta=True)
    out = pq.read_table(report.path)
    assert (report.rows, report.logged_rows) == (2, 3)
    assert out["request_id"].to_pylist() == ["101", "c"]  # an id that looks like a number
    assert out["label"].to_pylist() == [1, 0]
    assert {"x", "label", "time", "version", "output.score"} <= set(out.column_names)


def test_bad_feedback_files_are_refused_whole(ws: Any, tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("request_id,label\na,1\n,0\na,1\nb,\n")
    with pytest.raises(FeedbackError) as info:
        add_feedback_file("churn", bad, workspace=ws)
    fields = {p["field"] for p in info.value.problems}
    assert fields == {"row[1].request_id", "row[2].request_id", "row[3].label"}
    assert ws.metadata.get_feedback("churn") == {}  # nothing stored
    other = tmp_path / "other.csv"
    other.write_text("id,y\na,1\n")
    with pytest.raises(reprise.errors.UserError, match="no column request_id, label"):
        add_feedback_file("churn", other, workspace=ws)
    (tmp_path / "x.txt").write_text("request_id,label\n")
    with pytest.raises(reprise.errors.UserError, match="unknown feedback format"):
        add_feedback_file("churn", tmp_path / "x.txt", workspace=ws)
    with pytest.raises(FeedbackError, match="finite"):
        add_feedback("churn", [{"request_id": "a", "label": float("nan")}], workspace=ws)


def test_a_label_column_clash_and_mixed_labels(ws: Any, tmp_path: Path) -> None:
    _chunk(ws, ["a", "b"], 100.0, label=["x", "y"])
    add_feedback("churn", [{"request_id": "a", "label": "spam"},
                           {"request_id": "b", "label": 3}], workspace=ws)
    with pytest.raises(reprise.errors.UserError, match="--label-column"):
        export_labelled("churn", tmp_path / "o.parquet", workspace=ws)
    report = export_labelled("churn", tmp_path / "o.parquet", label_column="target",
                             workspace=ws)
    assert pq.read_table(report.path)["target"].to_pylist() == ['"spam"', "3"]


def test_export_streams_chunk_by_chunk_into_one_schema(ws: Any, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    _chunk(ws, ["a", "b"], 100.0, n=[1, 2])  # version 1: n is an integer
    _chunk(ws, ["c", "d"], 200.0, version=2, n=[0.5, 1.5], plan=["x", "y"])
    _chunk(ws, ["e"], 300.0, version=2, n=[9.0], plan=["z"])  # no label: left out
    add_feedback("churn", [{"request_id": "a", "label": 1}, {"request_id": "c", "label": 0},
                           {"request_id": "d", "label": 1}], workspace=ws)
    # never the whole log in memory: the export reads the chunks one at a time
    monkeypatch.setattr("reprise.monitor._requests.read_requests", None)
    report = export_labelled("churn", tmp_path / "o.parquet", workspace=ws, with_meta=True)
    out = pq.read_table(report.path)
    assert (report.rows, report.logged_rows) == (3, 5)
    assert out["request_id"].to_pylist() == ["a", "c", "d"]
    assert out.schema.field("n").type == pa.float64()  # promoted across versions
    assert out["n"].to_pylist() == [1.0, 0.5, 1.5]
    assert out["plan"].to_pylist() == [None, "x", "y"]  # version 1 had no plan
    assert out.column_names[-1] == "label" and out["label"].to_pylist() == [1, 0, 1]
    assert report.columns == out.column_names
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".o.parquet")]  # no parts


def test_labels_of_different_types_in_different_chunks_become_json_text(
        ws: Any, tmp_path: Path) -> None:
    _chunk(ws, ["a"], 100.0)
    _chunk(ws, ["b"], 200.0)
    _chunk(ws, ["c", "d"], 300.0)
    add_feedback("churn", [{"request_id": "a", "label": 3}, {"request_id": "b", "label": "no"},
                           {"request_id": "c", "label": "yes"}, {"request_id": "d", "label": 2}],
                 workspace=ws)
    out = pq.read_table(export_labelled("churn", tmp_path / "o.parquet", workspace=ws).path)
    assert out["label"].to_pylist() == ["3", '"no"', '"yes"', "2"]
    # no labelled row at all: an empty file with the input columns and the label
    empty = export_labelled("nothing", tmp_path / "e.parquet", workspace=ws)
    assert empty.rows == 0 and pq.read_table(empty.path).column_names == ["label"]


def _cli(args: list[str]) -> int:
    try:
        main(args)
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def test_the_monitor_commands(ws: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                              ) -> None:
    _chunk(ws, ["a", "b"], 100.0)
    labels = tmp_path / "l.jsonl"
    labels.write_text('{"request_id": "a", "label": 1}\n')
    assert _cli(["monitor", "feedback", "churn", str(labels)]) == 0
    assert "stored 1 labels" in capsys.readouterr().out
    assert _cli(["monitor", "export-labelled", "churn", "-o", str(tmp_path / "d.parquet"),
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"] == 1
    assert _cli(["monitor", "requests", "churn", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["rows"] == 2
    assert _cli(["monitor", "requests", "churn", "--since", "yesterday-ish"]) == 2
    assert "--since takes" in capsys.readouterr().err
    # a name or version neither registered nor logged is a typo: exit 2, nothing written
    assert _cli(["monitor", "feedback", "nosuch", str(labels)]) == 2
    assert "no model 'nosuch'" in capsys.readouterr().err
    assert _cli(["monitor", "export-labelled", "nosuch", "-o", str(tmp_path / "n.parquet")]) == 2
    assert "no model 'nosuch'" in capsys.readouterr().err
    assert not (tmp_path / "n.parquet").exists()
    assert _cli(["monitor", "requests", "churn:9"]) == 2
    assert "no model 'churn'" in capsys.readouterr().err  # logged, but never registered
    assert _cli(["monitor", "export-labelled", "churn", "--version", "9",
                 "-o", str(tmp_path / "n.parquet")]) == 2
    assert "no model 'churn'" in capsys.readouterr().err
    assert _cli(["monitor", "prune"]) == 2
    assert "--max-age-days" in capsys.readouterr().err
    assert _cli(["monitor", "prune", "churn", "--max-age-days", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["chunks"] == 1  # written at t=100: old
    assert _cli(["monitor", "feedback", "churn", str(tmp_path / "missing.csv")]) == 2


def test_prune_needs_a_rule(ws: Any) -> None:
    with pytest.raises(reprise.errors.UserError):
        prune_requests("churn", workspace=ws)
    with pytest.raises(reprise.errors.UserError, match="negative"):
        prune_requests("churn", max_mb=-1, workspace=ws)


def test_import_monitor_loads_nothing_heavy() -> None:
    from tests.test_lean_import import HEAVY, _loaded

    assert not _loaded("import reprise.monitor") & set(HEAVY + ["pyarrow", "numpy"])
