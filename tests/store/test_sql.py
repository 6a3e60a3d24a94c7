"""Conformance suite for the metadata store, run on SQLite and PostgreSQL."""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest

from reprise.core import ArtifactRecord, RunStatus, new_id
from reprise.core.errors import (
    AmbiguousIdError,
    ArtifactNotFoundError,
    ConfigError,
    EnvironmentNotFoundError,
    RunNotFoundError,
)
from reprise.store import JournalBatch, RunFilter, SqlMetadataStore


def _header(run_id: str, name: str = "r", parent: str | None = None) -> dict[str, object]:
    return {"id": run_id, "name": name, "kind": "run", "started_at": time.time(),
            "parent_id": parent, "env_hash": None}


@pytest.fixture
def store(store_url: str) -> SqlMetadataStore:
    s = SqlMetadataStore(store_url)
    yield s
    s.close()


def _new_run(store: SqlMetadataStore, name: str = "r", **kw: object) -> str:
    rid = new_id()
    batch = JournalBatch(header=_header(rid, name, **kw), end_offset=10)  # type: ignore[arg-type]
    assert store.ingest(rid, 0, batch)
    return rid


class TestIngestion:
    def test_batches_apply_once_in_order(self, store: SqlMetadataStore) -> None:
        rid = _new_run(store)
        b1 = JournalBatch(metrics=[("loss", 0, 1.0, 1.0), ("loss", 1, 0.5, 2.0)], end_offset=20)
        assert store.ingest(rid, 10, b1)
        assert not store.ingest(rid, 10, b1)  # replay after a crash: ignored
        assert store.journal_offset(rid) == 20
        assert [p.value for p in store.get_metrics(rid, "loss")] == [1.0, 0.5]

    def test_params_tags_artifacts_environment_end(self, store: SqlMetadataStore) -> None:
        rid = new_id()
        env = {"hash": "e" * 64, "fingerprint": {"python": {"version": "3.11"}}}
        header = {**_header(rid), "env_hash": "e" * 64}
        art = {"name": "model.npy", "hash": "a" * 64, "size": 3, "kind": "numpy",
               "materializer": "numpy", "meta": {"shape": [3]}, "created": 1.0}
        batch = JournalBatch(header=header, params={"lr": 0.1, "layers": [1, 2]},
                             tags={"team": "x"}, environments=[env], artifacts=[art],
                             metrics=[("acc", 0, math.nan, 1.0)],
                             end={"status": "finished", "ended_at": time.time(),
                                  "energy_joules": 1.5, "energy_source": "estimate"},
                             end_offset=99)
        assert store.ingest(rid, 0, batch)
        run = store.get_run(rid)
        assert run.status is RunStatus.FINISHED
        assert run.params == {"lr": 0.1, "layers": [1, 2]}
        assert run.tags == {"team": "x"}
        assert run.energy_joules == 1.5
        assert store.get_environment("e" * 64) == env["fingerprint"]
        assert math.isnan(store.get_metrics(rid)[0].value)
        assert store.run_artifacts(rid)["model.npy"].meta == {"shape": [3]}
        assert "a" * 64 in store.referenced_artifact_hashes()

    def test_metric_values_and_keys_round_trip(self, store: SqlMetadataStore) -> None:
        """Whatever the insert path (COPY on PostgreSQL): special floats, keys with
        backslashes, quotes, commas and non-ASCII text, huge steps, exact doubles."""
        rid = _new_run(store)
        keys = ["a\\b", 'q"uote,comma', "val/loss \u00e9\u6f22", "N", "\\N"]
        values = [math.inf, -math.inf, 0.1 + 0.2, -0.0, 1e-308, 5e-324, math.nan]
        pts = [(k, 2**62 + i, v, 1.5 + i) for k in keys for i, v in enumerate(values)]
        assert store.ingest(rid, 10, JournalBatch(metrics=pts, end_offset=20))
        got = store.get_metrics(rid)
        assert len(got) == len(pts)
        by = {(p.key, p.step): p for p in got}
        for k, st, v, ts in pts:
            p = by[(k, st)]
            assert (math.isnan(p.value) if math.isnan(v) else p.value == v), (k, v, p.value)
            assert p.timestamp == ts

    def test_terminal_status_is_final(self, store: SqlMetadataStore) -> None:
        rid = _new_run(store)
        store.mark_run_ended(rid, RunStatus.KILLED, time.time(), "killed")
        store.mark_run_ended(rid, RunStatus.FINISHED, time.time())
        assert store.get_run(rid).status is RunStatus.KILLED
        assert rid not in store.running_run_ids()


class TestRuns:
    def test_prefix_lookup_and_ambiguity(self, store: SqlMetadataStore) -> None:
        a = new_id(now_ms=1_000_000)
        b = new_id(now_ms=1_000_001)
        for rid in (a, b):
            assert store.ingest(rid, 0, JournalBatch(header=_header(rid), end_offset=1))
        assert store.get_run(a[:12]).id == a
        with pytest.raises(AmbiguousIdError):
            store.get_run(a[:5])
        with pytest.raises(RunNotFoundError, match="runs list"):
            store.get_run("zzzz")
        with pytest.raises(RunNotFoundError):
            store.get_run("%")  # LIKE wildcards are escaped

    def test_run_ids_around_a_range(self, store: SqlMetadataStore) -> None:
        ids = sorted(new_id(now_ms=1_000_000 + i) for i in range(6))
        for rid in ids:
            assert store.ingest(rid, 0, JournalBatch(header=_header(rid), end_offset=1))
        assert store.run_ids_around(ids[2], ids[3]) == ids[1:5]  # one neighbour each side
        assert store.run_ids_around(ids[0], ids[5]) == ids
        assert store.run_ids_around(ids[4], ids[4]) == ids[3:6]

    def test_filters_and_metric_ordering(self, store: SqlMetadataStore) -> None:
        ids = []
        for i, acc in enumerate([0.7, 0.9, 0.8]):
            rid = _new_run(store, name="even" if i % 2 == 0 else "odd")
            store.ingest(rid, 10, JournalBatch(metrics=[("acc", 0, 0.0, 1.0), ("acc", 1, acc, 2.0)],
                                               tags={"i": str(i)}, end_offset=20))
            ids.append(rid)
        child = _new_run(store, name="child", parent=ids[0])
        assert [r.id for r in store.list_runs()] == [child, *reversed(ids)]
        assert [r.id for r in store.list_runs(RunFilter(top_level=True))] == list(reversed(ids))
        assert [r.id for r in store.list_runs(RunFilter(name="even"))] == [ids[2], ids[0]]
        assert [r.id for r in store.list_runs(RunFilter(tags={"i": "1"}))] == [ids[1]]
        by_acc = store.list_runs(RunFilter(order_by_metric="acc"))
        assert [r.id for r in by_acc] == [ids[1], ids[2], ids[0]]
        asc = store.list_runs(RunFilter(order_by_metric="acc", ascending=True, limit=1))
        assert [r.id for r in asc] == [ids[0]]
        assert [r.id for r in store.list_runs(RunFilter(parent_id=ids[0]))] == [child]
        latest = store.latest_metrics(ids)
        assert latest[ids[1]]["acc"].value == 0.9


class TestArtifactsAndEnvironments:
    def test_artifact_records(self, store: SqlMetadataStore) -> None:
        rec = ArtifactRecord("b" * 64, 10, "bytes", "bytes", {"x": 1}, 5.0)
        store.put_artifact(rec)
        store.put_artifact(rec)  # idempotent
        assert store.get_artifact("b" * 64) == rec
        assert [a.hash for a in store.list_artifacts()] == ["b" * 64]
        store.delete_artifacts(["b" * 64])
        with pytest.raises(ArtifactNotFoundError):
            store.get_artifact("b" * 64)

    def test_unknown_environment(self, store: SqlMetadataStore) -> None:
        with pytest.raises(EnvironmentNotFoundError):
            store.get_environment("f" * 64)


@pytest.mark.parametrize("url", ["not a url", "nosuchdb://x/y", "postgresql://u@127.0.0.1:1/x"])
def test_bad_store_url_is_a_config_error(url: str) -> None:
    with pytest.raises(ConfigError, match="store"):
        SqlMetadataStore(url)


@pytest.mark.parametrize("url", ["postgresql://u:Zq9SECRETpw@127.0.0.1:1/x",
                                 "postgresql://u:Zq9SECRETpw@127.0.0.1:notaport/x",
                                 "postgresql://u@127.0.0.1:1/x?password=Zq9SECRETpw",
                                 "nosuchdb://u:Zq9SECRETpw@host/y"])
def test_a_store_url_error_never_shows_its_password(url: str) -> None:
    """The message names the database (user, host, port) but not the password; a port
    that is not a number is that ConfigError too (it was a ValueError traceback)."""
    with pytest.raises(ConfigError, match="store") as err:
        SqlMetadataStore(url)
    assert "Zq9SECRETpw" not in str(err.value)
    assert "127.0.0.1" in str(err.value) or "host" in str(err.value)


@pytest.mark.parametrize("port", ["1", "notaport"])
def test_a_study_storage_error_never_shows_its_password(port: str) -> None:
    """The tuner's Optuna storage on PostgreSQL (nothing listens on port 1)."""
    pytest.importorskip("optuna")
    from reprise.core.errors import UserError
    from reprise.tune._storage import _postgres_url, open_storage

    url = _postgres_url(f"postgresql://u:Zq9SECRETpw@127.0.0.1:{port}/x")
    with pytest.raises((ConfigError, UserError)) as err:
        open_storage(url)
    assert "Zq9SECRETpw" not in str(err.value) and f"127.0.0.1:{port}" in str(err.value)


def test_in_memory_sqlite_backend() -> None:
    store = SqlMetadataStore("sqlite://")
    rid = _new_run(store)
    assert store.get_run(rid).status is RunStatus.RUNNING


def test_sqlite_uses_wal(tmp_path: Path) -> None:
    store = SqlMetadataStore(f"sqlite:///{tmp_path / 'm.db'}")
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
