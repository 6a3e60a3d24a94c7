"""``File`` and ``Dir`` stand in for their paths wherever a path is accepted."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pytest

from reprise import Dir, File


def test_a_file_is_its_path_to_str_fspath_open_and_pandas(tmp_path: Path) -> None:
    (tmp_path / "data.csv").write_text("a,b\n1,2\n")
    f = File(tmp_path / "data.csv")
    assert str(f) == os.fspath(f) == str(tmp_path / "data.csv")
    assert f"{f}" == str(tmp_path / "data.csv") and f.name == "data.csv"
    with open(str(f)) as fh:
        assert fh.readline() == "a,b\n"
    assert pd.read_csv(str(f)).to_dict("records") == [{"a": 1, "b": 2}]
    assert pd.read_csv(f).shape == (1, 2)
    assert repr(f) == f"File({str(tmp_path / 'data.csv')!r})"  # repr still names the type


def test_a_relative_file_stays_relative(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("data.csv").write_text("x\n")
    assert str(File("data.csv")) == "data.csv" and Path(File("data.csv")).read_text() == "x\n"


def test_a_dir_joins_with_slash(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.txt").write_text("hi")
    d = Dir(tmp_path)
    assert str(d) == str(tmp_path)
    assert (d / "sub" / "a.txt").read_text() == "hi"
    assert d / Path("sub") == tmp_path / "sub"
    assert sorted(p.name for p in Path(d).iterdir()) == ["sub"]
    assert os.path.join(d, "sub") == str(tmp_path / "sub")


def test_equality_and_hash_are_by_kind_and_path(tmp_path: Path) -> None:
    assert File(tmp_path / "a") == File(str(tmp_path / "a"))
    assert File(tmp_path / "a") != Dir(tmp_path / "a")
    assert len({File(tmp_path / "a"), File(tmp_path / "a"), Dir(tmp_path / "a")}) == 2
