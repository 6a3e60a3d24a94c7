"""Dataset versions: format, row count, metadata (source, quarantine, validation); schemas.

Revision ID: 0003_datasets
Revises: 0002_lineage_registry
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003_datasets"
down_revision = "0002_lineage_registry"
branch_labels = None
depends_on = None

NAME = sa.String(250)


def upgrade() -> None:
    op.add_column("datasets", sa.Column("format", sa.String(16)))
    op.add_column("datasets", sa.Column("rows", sa.BigInteger))
    op.add_column("datasets", sa.Column("meta", sa.Text, nullable=False, server_default="{}"))
    op.create_table(
        "dataset_schemas",
        sa.Column("name", NAME, primary_key=True),
        sa.Column("spec", sa.Text),
        sa.Column("source", sa.Text),
        sa.Column("updated_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("dataset_schemas")
    with op.batch_alter_table("datasets") as batch:
        batch.drop_column("meta")
        batch.drop_column("rows")
        batch.drop_column("format")
