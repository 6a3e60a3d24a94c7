"""The request log (an index of Parquet chunks of logged requests in the artifact
store) and feedback (labels joined to logged requests by request id).

Revision ID: 0007_request_log
Revises: 0006_rollouts
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007_request_log"
down_revision = "0006_rollouts"
branch_labels = None
depends_on = None

NAME = sa.String(250)


def upgrade() -> None:
    op.create_table(
        "request_log",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("name", NAME, nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("server", sa.String(255), nullable=False),
        sa.Column("first_at", sa.Float, nullable=False),
        sa.Column("last_at", sa.Float, nullable=False),
        sa.Column("requests", sa.BigInteger, nullable=False),
        sa.Column("rows", sa.BigInteger, nullable=False),
        sa.Column("artifact_hash", sa.String(64), sa.ForeignKey("artifacts.hash"),
                  nullable=False),
        sa.Column("size", sa.BigInteger, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_index("ix_request_log_name_time", "request_log", ["name", "first_at"])
    op.create_index("ix_request_log_created", "request_log", ["created_at"])
    op.create_table(
        "feedback",
        sa.Column("name", NAME, primary_key=True),
        sa.Column("request_id", sa.String(128), primary_key=True),
        sa.Column("label", sa.Text, nullable=False),
        sa.Column("received_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("feedback")
    op.drop_index("ix_request_log_created", "request_log")
    op.drop_index("ix_request_log_name_time", "request_log")
    op.drop_table("request_log")
