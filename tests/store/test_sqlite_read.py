"""The read-only SQLite reader answers exactly as the SQLAlchemy store, and
``Workspace.reader`` uses it only when nothing waits to be ingested; the latest-metric
query (shared by both backends) reads a run's last points by index, not all of them."""

from __future__ import annotations

import math
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from reprise.core import ArtifactRecord, RunStatus, new_id
from reprise.core._types import DatasetRecord, ModelVersionRecord
from reprise.core.errors import AmbiguousIdError, RunNotFoundError
from reprise.store import JournalBatch, RunFilter, SqlMetadataStore
from reprise.store._sqlite_read import SqliteReader, open_reader

ART = {"name": "model.npy", "hash": "a" * 64, "size": 3, "kind": "numpy",
       "materializer": "numpy", "meta": {"shape": [3]}, "created": 1.0}


def _run(store: SqlMetadataStore, name: str, *, parent: str | None = None,
         metrics: list[tuple[str, int, float, float]] | None = None,
         tags: dict[str, str] | None = None, end: bool = True,
         steps: list[dict[str, Any]] | None = None) -> str:
    rid = new_id()
    header = {"id": rid, "name": name, "kind": "run", "started_at": time.time(),
              "parent_id": parent, "git_commit": "c" * 40, "git_dirty": True}
    batch = JournalBatch(header=header, params={"lr": 0.1, "layers": [1, 2]},
                         tags=tags or {"team": "x"}, artifacts=[ART],
                         metrics=metrics or [], steps=steps or [], end_offset=10,
                         end={"status": "finished", "ended_at": time.time() + 1}
                         if end else None)
    assert store.ingest(rid, 0, batch)
    return rid


def _populate(store: SqlMetadataStore) -> list[str]:
    """Runs with metrics that test every rule of "final value": the highest step wins
    over the latest write, the last write wins within a step, NaN stays NaN."""
    a = _run(store, "train", metrics=[("loss", 0, 1.0, 1.0), ("loss", 5, 0.2, 2.0),
                                      ("loss", 3, 0.4, 3.0), ("acc", 1, 0.5, 1.0),
                                      ("acc", 1, 0.7, 2.0), ("f1", 0, math.nan, 1.0)])
    b = _run(store, "train", metrics=[("loss", 0, 0.1, 1.0), ("acc", 0, 0.9, 1.0)],
             tags={"team": "y"}, steps=_steps())
    child = _run(store, "trial", parent=a, metrics=[("loss", 0, 0.3, 1.0)])
    none = _run(store, "empty", end=False)
    store.add_dataset_version(DatasetRecord("d", 1, "a" * 64, "csv", 3, {"x": "int64"},
                                            {"rows": 3}, {"size": 10}))
    store.put_artifact(ArtifactRecord("b" * 64, 11, "bytes", "bytes", {}, 1.0))
    store.add_dataset_version(DatasetRecord("d", 2, "b" * 64, "file", None, None, None,
                                            {"size": 11}))
    store.add_model_version(ModelVersionRecord("m", 1, "a" * 64, a, "ready",
                                               metrics={"gates_passed": True}),
                            ("t", "register", "m:1", {}))
    store.set_alias("m", "production", 1, ("t", "promote", "m:1", {}))
    return [a, b, child, none]


def _steps() -> list[dict[str, Any]]:
    """Two step runs, the second reading the first's output, with details."""
    first, second = new_id(), new_id()
    out = {**ART, "name": "output"}
    return [{"id": first, "step_name": "load", "cache_key": "c" * 64, "status": "executed",
             "started_at": 1.0, "ended_at": 2.0, "duration": 1.0, "seed": 7,
             "details": {"reads": {"files": {"/etc/app.yaml": "d" * 64}}},
             "inputs": [], "outputs": [out]},
            {"id": second, "step_name": "fit", "cache_key": "e" * 64, "status": "cached",
             "reused_from": first, "started_at": 3.0, "ended_at": 3.0, "duration": 0.0,
             "details": {}, "inputs": [{**out, "name": "x", "source": None}],
             "outputs": [{**ART, "name": "model"}]}]


@pytest.fixture
def stores(tmp_path: Path) -> Any:
    url = f"sqlite:///{tmp_path / 'meta.db'}"
    full = SqlMetadataStore(url)
    reader = open_reader(url, tmp_path / "journals")
    assert isinstance(reader, SqliteReader)
    yield full, reader
    reader.close()
    full.close()


def test_reader_answers_as_the_sqlalchemy_store(stores: Any) -> None:
    full, reader = stores
    ids = _populate(full)
    filters = [RunFilter(), RunFilter(top_level=True, limit=2), RunFilter(ascending=True),
               RunFilter(name="train"), RunFilter(parent_id=ids[0]),
               RunFilter(tags={"team": "y"}), RunFilter(status=RunStatus.RUNNING),
               RunFilter(order_by_metric="loss"),
               RunFilter(order_by_metric="loss", ascending=True, limit=1)]
    for flt in filters:
        assert reader.list_runs(flt) == full.list_runs(flt)
    for rid in ids:
        assert reader.get_run(rid[:12]) == full.get_run(rid[:12])
        assert reader.run_artifacts(rid) == full.run_artifacts(rid)
        assert reader.get_step_runs(rid[:12]) == full.get_step_runs(rid[:12])
    steps = reader.get_step_runs(ids[1])
    assert [s["step_name"] for s in steps] == ["load", "fit"]
    assert steps[0]["details"]["reads"]["files"] == {"/etc/app.yaml": "d" * 64}
    assert steps[1]["inputs"] == [{"name": "x", "hash": "a" * 64, "source": None}]
    assert reader.get_run(ids[0]).git_dirty is True
    assert str(reader.latest_metrics(ids)) == str(full.latest_metrics(ids))  # NaN != NaN
    assert reader.list_dataset_versions() == full.list_dataset_versions()
    assert reader.list_dataset_versions("d") == full.list_dataset_versions("d")
    assert reader.list_model_versions() == full.list_model_versions()
    assert reader.get_aliases("m") == full.get_aliases("m") == {"production": 1}
    with pytest.raises(RunNotFoundError):
        reader.get_run("zzzz")
    with pytest.raises(AmbiguousIdError):
        reader.get_run("")


def test_latest_metrics_rules(store_url: str) -> None:
    """On both backends: highest step, then the last written; NaN kept; runs without
    metrics map to {}."""
    store = SqlMetadataStore(store_url)
    try:
        a, b, child, none = _populate(store)
        latest = store.latest_metrics([a, b, child, none])
        assert {k: (p.step, p.value) for k, p in latest[a].items() if k != "f1"} == {
            "loss": (5, 0.2), "acc": (1, 0.7)}
        assert math.isnan(latest[a]["f1"].value)
        assert latest[b]["loss"].value == 0.1 and latest[child]["loss"].value == 0.3
        assert latest[none] == {}
        assert store.latest_metrics([]) == {}
    finally:
        store.close()


def test_latest_metrics_does_not_read_every_point(tmp_path: Path) -> None:
    """The final values of a run with 50,000 points cost about as much as those of a
    run with 50 (counted in SQLite virtual-machine steps, not in seconds)."""
    from sqlalchemy import event

    url = f"sqlite:///{tmp_path / 'meta.db'}"
    store = SqlMetadataStore(url)
    small = _run(store, "s", metrics=[(k, s, 1.0, 1.0) for k in "ab" for s in range(25)])
    big = _run(store, "b", metrics=[(k, s, 1.0, 1.0) for k in "ab" for s in range(25_000)])
    steps = [0]

    def count() -> int:
        steps[0] += 1
        return 0

    store.engine.dispose()
    event.listen(store.engine, "connect",
                 lambda conn, _rec: conn.set_progress_handler(count, 100))

    def cost(rid: str) -> int:
        steps[0] = 0
        store.latest_metrics([rid])
        return steps[0]

    try:
        assert cost(big) < 3 * cost(small) + 20
    finally:
        store.close()


def _workspace(tmp_path: Path) -> Any:
    import reprise

    ws = reprise.init(tmp_path / "ws")
    _ = ws.metadata  # create the database
    ws.close()
    return ws


def test_workspace_reader_is_sqlite_only_when_nothing_is_pending(tmp_path: Path) -> None:
    from reprise.store._journal import JournalWriter
    from reprise.store._workspace import Workspace

    ws = _workspace(tmp_path)
    fresh = Workspace.open(ws.root)
    assert isinstance(fresh.reader, SqliteReader)
    # a live run whose journal the database already holds: still the fast reader
    rid = new_id()
    writer = JournalWriter(fresh.journal_path(rid))
    writer.event("R", {"id": rid, "name": "live", "kind": "run", "started_at": time.time()})
    fresh.metadata  # noqa: B018 - opening it ingests the live journal
    fresh.close()
    live = Workspace.open(ws.root)
    assert isinstance(live.reader, SqliteReader)
    # ... until the run writes more: then the full store, which catches it up
    writer.metric("loss", 0, 0.5, time.time())
    assert live.reader is live.metadata
    assert live.reader.latest_metrics([rid])[rid]["loss"].value == 0.5
    live.close()
    # a dead writer: the full store, whose opening marks the run killed
    writer.close()
    dead = Workspace.open(ws.root)
    assert dead.reader is dead.metadata
    assert dead.reader.get_run(rid).status.value == "killed"
    dead.close()


def test_reader_falls_back_for_old_schema_and_other_urls(tmp_path: Path) -> None:
    ws = _workspace(tmp_path)
    db = ws.config.store_url.removeprefix("sqlite:///")
    con = sqlite3.connect(db)
    con.execute("UPDATE alembic_version SET version_num = '0003_datasets'")
    con.commit()
    con.close()
    assert open_reader(ws.config.store_url, ws.journals_dir) is None
    assert open_reader(f"sqlite:///{tmp_path / 'missing.db'}", ws.journals_dir) is None
    assert not os.path.exists(tmp_path / "missing.db")
    assert open_reader("sqlite://", ws.journals_dir) is None
    assert open_reader("postgresql://u@h/db", ws.journals_dir) is None
