from __future__ import annotations

import time

import pytest
import sqlalchemy as sa

from reprise.core import new_id
from reprise.store import JournalBatch, SqlMetadataStore
from reprise.store._schema import HEAD_REVISION, metadata
from reprise.store._sql import _make_engine, upgrade_database


def test_first_schema_upgrades_to_head_keeping_data(store_url: str) -> None:
    engine = _make_engine(store_url)
    upgrade_database(engine, "0001_tracking")
    rid = new_id()
    with engine.begin() as conn:
        conn.execute(sa.text(
            "INSERT INTO runs (id, kind, name, status, started_at, journal_offset) "
            "VALUES (:id, 'run', 'old', 'finished', :t, 0)"), {"id": rid, "t": time.time()})
        assert not sa.inspect(conn).has_table("step_runs")
    engine.dispose()

    store = SqlMetadataStore(store_url)  # opening upgrades to head
    assert store.get_run(rid).name == "old"
    with store.engine.connect() as conn:
        insp = sa.inspect(conn)
        rev = conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar()
        assert rev == HEAD_REVISION
        for table in metadata.sorted_tables:  # the live schema matches the migrated one
            assert insp.has_table(table.name), table.name
            cols = {c["name"] for c in insp.get_columns(table.name)}
            assert cols == {c.name for c in table.columns}, table.name
            indexes = {i["name"] for i in insp.get_indexes(table.name)}
            assert {i.name for i in table.indexes} <= indexes, table.name
    rid2 = new_id()
    assert store.ingest(rid2, 0, JournalBatch(header={"id": rid2, "name": "n",
                                                      "started_at": 1.0}, end_offset=1))
    store.close()


def test_registry_integrity_revision_keeps_numbers_and_drops_dangling_aliases(
        store_url: str) -> None:
    """0005: the high-water mark counts versions deleted before it (from the audit log);
    an alias left on a deleted version (the old promote/delete race) cannot stay under
    the new foreign key."""
    from reprise.core._types import ModelVersionRecord

    engine = _make_engine(store_url)
    upgrade_database(engine, "0004_registry")
    h, now = "a" * 64, time.time()
    with engine.begin() as conn:
        run = conn.execute
        for a in (h, "b" * 64):
            run(sa.text("INSERT INTO artifacts (hash, size, kind, materializer, meta, "
                        "created_at) VALUES (:h, 1, 'object', 'x', '{}', :t)"),
                {"h": a, "t": now})
        run(sa.text("INSERT INTO models (name, created_at) VALUES ('m', :t)"), {"t": now})
        for v in (1, 2):
            run(sa.text("INSERT INTO model_versions (name, version, package_hash, status, "
                        "created_at, meta) VALUES ('m', :v, :h, 'ready', :t, '{}')"),
                {"v": v, "h": h, "t": now})
        for seq, v in ((1, 1), (2, 2), (3, 3)):  # version 3 was registered, then deleted
            run(sa.text("INSERT INTO audit_events (seq, time, actor, action, subject, "
                        "payload, prev_hash, hash) VALUES (:s, :t, 'a', 'register', 'm', "
                        ":p, :ph, :hh)"),
                {"s": seq, "t": now, "p": f'{{"version": {v}}}', "ph": str(seq) * 64,
                 "hh": str(seq + 1) * 64})
        for alias, v in (("production", 2), ("canary", 3)):
            run(sa.text("INSERT INTO aliases (name, alias, version, updated_at) "
                        "VALUES ('m', :a, :v, :t)"), {"a": alias, "v": v, "t": now})
            run(sa.text("INSERT INTO alias_history (name, alias, version, time) "
                        "VALUES ('m', :a, :v, :t)"), {"a": alias, "v": v, "t": now})
    engine.dispose()

    store = SqlMetadataStore(store_url)
    assert store.get_aliases("m") == {"production": 2}
    assert store.alias_history("m", "canary") == []
    rec = ModelVersionRecord(name="m", version=0, package_hash="b" * 64, run_id=None,
                             status="ready")
    other = ModelVersionRecord(name="n", version=0, package_hash=h, run_id=None,
                               status="ready")
    assert store.add_model_version(other, ("a", "register", "n", {}))[0].version == 1
    store.delete_model_version("m", 1, ("a", "delete", "m:1", {}))
    assert store.add_model_version(rec, ("a", "register", "m", {}))[0].version == 4
    with pytest.raises(sa.exc.IntegrityError), store.engine.begin() as conn:
        conn.execute(sa.text("UPDATE aliases SET version = 9 WHERE alias = 'production'"))
    store.close()


@pytest.mark.postgres
def test_run_prefix_and_latest_metrics_use_indexes_on_postgresql(pg_url: str) -> None:
    """0010's pattern index serves ``runs show PREFIX``; the last points of ``runs list``
    are index lookups, never a scan of the metrics table (bench/bench_scale.py)."""
    from reprise.store._rows import latest_metrics_sql

    store = SqlMetadataStore(pg_url)
    ids = [new_id() for _ in range(20)]
    for rid in ids:
        batch = JournalBatch(header={"id": rid, "name": "n", "started_at": 1.0},
                             metrics=[(k, st, float(st), 1.0) for k in ("a", "b")
                                      for st in range(100)], end_offset=1)
        assert store.ingest(rid, 0, batch)
    with store.engine.connect() as conn:
        conn.exec_driver_sql("ANALYZE")
        conn.exec_driver_sql("SET enable_seqscan = off")  # is the index usable at all?
        plan = "\n".join(r[0] for r in conn.exec_driver_sql(
            "EXPLAIN SELECT * FROM runs WHERE id LIKE %(p)s LIMIT 2", {"p": ids[3][:12] + "%"}))
        assert "ix_runs_id_pattern" in plan, plan
        conn.exec_driver_sql("SET enable_seqscan = on")
        params = {f"r{i}": rid for i, rid in enumerate(ids[:5])}
        plan = "\n".join(r[0] for r in conn.execute(sa.text(
            "EXPLAIN ANALYZE " + latest_metrics_sql(5, lateral=True)), params))
        assert "Seq Scan on metrics" not in plan and "Hash Join" not in plan, plan
    assert store.get_run(ids[3][:12]).id == ids[3]
    latest = store.latest_metrics(ids[:2])
    assert {k: (p.step, p.value) for k, p in latest[ids[0]].items()} == {
        "a": (99, 99.0), "b": (99, 99.0)}
    store.close()
