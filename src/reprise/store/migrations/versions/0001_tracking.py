"""Tracking tables: environments, runs, params, tags, metrics, artifacts.

Revision ID: 0001_tracking
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001_tracking"
down_revision = None
branch_labels = None
depends_on = None

ID = sa.String(32)
HASH = sa.String(64)
NAME = sa.String(250)


def upgrade() -> None:
    op.create_table(
        "environments",
        sa.Column("hash", HASH, primary_key=True),
        sa.Column("fingerprint", sa.Text, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_table(
        "runs",
        sa.Column("id", ID, primary_key=True),
        sa.Column("parent_id", ID, sa.ForeignKey("runs.id"), index=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("name", NAME, nullable=False, index=True),
        sa.Column("status", sa.String(16), nullable=False, index=True),
        sa.Column("started_at", sa.Float, nullable=False),
        sa.Column("ended_at", sa.Float),
        sa.Column("seed", sa.BigInteger),
        sa.Column("env_hash", HASH, sa.ForeignKey("environments.hash")),
        sa.Column("code_hash", HASH),
        sa.Column("git_commit", sa.String(64)),
        sa.Column("git_dirty", sa.Boolean),
        sa.Column("host", sa.String(255)),
        sa.Column("user", sa.String(255)),
        sa.Column("pid", sa.Integer),
        sa.Column("error", sa.Text),
        sa.Column("energy_joules", sa.Float),
        sa.Column("energy_source", sa.String(32)),
        sa.Column("journal_offset", sa.BigInteger, nullable=False, server_default="0"),
    )
    for name in ("params", "tags"):
        op.create_table(
            name,
            sa.Column("run_id", ID, sa.ForeignKey("runs.id", ondelete="CASCADE"),
                      primary_key=True),
            sa.Column("key", NAME, primary_key=True),
            sa.Column("value", sa.Text, nullable=False),
        )
    op.create_table(
        "metrics",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("run_id", ID, sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("key", NAME, nullable=False),
        sa.Column("step", sa.BigInteger, nullable=False),
        sa.Column("value", sa.Float),
        sa.Column("timestamp", sa.Float, nullable=False),
    )
    op.create_index("ix_metrics_run_key_step", "metrics", ["run_id", "key", "step"])
    op.create_table(
        "artifacts",
        sa.Column("hash", HASH, primary_key=True),
        sa.Column("size", sa.BigInteger, nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("materializer", sa.String(64), nullable=False),
        sa.Column("meta", sa.Text, nullable=False, server_default="{}"),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_table(
        "run_artifacts",
        sa.Column("run_id", ID, sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("name", sa.String(255), primary_key=True),
        sa.Column("artifact_hash", HASH, sa.ForeignKey("artifacts.hash"), nullable=False,
                  index=True),
    )


def downgrade() -> None:
    for name in ("run_artifacts", "artifacts", "metrics", "tags", "params", "runs",
                 "environments"):
        op.drop_table(name)
