"""Registry rules that hold whatever the caller checked first (issue 20, items 12, 13, 16):
numbers are never reused, a re-promotion changes nothing, and the store itself refuses to
archive or delete an aliased version (with a foreign key behind it). On each backend."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

from reprise.core.errors import NotFoundError, UserError
from reprise.registry import (
    archive_model,
    audit_log,
    delete_model,
    describe_model,
    get_model,
    promote,
    register_package,
    rollback,
    verify_audit,
)
from tests.registry.test_registry import pkg


def test_deleting_the_newest_version_never_hands_its_number_on(ws: Any) -> None:
    register_package("churn", pkg(1.0), workspace=ws)
    v2 = register_package("churn", pkg(0.5), workspace=ws)
    delete_model("churn", 2, workspace=ws)
    other = register_package("churn", pkg(0.1), workspace=ws)
    assert other.version == 3 and other.package_hash != v2.package_hash
    with pytest.raises(NotFoundError, match="has no version 2"):
        get_model("churn:2", workspace=ws)
    for v in (1, 3):
        delete_model("churn", v, workspace=ws)
    again = register_package("churn", pkg(0.5), workspace=ws)  # v2's package comes back
    assert again.version == 4
    assert verify_audit(workspace=ws).ok


def test_repromoting_the_version_an_alias_holds_changes_nothing(ws: Any) -> None:
    for c in (1.0, 0.5):
        register_package("churn", pkg(c), workspace=ws)
    promote("churn", 1, "production", workspace=ws)
    promote("churn", 2, "production", workspace=ws)
    events = len(audit_log(workspace=ws))
    assert promote("churn", 2, "production", workspace=ws) == 2
    assert len(audit_log(workspace=ws)) == events
    assert describe_model("churn:2", workspace=ws)["history"] == {"production": [1, 2]}
    assert rollback("churn", "production", workspace=ws) == (2, 1)
    assert get_model("churn@production", workspace=ws).version == 1


def test_rollback_never_lands_on_an_archived_version(ws: Any) -> None:
    for c in (1.0, 0.5):
        register_package("churn", pkg(c), workspace=ws)
    promote("churn", 1, "production", workspace=ws)
    promote("churn", 2, "production", workspace=ws)
    archive_model("churn", 1, workspace=ws)
    with pytest.raises(UserError, match=r"churn:1 is archived; .*'production' was not moved"):
        rollback("churn", "production", workspace=ws)
    assert get_model("churn@production", workspace=ws).version == 2
    assert describe_model("churn:2", workspace=ws)["history"] == {"production": [1, 2]}


def test_the_store_refuses_to_drop_an_aliased_version_in_its_own_transaction(ws: Any) -> None:
    for c in (1.0, 0.5):
        register_package("churn", pkg(c), workspace=ws)
    promote("churn", 2, "production", workspace=ws)
    event = ("tester", "delete", "churn:2", {})
    md = ws.metadata  # below the registry's own first check
    with pytest.raises(UserError, match=r"churn:2 is held by alias\(es\) \['production'\]; it "
                       r"cannot be deleted\. Move the alias first"):
        md.delete_model_version("churn", 2, event)
    with pytest.raises(UserError, match="cannot be archived. Move the alias first"):
        md.set_model_version_status("churn", 2, "archived", event)
    assert md.get_model_version("churn", 2).status == "ready"
    with pytest.raises(sa.exc.IntegrityError), md.engine.begin() as conn:  # the foreign key
        conn.execute(sa.text("DELETE FROM model_versions WHERE name = 'churn' AND version = 2"))
    with pytest.raises(NotFoundError, match="has no version 7"):
        md.set_alias("churn", "production", 7, ("tester", "promote", "churn@production", {}))
    with pytest.raises(UserError, match="holds another package"):
        md.set_alias("churn", "staging", 2, ("tester", "promote", "churn@staging", {}),
                     package_hash="0" * 64)
    assert md.get_aliases("churn") == {"production": 2}
    assert [e["action"] for e in audit_log(workspace=ws)] == ["register", "register",
                                                              "promote"]
    assert verify_audit(workspace=ws).ok
