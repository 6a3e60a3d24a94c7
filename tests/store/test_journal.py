from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reprise.core.errors import InvalidNameError
from reprise.store import JournalWriter, check_key, read_journal
from reprise.store._journal import cut_torn_tail, try_lock

keys = st.text(alphabet=st.characters(min_codepoint=0x20, blacklist_categories=("Cs",)),
               min_size=1, max_size=30).filter(lambda k: k == k.strip() and "\x7f" not in k)


@given(st.lists(st.tuples(keys, st.integers(-2**62, 2**62), st.floats(), st.floats(0, 2e9)),
                max_size=50))
def test_metric_lines_roundtrip_exactly(tmp_path_factory: pytest.TempPathFactory,
                                        rows: list[tuple[str, int, float, float]]) -> None:
    path = tmp_path_factory.mktemp("j") / "r.jrnl"
    w = JournalWriter(path)
    for row in rows:
        w.metric(*row)
    w.close()
    got = read_journal(path).metrics
    assert len(got) == len(rows)
    for (k, s, v, t), (k2, s2, v2, t2) in zip(rows, got, strict=True):
        assert (k, s, t) == (k2, s2, t2)
        assert (math.isnan(v) and math.isnan(v2)) or v == v2


def test_a_torn_last_line_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "r.jrnl"
    w = JournalWriter(path)
    w.event("R", {"id": "x"})
    w.metric("loss", 0, 1.0, 1.0)
    w.close()
    with open(path, "ab") as f:
        f.write(b"M\tloss\t1\t0.5")  # a write cut short by a kill
    batch = read_journal(path)
    assert batch.header == {"id": "x"} and batch.metrics == [("loss", 0, 1.0, 1.0)]
    assert batch.end_offset == path.stat().st_size - len(b"M\tloss\t1\t0.5")
    assert read_journal(path, batch.end_offset).empty


def test_the_writer_holds_an_exclusive_lock(tmp_path: Path) -> None:
    path = tmp_path / "r.jrnl"
    w = JournalWriter(path)
    with try_lock(path) as fd:
        assert fd is None
    with pytest.raises(OSError):
        JournalWriter(path)
    w.close()
    with try_lock(path) as fd:
        assert fd is not None


@pytest.mark.parametrize("key", ["", "a\tb", "x\n", " a", "a ", "k" * 251, "\x00"])
def test_bad_keys(key: str) -> None:
    with pytest.raises(InvalidNameError):
        check_key(key)


def test_good_keys() -> None:
    assert check_key("val/loss@epoch 3 — ünïcode") == "val/loss@epoch 3 — ünïcode"


def test_a_line_cut_in_the_middle_is_dropped_and_the_lines_around_it_kept(
        tmp_path: Path) -> None:
    path = tmp_path / "r.jrnl"
    w = JournalWriter(path, b'R\t{"id":"x"}\n')
    w.metric("loss", 0, 1.0, 1.0)
    w.close()
    with open(path, "ab") as f:  # an older version's short write, then whole lines
        f.write(b"M\tloss\t1\t0.")
        f.write(b"M\tloss\t2\t0.25\t3.0\nP\t{\"lr\":0.1}\nnot a line\n")
    batch = read_journal(path)
    cut = path.read_bytes().index(b"M\tloss\t1")
    assert batch.header == {"id": "x"} and batch.params == {"lr": 0.1}
    assert batch.tags == {"reprise.journal.dropped": f"2 line(s) at byte {cut}, "
                                                     f"{path.stat().st_size - 11}"}
    assert batch.metrics == [("loss", 0, 1.0, 1.0), ("loss", 2, 0.25, 3.0)]
    assert batch.dropped == [(cut, b"M\tloss\t1\t0."), (path.stat().st_size - 11, b"not a line")]
    assert batch.end_offset == path.stat().st_size


def test_a_journal_appears_locked_and_holding_its_header(tmp_path: Path) -> None:
    path = tmp_path / "r.jrnl"
    w = JournalWriter(path, b'R\t{"id":"x"}\n')
    assert read_journal(path).header == {"id": "x"}
    with try_lock(path) as fd:
        assert fd is None
    with pytest.raises(FileExistsError):
        JournalWriter(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.jrnl"]  # no temp file left
    w.close()


def test_cut_torn_tail_keeps_every_whole_line(tmp_path: Path) -> None:
    path = tmp_path / "r.jrnl"
    path.write_bytes(b"R\t{}\nM\tk\t0\t1.0\t2.0\nM\tk\t1\t1.")
    fd = os.open(path, os.O_RDWR)
    try:
        assert cut_torn_tail(fd) == (19, b"M\tk\t1\t1.")
        assert cut_torn_tail(fd) == (19, b"")
    finally:
        os.close(fd)
    assert path.read_bytes() == b"R\t{}\nM\tk\t0\t1.0\t2.0\n"
