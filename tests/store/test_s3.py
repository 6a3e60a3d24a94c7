"""The S3 artifact store against a real S3 server (moto, on loopback): content addressing,
multipart uploads in bounded memory, atomic visibility, the read-through cache,
concurrent writers, retries on injected faults, clear errors, secrets never shown."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import time
import tracemalloc
from pathlib import Path

import pytest

from reprise.core._atomic import TMP_PREFIX
from reprise.core._hashing import hash_bytes, hash_file
from reprise.core.errors import (
    ArtifactNotFoundError,
    ConfigError,
    IntegrityError,
    InvalidNameError,
)
from reprise.store._artifacts import open_artifact_store
from reprise.store._s3 import S3ArtifactStore
from tests._fsync import count_fsyncs
from tests._s3 import FAKE_CREDENTIALS, FaultProxy, fail_first

ROOT = Path(__file__).resolve().parents[2]


def _store(bucket: object, **kw: object) -> S3ArtifactStore:
    store = open_artifact_store(bucket.url, **kw)  # type: ignore[attr-defined, arg-type]
    assert isinstance(store, S3ArtifactStore)
    return store


def _keys(bucket: object) -> list[str]:
    client = bucket.server.client()  # type: ignore[attr-defined]
    out = client.list_objects_v2(Bucket=bucket.bucket).get("Contents", [])  # type: ignore[attr-defined]
    return sorted(o["Key"] for o in out)


def _big_file(path: Path, mb: int) -> Path:
    block = os.urandom(1 << 20)
    with open(path, "wb") as f:
        for i in range(mb):
            f.write(block[:-8] + i.to_bytes(8, "big"))
    return path


def _env(bucket: object, endpoint: str | None = None) -> dict[str, str]:
    env = {**os.environ, **bucket.env, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}  # type: ignore[attr-defined]
    if endpoint:
        env["AWS_ENDPOINT_URL_S3"] = endpoint
    return env


def test_put_get_exists_size_delete_iter_by_content(s3_bucket: object, tmp_path: Path) -> None:
    store = _store(s3_bucket)
    h, size = store.put_bytes(b"hello")
    assert (h, size) == (hash_bytes(b"hello"), 5)
    src = tmp_path / "f.txt"
    src.write_bytes(b"hello")
    assert store.put_file(src) == (h, 5)
    assert store.put_stream([b"he", b"llo"]) == (h, 5)
    h2, _ = store.put_bytes(b"world")
    assert _keys(s3_bucket) == sorted(f"ws/blobs/{x[:2]}/{x[2:]}" for x in (h, h2))
    assert store.exists(h) and store.size(h) == 5 and store.get_bytes(h, verify=True) == b"hello"
    assert list(store.iter_hashes()) == sorted([h, h2])
    assert store.verify(h) and store.mtime(h) > time.time() - 60
    assert store.copy_to(h2, tmp_path / "out", verify=True).read_bytes() == b"world"
    assert store.delete(h) and not store.exists(h) and not store.delete(h)
    with pytest.raises(ArtifactNotFoundError, match="No blob"):
        store.size(h)
    with pytest.raises(ArtifactNotFoundError):
        store.open(h)
    with pytest.raises(InvalidNameError):
        store.exists("../../etc/passwd")
    assert list(store.iter_hashes()) == [h2]


def test_a_64_mb_file_goes_up_streamed_from_disk_in_bounded_memory(
        s3_bucket: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import reprise.store._s3 as s3mod

    big = _big_file(tmp_path / "big.bin", 64)
    h = hash_file(big)
    store = _store(s3_bucket, cache_size=0)
    store.put_bytes(b"warm up the client")  # the client's one-off set-up is not the put's
    client = s3_bucket.server.client()  # type: ignore[attr-defined]
    key = f"ws/blobs/{h[:2]}/{h[2:]}"
    for single_put_max, parts in ((128 << 20, 0), (16 << 20, 8)):  # one PUT, then 8 parts
        monkeypatch.setattr(s3mod, "_SINGLE_PUT_MAX", single_put_max)
        monkeypatch.setattr(s3mod, "_PART", 8 << 20)
        store.delete(h)
        tracemalloc.start()
        try:
            assert store.put_file(big) == (h, 64 << 20)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < 8 << 20, f"put held {peak / 2**20:.1f} MiB for a 64 MiB file"
        etag = client.head_object(Bucket=s3_bucket.bucket, Key=key)["ETag"].strip('"')  # type: ignore[attr-defined]
        assert etag.endswith(f"-{parts}") if parts else "-" not in etag
    for reader in (store, _store(s3_bucket, cache_size=128 << 20)):  # streamed, cached
        tracemalloc.start()
        try:
            out = reader.copy_to(h, tmp_path / "back.bin", verify=True)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert hash_file(out) == h and peak < 24 << 20, f"get held {peak / 2**20:.1f} MiB"
    assert reader.cache is not None and reader.cache.lookup(h) is not None


def test_the_cache_fills_verified_serves_hits_and_evicts_least_recent(
        s3_bucket: object) -> None:
    store = _store(s3_bucket, cache_size=3000)
    blobs = [os.urandom(1000) for _ in range(4)]
    hashes = [store.put_bytes(b)[0] for b in blobs]  # a put leaves its blob in the cache
    cache = store.cache
    assert cache is not None
    cached = {p.parent.name + p.name for _, _, p in cache.entries()}
    assert len(cached) == 3 and hashes[0] not in cached  # over the limit: the oldest went
    for p in cache.entries():
        os.utime(p[2], (1000, 1000))  # make the order explicit
    assert store.get_bytes(hashes[1]) == blobs[1]  # a hit refreshes blobs[1]
    assert store.get_bytes(hashes[0], verify=True) == blobs[0]  # a miss fills, evicting
    cached = {p.parent.name + p.name for _, _, p in cache.entries()}
    assert hashes[0] in cached and hashes[1] in cached and len(cached) == 3
    # a blob whose bucket bytes are wrong is refused on fill and never cached
    bad = hashes[2]
    cache.discard(bad)
    s3_bucket.server.client().put_object(  # type: ignore[attr-defined]
        Bucket=s3_bucket.bucket, Key=f"ws/blobs/{bad[:2]}/{bad[2:]}",  # type: ignore[attr-defined]
        Body=b"x" * 1000)
    with pytest.raises(IntegrityError, match="corrupt"):
        store.get_bytes(bad)
    assert cache.lookup(bad) is None and not list((cache.root / "tmp").iterdir())
    assert not store.verify(bad)  # verify reads the bucket, not the cache


def _temps(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.name.startswith(TMP_PREFIX)]


@pytest.mark.parametrize("cache_size", [None, 0], ids=["cached", "uncached"])
def test_a_corrupt_blob_is_refused_on_get_and_nothing_is_left_at_the_destination(
        s3_bucket: object, tmp_path: Path, cache_size: int | None) -> None:
    data = os.urandom(300_000)
    h, _ = _store(s3_bucket, cache_size=0).put_bytes(data)
    s3_bucket.server.client().put_object(  # type: ignore[attr-defined]
        Bucket=s3_bucket.bucket, Key=f"ws/blobs/{h[:2]}/{h[2:]}",  # type: ignore[attr-defined]
        Body=bytes(len(data)))  # the right size, the wrong bytes
    store = _store(s3_bucket, cache_size=cache_size)
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(IntegrityError, match="corrupt"):
        store.copy_to(h, out / "new.bin")  # checked even without verify: it is free
    assert list(out.iterdir()) == []
    (out / "old.bin").write_bytes(b"old")
    with pytest.raises(IntegrityError, match="corrupt"):
        store.copy_to(h, out / "old.bin", verify=True)
    assert (out / "old.bin").read_bytes() == b"old" and _temps(out) == []
    if store.cache is not None:
        assert store.cache.lookup(h) is None and _temps(store.cache.root) == []


def test_a_small_put_and_a_get_are_one_request_each_and_a_get_one_fsync(
        s3_bucket: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = os.urandom(200_000)
    src = tmp_path / "src.bin"
    src.write_bytes(data)
    with FaultProxy(s3_bucket.server.endpoint) as proxy:  # type: ignore[attr-defined]
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", proxy.endpoint)
        h, _ = _store(s3_bucket, cache_size=0).put_file(src)
        assert [(m, s) for m, _, s in proxy.seen] == [("PUT", 200)]  # conditional: no HEAD
        del proxy.seen[:]
        store = _store(s3_bucket)
        synced = count_fsyncs(monkeypatch)
        assert store.copy_to(h, tmp_path / "a.bin", verify=True).read_bytes() == data
        assert [m for m, _, _ in proxy.seen] == ["GET"] and len(synced) == 1  # no HEAD
        assert store.cache is not None and store.cache.lookup(h) is not None  # filled too
        assert store.copy_to(h, tmp_path / "b.bin", verify=True).read_bytes() == data
        assert len(proxy.seen) == 1 and len(synced) == 2  # a hit: no request
        with pytest.raises(ArtifactNotFoundError, match="No blob"):
            store.copy_to(hash_bytes(b"never stored"), tmp_path / "c.bin")
        assert [(m, s) for m, _, s in proxy.seen[1:]] == [("GET", 404)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.bin", "b.bin", "blobcache",
                                                          "src.bin"]
    assert _temps(tmp_path) == []


def test_a_body_cut_off_in_transit_is_fetched_again_from_its_start(
        s3_bucket: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = os.urandom(3 << 20)
    h, _ = _store(s3_bucket, cache_size=0).put_bytes(data)
    with FaultProxy(s3_bucket.server.endpoint,  # type: ignore[attr-defined]
                    cut=lambda method, path, number: number in (0, 2)) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", proxy.endpoint)
        store = _store(s3_bucket)
        assert store.copy_to(h, tmp_path / "a.bin").read_bytes() == data
        assert store.cache is not None and store.cache.path(h).read_bytes() == data
        store.cache.discard(h)
        assert store.get_bytes(h, verify=True) == data  # the cache's own fill
        assert [m for m, _, _ in proxy.seen] == ["GET"] * 4
    assert _temps(tmp_path) == []


def test_a_damaged_cached_copy_is_fetched_again_by_a_verified_read(
        s3_bucket: object, tmp_path: Path) -> None:
    store = _store(s3_bucket)
    data = os.urandom(100_000)
    h, _ = store.put_bytes(data)  # the put leaves it in the cache
    assert store.cache is not None
    cached = store.cache.path(h)
    for damaged in (bytes(len(data)), b""):  # what a power loss may leave of an entry
        os.chmod(cached, 0o644)
        cached.write_bytes(damaged)
        assert store.copy_to(h, tmp_path / "a.bin", verify=True).read_bytes() == data
        assert cached.read_bytes() == data  # replaced by a verified copy
        os.chmod(cached, 0o644)
        cached.write_bytes(damaged)
        assert store.get_bytes(h, verify=True) == data
        assert cached.read_bytes() == data


def test_cache_settings_from_the_workspace_config(s3_bucket: object, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import reprise
    from reprise.store._workspace import Workspace

    root = tmp_path / "proj"
    reprise.init(root)
    cfg = root / ".reprise" / "config.toml"
    monkeypatch.delenv("REPRISE_ARTIFACTS_CACHE_DIR")
    cfg.write_text(f'[artifacts]\nurl = "{s3_bucket.url}"\ncache_dir = "blobs-cache"\n'  # type: ignore[attr-defined]
                   'cache_size = "2 MiB"\n')
    arts = Workspace.open(root).artifacts
    assert isinstance(arts, S3ArtifactStore) and arts.cache is not None
    assert arts.cache.root == root / "blobs-cache" and arts.cache.limit == 2 << 20
    cfg.write_text(f'[artifacts]\nurl = "{s3_bucket.url}"\ncache_size = "lots"\n')  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="cache_size"):
        Workspace.open(root)
    monkeypatch.setenv("REPRISE_ARTIFACTS_CACHE_SIZE", "0")
    assert Workspace.open(root).artifacts.cache is None  # type: ignore[attr-defined]


PUT_SCRIPT = textwrap.dedent('''
    import sys
    from reprise.store._artifacts import open_artifact_store
    import reprise.store._s3 as s3mod
    s3mod._SINGLE_PUT_MAX = s3mod._PART = 8 << 20  # multipart, one 8 MiB part at a time
    s3mod._PARTS_IN_FLIGHT = 1
    store = open_artifact_store(sys.argv[1])
    print(*store.put_file(sys.argv[2]), flush=True)
''')


def test_an_interrupted_upload_leaves_no_object_and_sweep_aborts_it(
        s3_bucket: object, tmp_path: Path) -> None:
    big = _big_file(tmp_path / "big.bin", 40)  # 5 parts of 8 MiB
    h = hash_file(big)

    def slow_parts(method: str, path: str) -> float:
        return 0.3 if "partNumber=" in path else 0.0

    with FaultProxy(s3_bucket.server.endpoint, delay=slow_parts) as proxy:  # type: ignore[attr-defined]
        proc = subprocess.Popen([sys.executable, "-c", PUT_SCRIPT, s3_bucket.url, str(big)],  # type: ignore[attr-defined]
                                env=_env(s3_bucket, proxy.endpoint), start_new_session=True)
        try:
            deadline = time.monotonic() + 60
            while sum("partNumber=" in p for _, p, s in proxy.seen if s) < 2:
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.05)
        finally:
            proc.kill()
            proc.wait(timeout=10)
    store = _store(s3_bucket)
    assert not store.exists(h) and list(store.iter_hashes()) == [] and _keys(s3_bucket) == []
    client = s3_bucket.server.client()  # type: ignore[attr-defined]
    uploads = client.list_multipart_uploads(Bucket=s3_bucket.bucket).get("Uploads", [])  # type: ignore[attr-defined]
    assert len(uploads) == 1  # invisible, but billed until aborted
    # (moto dates every upload 2010-11-10, so "young" here means younger than that)
    young = time.time() - time.mktime((2010, 11, 1, 0, 0, 0, 0, 0, 0))
    assert store.sweep_temp(older_than=young) == 0  # kept: may be a live writer's
    assert store.sweep_temp(older_than=0) == 1
    assert not client.list_multipart_uploads(Bucket=s3_bucket.bucket).get("Uploads")  # type: ignore[attr-defined]


def test_two_processes_putting_the_same_blob_both_succeed(s3_bucket: object,
                                                         tmp_path: Path) -> None:
    big = _big_file(tmp_path / "same.bin", 20)

    def slow_parts(method: str, path: str) -> float:
        return 0.1 if "partNumber=" in path else 0.0

    with FaultProxy(s3_bucket.server.endpoint, delay=slow_parts) as proxy:  # type: ignore[attr-defined]
        procs = [subprocess.Popen([sys.executable, "-c", PUT_SCRIPT, s3_bucket.url, str(big)],  # type: ignore[attr-defined]
                                  env=_env(s3_bucket, proxy.endpoint), stdout=subprocess.PIPE,
                                  text=True, start_new_session=True) for _ in range(2)]
        outs = [p.communicate(timeout=120)[0].split() for p in procs]
        uploads = {p for m, p, _ in proxy.seen if m == "POST" and p.endswith("?uploads")}
    assert all(p.returncode == 0 for p in procs)
    h = hash_file(big)
    assert outs == [[h, str(20 << 20)]] * 2
    assert len(uploads) == 1 or len([1 for m, p, _ in proxy.seen  # both uploaded, or one
                                     if m == "POST" and "uploads" in p]) == 2  # reused it
    store = _store(s3_bucket, cache_size=0)
    assert _keys(s3_bucket) == [f"ws/blobs/{h[:2]}/{h[2:]}"] and store.verify(h)


@pytest.mark.parametrize("status,code", [(503, "SlowDown"), (500, "InternalError")])
def test_throttling_and_transient_errors_are_retried(s3_bucket: object, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     status: int, code: str) -> None:
    with FaultProxy(s3_bucket.server.endpoint, rule=fail_first(2, status, code)) as proxy:  # type: ignore[attr-defined]
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", proxy.endpoint)
        store = _store(s3_bucket, cache_size=0)
        h, _ = store.put_bytes(b"retried put")
        assert proxy.statuses()[:2] == [status, status] and 200 in proxy.statuses()
        proxy.rule = fail_first(2, status, code, when=lambda m, p: m == "GET")
        assert store.get_bytes(h, verify=True) == b"retried put"
        assert proxy.statuses().count(status) == 4


def test_retries_are_bounded_by_the_standard_aws_setting(s3_bucket: object,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    with FaultProxy(s3_bucket.server.endpoint, rule=fail_first(100, 503, "SlowDown")) as proxy:  # type: ignore[attr-defined]
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", proxy.endpoint)
        monkeypatch.setenv("AWS_MAX_ATTEMPTS", "2")
        with pytest.raises(Exception, match="Service Unavailable|SlowDown"):
            _store(s3_bucket, cache_size=0).put_bytes(b"never")
        assert len(proxy.seen) == 2


def test_access_denied_fails_at_once_naming_the_bucket_and_never_the_secret(
        s3_bucket: object, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    secret = FAKE_CREDENTIALS["AWS_SECRET_ACCESS_KEY"]
    caplog.set_level(logging.DEBUG)  # botocore's and s3fs's debug logs included
    with FaultProxy(s3_bucket.server.endpoint,  # type: ignore[attr-defined]
                    rule=lambda m, p, n: (403, "AccessDenied")) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", proxy.endpoint)
        store = _store(s3_bucket, cache_size=0)
        t0 = time.monotonic()
        with pytest.raises(ConfigError) as info:
            store.put_bytes(b"denied")
        assert time.monotonic() - t0 < 5 and len(proxy.seen) <= 2  # no retries of a 403
        with pytest.raises(ConfigError, match="refused to read"):  # a HEAD's bare 403 too
            store.exists("0" * 64)
    msg = str(info.value)
    assert s3_bucket.bucket in msg and "credentials" in msg and proxy.endpoint in msg  # type: ignore[attr-defined]
    assert secret not in msg and secret not in caplog.text
    assert caplog.records  # the debug logs were captured, and hold no secret


def test_credentials_in_the_url_are_refused_without_echoing_them(s3_bucket: object) -> None:
    with pytest.raises(ConfigError, match="standard AWS chain") as info:
        open_artifact_store(f"s3://AKIAX:hunter2secret@{s3_bucket.bucket}/ws")  # type: ignore[attr-defined]
    assert "hunter2secret" not in str(info.value)


def test_a_missing_bucket_is_a_clear_error(s3_bucket: object) -> None:
    store = open_artifact_store("s3://no-such-bucket-here/ws", cache_size=0)
    with pytest.raises(ConfigError, match="no-such-bucket-here.*does not exist"):
        store.put_bytes(b"x")


def test_a_reused_old_blob_is_touched_so_gc_sees_it_young(
        s3_bucket: object, monkeypatch: pytest.MonkeyPatch) -> None:
    import reprise.store._s3 as s3mod

    store = _store(s3_bucket, cache_size=0)
    h, _ = store.put_bytes(b"old blob")
    assert _keys(s3_bucket) == [f"ws/blobs/{h[:2]}/{h[2:]}"]
    monkeypatch.setattr(s3mod, "_TOUCH_AFTER", -1.0)  # as if the blob were old
    store.put_bytes(b"old blob")
    assert f"ws/touch/{h[:2]}/{h[2:]}" in _keys(s3_bucket)
    assert store.mtime(h) >= time.time() - 60
    store.delete(h)
    assert _keys(s3_bucket) == []


def test_an_unreachable_endpoint_is_a_clear_error(s3_bucket: object,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from reprise.core.errors import StoreError

    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9")  # discard: nothing there
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    with pytest.raises(StoreError, match=r"Cannot reach the S3 endpoint http://127.0.0.1:9"):
        _store(s3_bucket, cache_size=0).exists("0" * 64)


def test_threads_filling_the_cache_at_once_all_read_the_right_bytes(
        s3_bucket: object) -> None:
    from concurrent.futures import ThreadPoolExecutor

    writer = _store(s3_bucket, cache_size=0)
    data = os.urandom(3 << 20)
    h, _ = writer.put_bytes(data)
    reader = _store(s3_bucket)
    with ThreadPoolExecutor(6) as pool:
        got = list(pool.map(lambda _: reader.get_bytes(h, verify=True), range(6)))
    assert all(g == data for g in got)
    cache = reader.cache
    assert cache is not None and [p for _, _, p in cache.entries()] == [cache.path(h)]
    assert not list((cache.root / "tmp").iterdir())


def test_a_server_without_conditional_writes_gets_a_head_then_a_put(
        s3_bucket: object, monkeypatch: pytest.MonkeyPatch) -> None:
    rule = fail_first(1, 501, "NotImplemented", when=lambda m, p: m == "PUT")
    with FaultProxy(s3_bucket.server.endpoint, rule=rule) as proxy:  # type: ignore[attr-defined]
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", proxy.endpoint)
        store = _store(s3_bucket, cache_size=0)
        h, _ = store.put_bytes(b"no If-None-Match here")
        assert not store._conditional
        assert [(m, s) for m, _, s in proxy.seen] == [("PUT", 501), ("HEAD", 404), ("PUT", 200)]
        assert store.get_bytes(h, verify=True) == b"no If-None-Match here"


def test_a_forked_child_uses_the_store_its_parent_opened(s3_bucket: object) -> None:
    import multiprocessing

    store = _store(s3_bucket, cache_size=0)
    h, _ = store.put_bytes(b"from the parent")  # the parent's client and loop exist now
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as pool:
        got = pool.apply_async(store.get_bytes, (h,)).get(timeout=60)
    assert got == b"from the parent"


def test_bad_urls_and_settings_are_config_errors(s3_bucket: object,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="s3://bucket/prefix") as info:
        open_artifact_store("s3://bucket/p?X-Amz-Security-Token=tok3n")
    assert "tok3n" not in str(info.value)
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "many")
    with pytest.raises(ConfigError, match="AWS_MAX_ATTEMPTS"):
        _store(s3_bucket).exists("0" * 64)


def test_the_s3_store_is_public_api_as_the_other_artifact_stores() -> None:
    """reprise.store exports it beside LocalArtifactStore and FsspecArtifactStore, loaded
    on first use (the lean-import test checks `import reprise.store` loads no s3fs)."""
    import reprise.store

    assert "S3ArtifactStore" in reprise.store.__all__
    assert reprise.store.S3ArtifactStore is S3ArtifactStore


def test_a_throwaway_get_is_one_get_and_no_fsync_and_a_durable_one_still_fsyncs(
        s3_bucket: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = os.urandom(200_000)
    h, _ = _store(s3_bucket, cache_size=0).put_bytes(data)
    with FaultProxy(s3_bucket.server.endpoint) as proxy:  # type: ignore[attr-defined]
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", proxy.endpoint)
        store = _store(s3_bucket)
        assert store.cache is not None
        synced = count_fsyncs(monkeypatch)
        out = store.copy_to(h, tmp_path / "a.bin", verify=True, durable=False)
        assert out.read_bytes() == data and synced == []
        assert [m for m, _, _ in proxy.seen] == ["GET"]
        assert store.cache.path(h).read_bytes() == data  # filled on the way
        assert os.stat(out).st_ino != os.stat(store.cache.path(h)).st_ino  # a copy
        store.cache.discard(h)
        assert store.copy_to(h, tmp_path / "b.bin", verify=True).read_bytes() == data
        assert len(synced) == 1 and len(proxy.seen) == 2  # durable: still its fsync
        assert store.copy_to(h, tmp_path / "c.bin", verify=True).read_bytes() == data
        assert len(synced) == 2 and len(proxy.seen) == 2  # a durable hit too
        assert store.copy_to(h, tmp_path / "d.bin", durable=False).read_bytes() == data
        assert len(synced) == 2 and len(proxy.seen) == 2  # a throwaway hit: none
    assert _temps(tmp_path) == []


def test_a_load_links_the_read_only_cached_copy_and_cannot_change_it(
        s3_bucket: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from reprise.store._materializer import _verified_file

    data = os.urandom(300_000)
    h, _ = _store(s3_bucket, cache_size=0).put_bytes(data)
    with FaultProxy(s3_bucket.server.endpoint) as proxy:  # type: ignore[attr-defined]
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", proxy.endpoint)
        store = _store(s3_bucket)
        assert store.cache is not None
        synced = count_fsyncs(monkeypatch)
        with _verified_file(store, h) as path:  # a miss: into the cache alone, linked
            assert path.read_bytes() == data
            entry = store.cache.path(h)
            assert os.stat(path).st_ino == os.stat(entry).st_ino
            assert os.stat(path).st_mode & 0o222 == 0  # read-only: the loader cannot write
            if os.geteuid() != 0:  # root writes through any mode
                with pytest.raises(PermissionError):
                    open(path, "r+b")  # noqa: SIM115
            store.cache.discard(h)  # evicted while loaded: the link keeps the bytes
            assert path.read_bytes() == data
        assert [m for m, _, _ in proxy.seen] == ["GET"] and synced == []
        out = store.copy_to(h, tmp_path / "a.bin", verify=True, durable=False, link=True)
        assert out.read_bytes() == data and len(proxy.seen) == 2  # fetched again
        with _verified_file(store, h) as path:  # a hit: linked, hashed, no request
            assert path.read_bytes() == data
            assert os.stat(path).st_ino == os.stat(store.cache.path(h)).st_ino
        assert len(proxy.seen) == 2 and synced == []
        assert store.cache.path(h).read_bytes() == data  # unchanged by the loads
        with pytest.raises(ValueError, match="durable=False"):
            store.copy_to(h, tmp_path / "b.bin", verify=True, link=True)
    assert _temps(tmp_path) == []


def test_a_damaged_cached_copy_is_not_linked_by_a_load(s3_bucket: object,
                                                       tmp_path: Path) -> None:
    store = _store(s3_bucket)
    data = os.urandom(100_000)
    h, _ = store.put_bytes(data)
    assert store.cache is not None
    cached = store.cache.path(h)
    for damaged in (bytes(len(data)), b""):  # what a power loss may leave of an entry
        os.chmod(cached, 0o644)
        cached.write_bytes(damaged)
        os.chmod(cached, 0o444)  # read-only as the cache makes it: the link path is taken
        out = store.copy_to(h, tmp_path / "a.bin", verify=True, durable=False, link=True)
        assert out.read_bytes() == data and cached.read_bytes() == data
    os.chmod(cached, 0o644)  # a writable entry is copied, never linked
    out = store.copy_to(h, tmp_path / "b.bin", verify=True, durable=False, link=True)
    assert out.read_bytes() == data and os.stat(out).st_ino != os.stat(cached).st_ino
    assert _temps(tmp_path) == []


def test_a_corrupt_body_is_refused_on_the_load_path(s3_bucket: object,
                                                    tmp_path: Path) -> None:
    from reprise.store._materializer import _verified_file

    data = os.urandom(300_000)
    h, _ = _store(s3_bucket, cache_size=0).put_bytes(data)
    s3_bucket.server.client().put_object(  # type: ignore[attr-defined]
        Bucket=s3_bucket.bucket, Key=f"ws/blobs/{h[:2]}/{h[2:]}",  # type: ignore[attr-defined]
        Body=bytes(len(data)))  # the right size, the wrong bytes
    store = _store(s3_bucket)
    assert store.cache is not None
    with pytest.raises(IntegrityError, match="corrupt"), _verified_file(store, h):
        pytest.fail("a corrupt blob was loaded")
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(IntegrityError, match="corrupt"):
        store.copy_to(h, out / "x.bin", durable=False, link=True)
    assert list(out.iterdir()) == []
    assert store.cache.lookup(h) is None and _temps(store.cache.root) == []


def test_a_load_into_another_filesystem_is_a_copy(s3_bucket: object, tmp_path: Path) -> None:
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("no second filesystem to load into")
    import tempfile

    store = _store(s3_bucket)
    data = os.urandom(100_000)
    h, _ = _store(s3_bucket, cache_size=0).put_bytes(data)
    assert store.cache is not None
    with tempfile.TemporaryDirectory(dir=shm) as folder:
        for name in ("miss.bin", "hit.bin"):  # a GET, then the cached copy
            out = store.copy_to(h, Path(folder) / name, verify=True, durable=False,
                                link=True)
            assert out.read_bytes() == data
            assert os.stat(out).st_dev != os.stat(store.cache.path(h)).st_dev
        assert _temps(Path(folder)) == []
