"""Pipelines and lineage, datasets, model registry, audit log.

Revision ID: 0002_lineage_registry
Revises: 0001_tracking
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002_lineage_registry"
down_revision = "0001_tracking"
branch_labels = None
depends_on = None

ID = sa.String(32)
HASH = sa.String(64)
NAME = sa.String(250)


def upgrade() -> None:
    op.create_table(
        "step_runs",
        sa.Column("id", ID, primary_key=True),
        sa.Column("run_id", ID, sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False,
                  index=True),
        sa.Column("step_name", NAME, nullable=False),
        sa.Column("cache_key", HASH, index=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("reused_from", ID),
        sa.Column("started_at", sa.Float),
        sa.Column("ended_at", sa.Float),
        sa.Column("duration", sa.Float),
        sa.Column("energy_joules", sa.Float),
        sa.Column("error", sa.Text),
        sa.Column("seed", sa.BigInteger),
        sa.Column("code_hash", HASH),
        sa.Column("details", sa.Text, nullable=False, server_default="{}"),
    )
    for name in ("step_inputs", "step_outputs"):
        extra = [sa.Column("source", sa.Text)] if name == "step_inputs" else []
        op.create_table(
            name,
            sa.Column("step_run_id", ID, sa.ForeignKey("step_runs.id", ondelete="CASCADE"),
                      primary_key=True),
            sa.Column("name", sa.String(255), primary_key=True),
            sa.Column("artifact_hash", HASH, sa.ForeignKey("artifacts.hash"), nullable=False,
                      index=True),
            *extra,
        )
    op.create_table(
        "datasets",
        sa.Column("name", NAME, primary_key=True),
        sa.Column("version", sa.Integer, primary_key=True),
        sa.Column("artifact_hash", HASH, sa.ForeignKey("artifacts.hash"), nullable=False),
        sa.Column("schema", sa.Text),
        sa.Column("profile", sa.Text),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_table(
        "models",
        sa.Column("name", NAME, primary_key=True),
        sa.Column("description", sa.Text),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_table(
        "model_versions",
        sa.Column("name", NAME, sa.ForeignKey("models.name"), primary_key=True),
        sa.Column("version", sa.Integer, primary_key=True),
        sa.Column("run_id", ID, sa.ForeignKey("runs.id")),
        sa.Column("package_hash", HASH, sa.ForeignKey("artifacts.hash"), nullable=False),
        sa.Column("signature", sa.Text),
        sa.Column("metrics", sa.Text),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_table(
        "aliases",
        sa.Column("name", NAME, primary_key=True),
        sa.Column("alias", NAME, primary_key=True),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
    )
    op.create_table(
        "audit_events",
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("time", sa.Float, nullable=False),
        sa.Column("actor", sa.String(255), nullable=False),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("subject", sa.String(255), nullable=False),
        sa.Column("payload", sa.Text, nullable=False),
        sa.Column("prev_hash", HASH, nullable=False),
        sa.Column("hash", HASH, nullable=False, unique=True),
    )


def downgrade() -> None:
    for name in ("audit_events", "aliases", "model_versions", "models", "datasets",
                 "step_outputs", "step_inputs", "step_runs"):
        op.drop_table(name)
