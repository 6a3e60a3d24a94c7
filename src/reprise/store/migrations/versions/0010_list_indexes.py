"""Indexes for the run listings and lookups, as measured by bench/bench_scale.py.

``runs list --name N`` and ``--status S`` ask for the newest 50 runs with that name or
status: on single-column indexes PostgreSQL either sorts every matching run or walks
the primary key backwards filtering, and ``--status failed`` took 122 ms at 10^6 runs
(57x its time at 10^4). ``(name, id)`` and ``(status, id)`` serve the filter and the
order together (an index range read backwards, stopping after 50); they replace the
single-column indexes, whose lookups they also serve.

``get_run`` finds a run by ``id LIKE 'prefix%'``. PostgreSQL uses a plain b-tree for
such a prefix only under the "C" collation; databases are usually created with
another (en_US.UTF-8, C.UTF-8 before PostgreSQL 17), so the lookup was a sequential
scan of ``runs``: 1.6 ms at 20,000 runs, growing linearly. ``varchar_pattern_ops``
compares bytes whatever the collation, so the prefix becomes an index range. That
index is PostgreSQL only, hence not declared in ``_schema`` (which SQLite shares).
SQLite's LIKE is case-insensitive and cannot use an index either; an embedded
workspace holds far fewer runs, and docs/scale.md leaves it as is.

Revision ID: 0010_list_indexes
Revises: 0009_audit_subject
Create Date: 2026-11-26
"""

from __future__ import annotations

from alembic import op

revision = "0010_list_indexes"
down_revision = "0009_audit_subject"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_runs_name_id", "runs", ["name", "id"])
    op.create_index("ix_runs_status_id", "runs", ["status", "id"])
    op.drop_index("ix_runs_name", table_name="runs")
    op.drop_index("ix_runs_status", table_name="runs")
    if op.get_bind().dialect.name == "postgresql":
        op.create_index("ix_runs_id_pattern", "runs", ["id"],
                        postgresql_ops={"id": "varchar_pattern_ops"})


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.drop_index("ix_runs_id_pattern", table_name="runs")
    op.create_index("ix_runs_status", "runs", ["status"])
    op.create_index("ix_runs_name", "runs", ["name"])
    op.drop_index("ix_runs_status_id", table_name="runs")
    op.drop_index("ix_runs_name_id", table_name="runs")
