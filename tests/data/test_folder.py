"""Folder datasets: a manifest of per-file blobs, deduplicated across versions, a stat
cache for re-adds, ``--link``, checkout back to a folder, old tar versions, bad input."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

import reprise
from reprise.core._hashing import hash_bytes
from reprise.core.errors import UserError
from reprise.data import Dataset, add_dataset, checkout_dataset, list_datasets
from reprise.data._dataset import diff_datasets
from reprise.store import _artifacts

OLD = time.time() - 3600  # files older than the stat cache's racy window


@pytest.fixture
def ws(tmp_path: Path) -> Any:
    return reprise.init(tmp_path / "ws")


def make_tree(root: Path) -> Path:
    files = {"cats/1.png": b"\x89PNG" + b"1" * 100, "cats/deep/2.png": b"\x89PNG" + b"2" * 50,
             "dogs/3.jpg": b"jpeg" * 10, "README": b"labels\n", "run.sh": b"#!/bin/sh\n"}
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    (root / "run.sh").chmod(0o755)
    (root / "empty" / "inner").mkdir(parents=True)
    (root / "latest").symlink_to("cats/1.png")
    age(root)
    return root


def age(root: Path) -> None:
    for dirpath, _, names in os.walk(root):
        for name in names:
            os.utime(Path(dirpath) / name, (OLD, OLD), follow_symlinks=False)


def blobs(ws: Any) -> set[str]:
    return set(ws.artifacts.iter_hashes())


def tree_of(root: Path) -> dict[str, Any]:
    """Every entry below ``root``: bytes for files, the target for links, None for folders."""
    out: dict[str, Any] = {}
    for dirpath, dirnames, names in os.walk(root):
        for name in dirnames + names:
            full = Path(dirpath) / name
            rel = full.relative_to(root).as_posix()
            if full.is_symlink():
                out[rel] = ("link", os.readlink(full))
            elif full.is_dir():
                out[rel] = None
            else:
                out[rel] = full.read_bytes()
    return out


def test_a_folder_is_a_manifest_of_file_blobs(ws: Any, tmp_path: Path) -> None:
    src = make_tree(tmp_path / "pics")
    rec = add_dataset("pics", src, workspace=ws).record
    art = ws.metadata.get_artifact(rec.artifact_hash)
    assert art.materializer == "tree" and art.meta == {"files": 5, "bytes": rec.meta["size"]}
    raw = ws.artifacts.get_bytes(rec.artifact_hash)
    assert hash_bytes(raw) == rec.artifact_hash  # the content hash is the manifest's hash
    doc = json.loads(raw)
    assert [f[0] for f in doc["files"]] == sorted(f[0] for f in doc["files"])
    assert {f[0]: f[1] for f in doc["files"]}["dogs/3.jpg"] == hash_bytes(b"jpeg" * 10)
    assert doc["dirs"] == ["empty/inner"] and doc["links"] == [["latest", "cats/1.png"]]
    assert rec.profile["files"] == 5 and rec.profile["extensions"][".png"] == 2
    assert Dataset("pics", workspace=ws).reprise_resolve(ws)["content_hash"] == rec.artifact_hash


def test_adding_one_file_stores_one_new_blob_and_diff_lists_it(ws: Any, tmp_path: Path
                                                               ) -> None:
    src = make_tree(tmp_path / "pics")
    first = add_dataset("pics", src, workspace=ws).record
    before = blobs(ws)
    (src / "dogs" / "4.jpg").write_bytes(b"new dog")
    second = add_dataset("pics", src, workspace=ws).record
    new = blobs(ws) - before
    assert second.version == 2
    assert new == {hash_bytes(b"new dog"), second.artifact_hash}  # one file blob + manifest
    diff = diff_datasets("pics@1", "pics@2", workspace=ws)
    assert diff["files_added"] == ["dogs/4.jpg"]
    assert diff["files_removed"] == diff["files_changed"] == []
    assert first.artifact_hash != second.artifact_hash


def test_unchanged_folder_is_not_read_again(ws: Any, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    src = make_tree(tmp_path / "pics")
    add_dataset("pics", src, workspace=ws)

    def no_reading(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("an unchanged file was read again")

    with monkeypatch.context() as m:
        m.setattr(_artifacts.LocalArtifactStore, "put_files", no_reading)
        again = add_dataset("pics", src, workspace=ws)
    assert not again.created
    # same size, new bytes, another mtime: the stamp differs, so it is hashed again
    (src / "README").write_bytes(b"LABELS\n")
    os.utime(src / "README", (OLD + 7, OLD + 7))
    changed = add_dataset("pics", src, workspace=ws)
    assert changed.created
    assert diff_datasets("pics@1", "pics@2", workspace=ws)["files_changed"] == ["README"]


def test_stat_cache_hit_whose_blob_was_removed_stores_it_again(ws: Any, tmp_path: Path
                                                               ) -> None:
    src = make_tree(tmp_path / "pics")
    rec = add_dataset("pics", src, workspace=ws).record
    for h in blobs(ws):
        ws.artifacts.delete(h)
    again = add_dataset("pics", src, workspace=ws)
    assert again.record.artifact_hash == rec.artifact_hash
    out = checkout_dataset("pics", tmp_path / "out", workspace=ws)
    assert tree_of(out) == tree_of(src)


def test_checkout_and_path_are_byte_identical(ws: Any, tmp_path: Path) -> None:
    src = make_tree(tmp_path / "pics")
    add_dataset("pics", src, workspace=ws)
    out = checkout_dataset("pics@1", tmp_path / "out", workspace=ws)
    assert tree_of(out) == tree_of(src)
    assert tree_of(Dataset("pics@1", workspace=ws).path()) == tree_of(src)
    with pytest.raises(UserError, match="not an empty folder"):
        checkout_dataset("pics@1", out, workspace=ws)


def test_link_hard_links_every_file(ws: Any, tmp_path: Path) -> None:
    src = make_tree(tmp_path / "pics")
    rec = add_dataset("pics", src, workspace=ws, link=True).record
    blob = ws.artifacts.local_path(hash_bytes(b"jpeg" * 10))
    assert os.stat(blob).st_ino == os.stat(src / "dogs" / "3.jpg").st_ino
    assert not os.access(src / "dogs" / "3.jpg", os.W_OK) or os.geteuid() == 0
    assert not add_dataset("pics", src, workspace=ws, link=True).created
    assert tree_of(checkout_dataset("pics", tmp_path / "out", workspace=ws)) == tree_of(src)
    assert ws.metadata.get_artifact(rec.artifact_hash).materializer == "tree"


def test_gc_keeps_the_files_of_a_registered_folder(ws: Any, tmp_path: Path) -> None:
    src = make_tree(tmp_path / "pics")
    add_dataset("pics", src, workspace=ws)
    report = ws.gc(grace_seconds=0)
    assert report.removed == []
    assert ws.fsck().unrecorded == []
    assert tree_of(checkout_dataset("pics", tmp_path / "out", workspace=ws)) == tree_of(src)


def test_versions_stored_as_one_tar_stay_readable(ws: Any, tmp_path: Path) -> None:
    from reprise.core._types import DatasetRecord
    from reprise.store._materializers import save_object

    src = make_tree(tmp_path / "pics")
    art = save_object(ws.artifacts, src)  # how folders were stored before manifests
    assert art.materializer == "dir"
    ws.metadata.put_artifact(art)
    ws.metadata.add_dataset_version(DatasetRecord(
        name="pics", version=0, artifact_hash=art.hash, format="files", rows=None, schema=None,
        profile={"format_version": 1, "files": 5, "bytes": 1}, meta={"size": art.size},
        created_at=time.time()))
    assert tree_of(Dataset("pics@1", workspace=ws).path()) == tree_of(src)
    assert tree_of(checkout_dataset("pics@1", tmp_path / "out", workspace=ws)) == tree_of(src)
    (src / "extra.txt").write_bytes(b"x")
    add_dataset("pics", src, workspace=ws)
    diff = diff_datasets("pics@1", "pics@2", workspace=ws)  # tar vs manifest: no file lists
    assert not diff["identical"] and "files_added" not in diff


@pytest.mark.parametrize("problem", ["loop", "fifo", "unreadable", "outside", "empty"])
def test_bad_folders_register_nothing(ws: Any, tmp_path: Path, problem: str,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    src = make_tree(tmp_path / "pics")
    expected = {"loop": "looping symlink", "fifo": "not a regular file",
                "unreadable": "cannot read .*secret.bin: Permission denied",
                "outside": "outside the folder", "empty": "holds no files"}[problem]
    if problem == "loop":
        (src / "a").symlink_to("b")
        (src / "b").symlink_to("a")
    elif problem == "fifo":
        os.mkfifo(src / "pipe")
    elif problem == "outside":
        (src / "escape").symlink_to(tmp_path)
    elif problem == "empty":
        src = tmp_path / "nothing"
        (src / "sub").mkdir(parents=True)
    else:  # root reads any file whatever its mode, so the refusal is simulated
        (src / "secret.bin").write_bytes(b"s")
        real_open = open

        def guarded(path: Any, *args: Any, **kwargs: Any) -> Any:
            if str(path).endswith("secret.bin"):
                raise PermissionError(13, "Permission denied", str(path))
            return real_open(path, *args, **kwargs)

        monkeypatch.setattr(_artifacts, "open", guarded, raising=False)
    with pytest.raises(UserError, match=expected):
        add_dataset("pics", src, workspace=ws)
    assert list_datasets(workspace=ws) == []


def test_a_path_that_is_neither_file_nor_folder(ws: Any, tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(UserError, match="not a regular file or a directory"):
        add_dataset("p", tmp_path / "pipe", workspace=ws)
    assert list_datasets(workspace=ws) == []


def test_profile_format_version_matches_the_profiler() -> None:
    from reprise.data import _folder, _profile

    assert _folder.FORMAT_VERSION == _profile.FORMAT_VERSION
