"""Atomic writes: all or nothing, and the finished file has an ordinary mode."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from reprise.core._atomic import TMP_PREFIX, atomic_write, atomic_write_bytes


def test_a_finished_file_has_the_mode_a_plain_open_gives(tmp_path: Path) -> None:
    atomic_write_bytes(tmp_path / "out.html", b"<p>")
    (tmp_path / "plain.html").write_bytes(b"<p>")
    mode = stat.S_IMODE(os.stat(tmp_path / "out.html").st_mode)
    assert mode == stat.S_IMODE(os.stat(tmp_path / "plain.html").st_mode)


def test_a_failed_write_leaves_the_old_file_and_no_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "f.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic_write(target, mode="w") as f:
        f.write("new")
        raise RuntimeError("disk full")
    assert target.read_text() == "old"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(TMP_PREFIX)]


def test_the_file_is_fsynced_before_the_rename_and_the_folder_after_unless_told(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(
            "folder" if os.path.isdir(f"/proc/self/fd/{fd}") else f"file of {os.fstat(fd).st_size} bytes"
        )
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    atomic_write_bytes(tmp_path / "a", b"abc")
    assert synced == ["file of 3 bytes", "folder"]
    synced.clear()
    with atomic_write(tmp_path / "b", sync_dir=False) as f:
        f.write(b"abcd")
        assert not (tmp_path / "b").exists()  # renamed only once synced
    assert synced == ["file of 4 bytes"] and (tmp_path / "b").read_bytes() == b"abcd"
