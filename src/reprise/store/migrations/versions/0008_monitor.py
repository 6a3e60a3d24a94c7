"""Monitoring: the drift reference fitted for a model version (an artifact), and the
summaries of the live windows computed against it (read by ``/metrics`` and the loop).

Revision ID: 0008_monitor
Revises: 0007_request_log
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008_monitor"
down_revision = "0007_request_log"
branch_labels = None
depends_on = None

NAME = sa.String(250)


def upgrade() -> None:
    op.create_table(
        "monitor_references",
        sa.Column("name", NAME, primary_key=True),
        sa.Column("version", sa.Integer, primary_key=True),
        sa.Column("dataset", sa.String(300), primary_key=True),
        sa.Column("artifact_hash", sa.String(64), sa.ForeignKey("artifacts.hash"),
                  nullable=False),
        sa.Column("sample_rows", sa.BigInteger, nullable=False),
        sa.Column("predictions", sa.String(32), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_table(
        "monitor_windows",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("name", NAME, nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("start", sa.Float, nullable=False),
        sa.Column("end", sa.Float, nullable=False),
        sa.Column("rows", sa.BigInteger, nullable=False),
        sa.Column("labelled", sa.BigInteger, nullable=False),
        sa.Column("input_verdict", sa.String(16), nullable=False),
        sa.Column("prediction_verdict", sa.String(16), nullable=False),
        sa.Column("performance_verdict", sa.String(16), nullable=False),
        sa.Column("reference_hash", sa.String(64), nullable=False),
        sa.Column("summary", sa.Text, nullable=False),
        sa.Column("computed_at", sa.Float, nullable=False),
    )
    op.create_index("ix_monitor_windows_name_end", "monitor_windows", ["name", "end"])


def downgrade() -> None:
    op.drop_index("ix_monitor_windows_name_end", "monitor_windows")
    op.drop_table("monitor_windows")
    op.drop_table("monitor_references")
