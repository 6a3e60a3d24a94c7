from __future__ import annotations

import time

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
    rid2 = new_id()
    assert store.ingest(rid2, 0, JournalBatch(header={"id": rid2, "name": "n",
                                                      "started_at": 1.0}, end_offset=1))
    store.close()
