"""The request log's index and feedback on both metadata backends: chunks by model,
version and time range; two servers writing at once never clash; prune by age and size
removes rows then blobs; feedback upserts."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import reprise
from reprise.store._request_log import prune_request_log, read_request_chunk, write_request_chunk


@pytest.fixture
def ws(tmp_path: Path, store_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("REPRISE_STORE_URL", store_url)
    w = reprise.init(tmp_path / "ws")
    yield w
    w.close()


def _write(ws: Any, *, name: str = "churn", version: int = 1, at: float = 1000.0,
           rows: int = 3, server: str = "s1", tag: str = "") -> Any:
    table = pa.table({"request_id": [f"{server}{tag}-{at}-{i}" for i in range(rows)],
                      "row": pa.array([0] * rows, pa.int32()),
                      "time": [at + i for i in range(rows)], "input.x": list(range(rows))})
    return write_request_chunk(ws, table, name=name, version=version, server=server,
                               first_at=at, last_at=at + rows - 1, requests=rows)


def test_chunks_are_listed_by_model_version_and_time_and_read_back_whole(ws: Any) -> None:
    a = _write(ws, at=1000)
    b = _write(ws, at=2000, version=2)
    _write(ws, name="other", at=1500)
    store = ws.metadata
    assert [c.id for c in store.list_request_chunks("churn")] == [a.id, b.id]
    assert [c.id for c in store.list_request_chunks("churn", version=2)] == [b.id]
    assert [c.id for c in store.list_request_chunks("churn", start=1001, end=1999)] == [a.id]
    assert [c.id for c in store.list_request_chunks("churn", start=1003)] == [b.id]
    assert store.list_request_chunks("churn", end=999) == []
    table = read_request_chunk(ws, a)
    assert table.num_rows == a.rows == 3 and table["input.x"].to_pylist() == [0, 1, 2]
    assert ws.artifacts.exists(a.artifact_hash)
    assert a.artifact_hash in store.referenced_artifact_hashes()  # gc keeps it
    assert ws.gc().removed == []


def test_two_servers_writing_at_once_never_clash(ws: Any) -> None:
    errors: list[BaseException] = []

    def server(name: str) -> None:
        try:
            for i in range(10):
                _write(ws, at=1000.0 + i, server=name)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    assert ws.metadata is not None  # opened once here, not by both threads at once
    threads = [threading.Thread(target=server, args=(f"s{k}",)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    chunks = ws.metadata.list_request_chunks("churn")
    assert len(chunks) == 20 and len({c.id for c in chunks}) == 20
    assert len({c.artifact_hash for c in chunks}) == 20
    assert {c.server for c in chunks} == {"s0", "s1"}


def test_prune_by_age_then_size_removes_rows_then_blobs(ws: Any) -> None:
    now = time.time()
    old = _write(ws, at=now - 40 * 86400)
    mid = [_write(ws, at=now - 3600 * (5 - i), rows=50) for i in range(4)]
    other = _write(ws, name="other", at=now - 40 * 86400, tag="o")
    report = prune_request_log(ws, name="churn", max_age_s=30 * 86400, now=now)
    assert report.chunks == [old.id] and report.rows == 3
    assert not ws.artifacts.exists(old.artifact_hash)
    assert other in ws.metadata.list_request_chunks("other")  # another model's: untouched
    keep = mid[-1].size + mid[-2].size
    report = prune_request_log(ws, name="churn", max_bytes=keep, now=now)
    assert sorted(report.chunks) == sorted([mid[0].id, mid[1].id])
    assert report.bytes_freed == mid[0].size + mid[1].size
    assert [c.id for c in ws.metadata.list_request_chunks("churn")] == [mid[2].id, mid[3].id]
    assert prune_request_log(ws, max_age_s=None, max_bytes=None).chunks == []
    assert ws.fsck(verify_hashes=True).ok


def test_feedback_is_upserted_by_model_and_request_id(ws: Any) -> None:
    store = ws.metadata
    assert store.add_feedback("churn", [("r1", "1"), ("r2", '"spam"')], 10.0) == 2
    assert store.add_feedback("churn", [("r1", "0")], 20.0) == 1
    store.add_feedback("other", [("r1", "true")], 30.0)
    assert store.get_feedback("churn") == {"r1": ("0", 20.0), "r2": ('"spam"', 10.0)}
    assert store.get_feedback("churn", ["r2", "nope"]) == {"r2": ('"spam"', 10.0)}
    many = [(f"id-{i}", str(i)) for i in range(1200)]  # more than one IN (...) list
    assert store.add_feedback("bulk", many, 1.0) == 1200
    assert len(store.get_feedback("bulk", [r for r, _ in many])) == 1200
