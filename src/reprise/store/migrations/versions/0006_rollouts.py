"""Rollouts: canary, shadow and blue-green deployments of an alias, the per-server
outcome buckets their analysis reads, and leases (one decider at a time).

Revision ID: 0006_rollouts
Revises: 0005_registry_integrity
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006_rollouts"
down_revision = "0005_registry_integrity"
branch_labels = None
depends_on = None

NAME = sa.String(250)
_RUNNING = sa.text("state = 'running'")


def upgrade() -> None:
    op.create_table(
        "rollouts",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("name", NAME, nullable=False),
        sa.Column("alias", NAME, nullable=False),
        sa.Column("stable", sa.Integer, nullable=False),
        sa.Column("candidate", sa.Integer, nullable=False),
        sa.Column("strategy", sa.String(16), nullable=False),
        sa.Column("steps", sa.Text, nullable=False),
        sa.Column("interval_s", sa.Float, nullable=False),
        sa.Column("policy", sa.Text, nullable=False),
        sa.Column("key", sa.Text, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("step", sa.Integer, nullable=False),
        sa.Column("weight", sa.Float, nullable=False),
        sa.Column("phase", sa.String(16), nullable=False),
        sa.Column("step_started_at", sa.Float, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("ended_at", sa.Float),
        sa.Column("failures", sa.Integer, nullable=False),
        sa.Column("decisions", sa.Integer, nullable=False),
        sa.Column("reason", sa.Text),
        sa.Column("actor", sa.String(255), nullable=False),
        sa.Column("analyzed_at", sa.Float),
    )
    op.create_index("ix_rollouts_name_alias", "rollouts", ["name", "alias"])
    op.create_index("ux_rollouts_running", "rollouts", ["name", "alias"], unique=True,
                    sqlite_where=_RUNNING, postgresql_where=_RUNNING)
    op.create_table(
        "rollout_buckets",
        sa.Column("rollout_id", sa.String(32),
                  sa.ForeignKey("rollouts.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("version", sa.Integer, primary_key=True),
        sa.Column("bucket", sa.BigInteger, primary_key=True),
        sa.Column("server", sa.String(255), primary_key=True),
        sa.Column("requests", sa.BigInteger, nullable=False),
        sa.Column("errors", sa.BigInteger, nullable=False),
        sa.Column("latency", sa.Text, nullable=False),
        sa.Column("outputs", sa.Text, nullable=False),
        sa.Column("shadow_compared", sa.BigInteger, nullable=False),
        sa.Column("shadow_agreed", sa.BigInteger, nullable=False),
        sa.Column("shadow_dropped", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "leases",
        sa.Column("key", sa.String(255), primary_key=True),
        sa.Column("holder", sa.String(255), nullable=False),
        sa.Column("expires_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("leases")
    op.drop_table("rollout_buckets")
    op.drop_index("ux_rollouts_running", "rollouts")
    op.drop_index("ix_rollouts_name_alias", "rollouts")
    op.drop_table("rollouts")
