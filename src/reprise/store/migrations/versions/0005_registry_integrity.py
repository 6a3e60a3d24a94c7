"""Registry integrity: version numbers are never reused; an alias names a version that exists.

* ``models.last_version`` keeps the highest version number ever given to a model, so
  deleting the newest version no longer hands its number to the next registration. It
  starts at the newest existing version or, if higher, the newest the audit log says
  was registered (versions deleted before this revision count too).
* A foreign key from ``aliases`` to ``model_versions``. Aliases (and alias history)
  left on a deleted version by the promote/delete race this revision closes cannot be
  kept under it; they resolved to nothing already, and are dropped with a warning.

Revision ID: 0005_registry_integrity
Revises: 0004_registry
Create Date: 2026-11-25
"""

from __future__ import annotations

import json
import logging

import sqlalchemy as sa
from alembic import op

revision = "0005_registry_integrity"
down_revision = "0004_registry"
branch_labels = None
depends_on = None

_DANGLING = ("NOT EXISTS (SELECT 1 FROM model_versions mv WHERE mv.name = {t}.name "
             "AND mv.version = {t}.version)")


def upgrade() -> None:
    op.add_column("models", sa.Column("last_version", sa.Integer, nullable=False,
                                      server_default="0"))
    conn = op.get_bind()
    marks: dict[str, int] = {str(n): int(v) for n, v in conn.execute(sa.text(
        "SELECT name, MAX(version) FROM model_versions GROUP BY name"))}
    for subject, payload in conn.execute(sa.text(
            "SELECT subject, payload FROM audit_events WHERE action = 'register'")):
        version = json.loads(payload or "{}").get("version")
        if isinstance(version, int):
            marks[str(subject)] = max(marks.get(str(subject), 0), version)
    for name, top in marks.items():
        conn.execute(sa.text("UPDATE models SET last_version = :v WHERE name = :n"),
                     {"v": top, "n": name})
    dangling = conn.execute(sa.text(
        "SELECT name, alias, version FROM aliases WHERE " + _DANGLING.format(t="aliases")
    )).all()
    for name, alias, version in dangling:
        logging.getLogger("reprise.store").warning(
            "alias %s@%s named version %s, which was deleted; the alias is removed: "
            "promote a version to it again", name, alias, version)
    conn.execute(sa.text("DELETE FROM aliases WHERE " + _DANGLING.format(t="aliases")))
    conn.execute(sa.text("DELETE FROM alias_history WHERE "
                         + _DANGLING.format(t="alias_history")))
    with op.batch_alter_table("aliases") as batch:
        batch.create_foreign_key("fk_aliases_model_versions", "model_versions",
                                 ["name", "version"], ["name", "version"])


def downgrade() -> None:
    with op.batch_alter_table("aliases") as batch:
        batch.drop_constraint("fk_aliases_model_versions", type_="foreignkey")
    with op.batch_alter_table("models") as batch:
        batch.drop_column("last_version")
