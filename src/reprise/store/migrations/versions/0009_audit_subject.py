"""An index on the audit log by subject and time, for the readers that ask for one
subject's recent events (``reprise rollout status``, the monitoring loop's cooldowns and
in-flight actions every round) instead of scanning the whole, ever-growing chain.

Revision ID: 0009_audit_subject
Revises: 0008_monitor
Create Date: 2026-12-04
"""

from __future__ import annotations

from alembic import op

revision = "0009_audit_subject"
down_revision = "0008_monitor"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_audit_events_subject_time", "audit_events", ["subject", "time"])


def downgrade() -> None:
    op.drop_index("ix_audit_events_subject_time", table_name="audit_events")
