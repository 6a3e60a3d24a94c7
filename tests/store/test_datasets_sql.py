"""Dataset version rows on both metadata backends: numbering, dedup, concurrency, schemas."""

from __future__ import annotations

import threading
import time

from reprise.core._types import ArtifactRecord, DatasetRecord
from reprise.store._sql import SqlMetadataStore


def _record(store: SqlMetadataStore, h: str) -> DatasetRecord:
    store.put_artifact(ArtifactRecord(hash=h, size=1, kind="file", materializer="file",
                                      created=time.time()))
    return DatasetRecord(name="d", version=0, artifact_hash=h, format="csv", rows=1,
                         schema={"a": "int64"}, profile={"rows": 1}, meta={"source": "x"})


def test_versions_number_up_and_same_bytes_return_the_newest(store_url: str) -> None:
    store = SqlMetadataStore(store_url)
    a, b = "a" * 64, "b" * 64
    first, created = store.add_dataset_version(_record(store, a))
    assert created and first.version == 1 and first.schema == {"a": "int64"}
    again, created = store.add_dataset_version(_record(store, a))
    assert not created and again.version == 1
    second, _ = store.add_dataset_version(_record(store, b))
    back, created = store.add_dataset_version(_record(store, a))  # reverting is a new version
    assert second.version == 2 and created and back.version == 3
    assert [r.version for r in store.list_dataset_versions("d")] == [1, 2, 3]
    assert store.get_dataset_version("d").version == 3  # type: ignore[union-attr]
    assert store.get_dataset_version("d", 2).artifact_hash == b  # type: ignore[union-attr]
    assert store.get_dataset_version("d", 9) is None and store.get_dataset_version("x") is None
    store.close()


def test_concurrent_adds_get_distinct_consecutive_versions(store_url: str) -> None:
    stores = [SqlMetadataStore(store_url) for _ in range(4)]
    hashes = [f"{i:x}" * 64 for i in range(1, 9)]
    records = [_record(stores[0], h[:64]) for h in hashes]
    errors: list[BaseException] = []

    def add(i: int) -> None:
        try:
            stores[i % 4].add_dataset_version(records[i])
        except BaseException as exc:  # noqa: BLE001 - surfaced by the assert below
            errors.append(exc)

    threads = [threading.Thread(target=add, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    rows = stores[0].list_dataset_versions("d")
    assert [r.version for r in rows] == list(range(1, 9))
    assert sorted(r.artifact_hash for r in rows) == sorted(h[:64] for h in hashes)
    for s in stores:
        s.close()


def test_schema_attachment_replaces(store_url: str) -> None:
    store = SqlMetadataStore(store_url)
    assert store.get_dataset_schema("d") is None
    store.set_dataset_schema("d", '{"columns": {}}', None)
    store.set_dataset_schema("d", None, "schemas.py:schema")
    assert store.get_dataset_schema("d") == (None, "schemas.py:schema")
    store.close()
