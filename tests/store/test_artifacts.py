"""The artifact store: one conformance suite over the local and the fsspec (memory://) backend,
plus the local backend's on-disk guarantees (corruption, killed writers)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from reprise.core._hashing import hash_bytes
from reprise.core.errors import (
    ArtifactNotFoundError,
    ConfigError,
    IntegrityError,
    InvalidNameError,
)
from reprise.store import (
    BaseArtifactStore,
    FsspecArtifactStore,
    LocalArtifactStore,
    open_artifact_store,
    validate_artifact_name,
)
from tests._fsync import count_fsyncs

ABSENT = "0" * 64


@pytest.fixture(params=["local", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BaseArtifactStore]:
    """Each backend in turn; a memory store gets a unique root, removed afterwards."""
    if request.param == "local":
        yield open_artifact_store(tmp_path / "artifacts")
        return
    pytest.importorskip("fsspec")
    url = f"memory://reprise-test-{uuid.uuid4().hex}"
    mem = open_artifact_store(url)
    assert isinstance(mem, FsspecArtifactStore)
    yield mem
    if mem.fs.exists(mem.root):
        mem.fs.rm(mem.root, recursive=True)


class TestArtifactStoreConformance:
    def test_put_get_roundtrip(self, store: BaseArtifactStore) -> None:
        h, size = store.put_bytes(b"hello world")
        assert (h, size) == (hash_bytes(b"hello world"), 11)
        assert store.get_bytes(h, verify=True, expected_size=11) == b"hello world"
        assert store.exists(h) and store.size(h) == 11
        assert store.verify(h)

    def test_put_files_matches_put_file(self, store: BaseArtifactStore, tmp_path: Path
                                        ) -> None:
        sizes = [0, 5, 5, (1 << 20) + 3]  # empty, two equal small files, one past "small"
        paths = []
        for i, size in enumerate(sizes):
            paths.append(tmp_path / f"f{i}")
            paths[-1].write_bytes(b"%d" % (size % 7) * size)
        got = store.put_files(paths, workers=4)
        assert got == [(hash_bytes(p.read_bytes()), p.stat().st_size) for p in paths]
        for p, (h, _) in zip(paths, got, strict=True):
            assert store.get_bytes(h, verify=True) == p.read_bytes()
        assert store.put_files(paths) == got  # present already: nothing rewritten
        if isinstance(store, LocalArtifactStore):
            assert not list((store.root / "tmp").iterdir())  # no temp file left behind
            assert all(not os.access(store.local_path(h), os.W_OK) or os.geteuid() == 0
                       for h, _ in got)

    def test_empty_blob(self, store: BaseArtifactStore) -> None:
        h, size = store.put_bytes(b"")
        assert size == 0 and store.get_bytes(h, verify=True) == b""

    def test_same_bytes_are_stored_once(self, store: BaseArtifactStore) -> None:
        first = store.put_bytes(b"same")
        assert store.put_bytes(b"same") == first
        assert store.put_stream([b"sa", b"me"]) == first
        assert list(store.iter_hashes()) == [first[0]]

    def test_put_file_and_stream(self, store: BaseArtifactStore, tmp_path: Path) -> None:
        data = os.urandom(3 << 20)
        src = tmp_path / "big.bin"
        src.write_bytes(data)
        h, size = store.put_file(src)
        assert (h, size) == (hash_bytes(data), len(data))
        chunks = (data[i:i + 100_000] for i in range(0, len(data), 100_000))
        assert store.put_stream(chunks) == (h, size)
        assert store.get_bytes(h, verify=True) == data
        with store.open(h) as f:
            assert f.read(5) == data[:5]

    def test_copy_to(self, store: BaseArtifactStore, tmp_path: Path) -> None:
        h, _ = store.put_bytes(b"copy me")
        out = store.copy_to(h, tmp_path / "sub" / "out.bin", verify=True)
        assert out.read_bytes() == b"copy me"

    def test_a_durable_copy_is_fsynced_and_a_throwaway_one_is_not(
            self, store: BaseArtifactStore, tmp_path: Path,
            monkeypatch: pytest.MonkeyPatch) -> None:
        h, _ = store.put_bytes(b"copy me")
        synced = count_fsyncs(monkeypatch)
        out = store.copy_to(h, tmp_path / "a.bin", verify=True, durable=False)
        assert out.read_bytes() == b"copy me" and synced == []
        assert store.copy_to(h, tmp_path / "b.bin", verify=True).read_bytes() == b"copy me"
        assert len(synced) == 2  # the file, then its folder
        # these stores have no read-only local copy to link: a copy, not fsynced
        out = store.copy_to(h, tmp_path / "c.bin", durable=False, link=True)
        assert out.read_bytes() == b"copy me" and len(synced) == 2
        with pytest.raises(ValueError, match="durable=False"):
            store.copy_to(h, tmp_path / "d.bin", link=True)
        assert not (tmp_path / "d.bin").exists()

    def test_absent_blob(self, store: BaseArtifactStore) -> None:
        assert not store.exists(ABSENT)
        assert not store.delete(ABSENT)
        for call in (store.size, store.mtime, store.open, store.get_bytes):
            with pytest.raises(ArtifactNotFoundError, match=ABSENT):
                call(ABSENT)

    def test_iter_hashes_and_delete(self, store: BaseArtifactStore) -> None:
        assert list(store.iter_hashes()) == []
        hashes = sorted(store.put_bytes(bytes([i]))[0] for i in range(5))
        assert list(store.iter_hashes()) == hashes
        assert store.delete(hashes[0]) and not store.exists(hashes[0])
        assert list(store.iter_hashes()) == hashes[1:]

    def test_mtime_is_recent(self, store: BaseArtifactStore) -> None:
        h, _ = store.put_bytes(b"when")
        assert abs(store.mtime(h) - time.time()) < 60

    def test_size_mismatch_is_detected(self, store: BaseArtifactStore) -> None:
        h, _ = store.put_bytes(b"four")
        with pytest.raises(IntegrityError, match="expected 5 bytes"):
            store.get_bytes(h, expected_size=5)

    def test_failed_stream_leaves_no_blob(self, store: BaseArtifactStore) -> None:
        def chunks() -> Iterator[bytes]:
            yield b"partial"
            raise RuntimeError("producer failed")

        with pytest.raises(RuntimeError, match="producer failed"):
            store.put_stream(chunks())
        assert list(store.iter_hashes()) == []
        assert store.sweep_temp(older_than=0) == 0

    @pytest.mark.parametrize("bad", ["../../etc", "/etc/passwd", "ABCD" * 16, "a" * 63,
                                     "a" * 64 + "\n", "g" * 64, ""])
    def test_bad_hashes_are_rejected(self, store: BaseArtifactStore, bad: str) -> None:
        for call in (store.exists, store.size, store.open, store.delete, store.get_bytes,
                     store.local_path):
            with pytest.raises(InvalidNameError, match="not a content hash"):
                call(bad)


@pytest.mark.parametrize("name", ["../x", "/etc/passwd", "a/../../b", "a\\b", "", "a\x00b",
                                  "a//b", "a/", "./a", "a/.", "x" * 256, "tab\there"])
def test_validate_artifact_name_rejects(name: str) -> None:
    with pytest.raises(InvalidNameError, match="is not allowed"):
        validate_artifact_name(name)


@pytest.mark.parametrize("name", ["model", "model/weights.npy", "a.b/c-d_e", "..hidden", "é"])
def test_validate_artifact_name_accepts(name: str) -> None:
    assert validate_artifact_name(name) == name


def _blob_file(store: LocalArtifactStore, h: str) -> Path:
    path = store.local_path(h)
    assert path is not None and path.is_relative_to(store.root / "blobs")
    return path


def test_corrupt_blob_fails_verification(tmp_path: Path) -> None:
    store = LocalArtifactStore(tmp_path)
    h, size = store.put_bytes(b"precious bytes")
    blob = _blob_file(store, h)
    assert not os.access(blob, os.W_OK) or os.geteuid() == 0  # blobs are read-only
    blob.chmod(0o644)
    data = bytearray(blob.read_bytes())
    data[3] ^= 0xFF
    blob.write_bytes(bytes(data))
    assert store.get_bytes(h) == bytes(data)  # a plain read does not hash
    with pytest.raises(IntegrityError, match="reprise fsck"):
        store.get_bytes(h, verify=True)
    assert not store.verify(h)
    with pytest.raises(IntegrityError):
        store.copy_to(h, tmp_path / "out", verify=True)
    assert not (tmp_path / "out").exists()
    blob.write_bytes(bytes(data[:-1]))
    with pytest.raises(IntegrityError, match=f"expected {size} bytes"):
        store.get_bytes(h, expected_size=size)


def test_truncated_blob_is_replaced_by_a_new_put(tmp_path: Path) -> None:
    store = LocalArtifactStore(tmp_path)
    h, _ = store.put_bytes(b"0123456789")
    blob = _blob_file(store, h)
    blob.chmod(0o644)
    blob.write_bytes(b"01234")
    assert store.put_bytes(b"0123456789") == (h, 10)
    assert store.get_bytes(h, verify=True) == b"0123456789"


_KILLED_WRITER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from reprise.store import LocalArtifactStore

    def chunks():
        yield b"x" * 65536
        Path(sys.argv[2]).write_text("started")
        while True:
            time.sleep(0.05)
            yield b"y" * 65536

    LocalArtifactStore(sys.argv[1]).put_stream(chunks())
""")


def test_killed_writer_leaves_only_a_temp_file(tmp_path: Path) -> None:
    root, marker = tmp_path / "store", tmp_path / "started"
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_WRITER, str(root), str(marker)])
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert proc.poll() is None, "writer exited before it was killed"
            assert time.monotonic() < deadline, "writer never started"
            time.sleep(0.02)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    store = LocalArtifactStore(root)
    assert list(store.iter_hashes()) == []
    blobs = root / "blobs"
    assert not blobs.exists() or not any(p.is_file() for p in blobs.rglob("*"))
    leftovers = list((root / "tmp").iterdir())
    assert len(leftovers) == 1 and leftovers[0].name.startswith(".tmp-")
    assert store.sweep_temp() == 0  # younger than the default hour: maybe still being written
    assert store.sweep_temp(older_than=0) == 1
    assert list((root / "tmp").iterdir()) == []


def test_open_artifact_store_urls(tmp_path: Path) -> None:
    assert isinstance(open_artifact_store(tmp_path), LocalArtifactStore)
    local = open_artifact_store(f"file://{tmp_path}/x")
    assert isinstance(local, LocalArtifactStore) and local.root == tmp_path / "x"
    with pytest.raises(ConfigError, match="unknown scheme 'nosuchscheme'"):
        open_artifact_store("nosuchscheme://bucket/prefix")


def test_memory_stores_are_isolated_by_path() -> None:
    pytest.importorskip("fsspec")
    a = FsspecArtifactStore(f"memory://reprise-test-{uuid.uuid4().hex}")
    b = FsspecArtifactStore(f"memory://reprise-test-{uuid.uuid4().hex}")
    try:
        h, _ = a.put_bytes(b"only in a")
        assert a.exists(h) and not b.exists(h)
        assert a.local_path(h) is None
    finally:
        for s in (a, b):
            if s.fs.exists(s.root):
                s.fs.rm(s.root, recursive=True)
