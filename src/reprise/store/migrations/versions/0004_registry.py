"""Registry: model version details, alias history (for rollback), audit head index.

Revision ID: 0004_registry
Revises: 0003_datasets
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004_registry"
down_revision = "0003_datasets"
branch_labels = None
depends_on = None

NAME = sa.String(250)


def upgrade() -> None:
    op.add_column("model_versions", sa.Column("meta", sa.Text, nullable=False,
                                              server_default="{}"))
    op.create_table(
        "alias_history",
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("name", NAME, nullable=False),
        sa.Column("alias", NAME, nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("time", sa.Float, nullable=False),
    )
    op.create_index("ix_alias_history_name_alias", "alias_history", ["name", "alias"])


def downgrade() -> None:
    op.drop_index("ix_alias_history_name_alias", "alias_history")
    op.drop_table("alias_history")
    with op.batch_alter_table("model_versions") as batch:
        batch.drop_column("meta")
