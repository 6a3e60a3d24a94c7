"""Versions, aliases, promotion rules, rollback, archive and delete, and the audit log —
on each metadata backend (SQLite and the real PostgreSQL server)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from reprise.core.errors import NotFoundError, UserError
from reprise.registry import (
    archive_model,
    audit_log,
    delete_model,
    describe_model,
    get_model,
    list_models,
    load_model,
    package_model,
    promote,
    register_package,
    rollback,
    verify_audit,
)


def pkg(c: float = 1.0, gates: bool | None = True) -> Any:
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(0)
    x = pd.DataFrame({"a": rng.normal(size=40), "b": rng.normal(size=40)})
    y = (x["a"] + x["b"] > 0).astype(int)
    model = LogisticRegression(C=c).fit(x, y)
    evaluation = None
    if gates is not None:
        evaluation = {"metrics": {"accuracy": {"value": 0.9}},
                      "gates": {"passed": gates, "results": []}}
    return package_model(model, sample=x, evaluation=evaluation)


def test_versions_are_numbered_and_a_package_registers_once(ws: Any) -> None:
    v1 = register_package("churn", pkg(1.0), workspace=ws)
    v2 = register_package("churn", pkg(0.1), workspace=ws)
    again = register_package("churn", pkg(1.0), workspace=ws)
    assert (v1.version, v2.version, again.version) == (1, 2, 1)
    assert [e["action"] for e in audit_log(workspace=ws)] == ["register", "register"]
    assert get_model("churn", workspace=ws).version == 2  # newest ready
    assert get_model("churn:1", workspace=ws).package_hash == v1.package_hash
    loaded = load_model("churn:1", workspace=ws)
    assert loaded.predict_records(loaded.example)["prediction"]
    assert list_models(workspace=ws)[0] == {**list_models(workspace=ws)[0], "name": "churn",
                                            "versions": 2, "latest": 2}


def test_promote_rollback_and_their_history(ws: Any) -> None:
    for c in (1.0, 0.5, 0.1):
        register_package("churn", pkg(c), workspace=ws)
    assert promote("churn", 1, "production", workspace=ws) is None
    assert promote("churn", 2, "production", workspace=ws) == 1
    assert promote("churn", 3, "production", workspace=ws) == 2
    assert get_model("churn@production", workspace=ws).version == 3
    assert rollback("churn", "production", workspace=ws) == (3, 2)
    assert rollback("churn", "production", workspace=ws) == (2, 1)
    with pytest.raises(UserError, match="no earlier version to roll back to"):
        rollback("churn", "production", workspace=ws)
    assert get_model("churn@production", workspace=ws).version == 1
    info = describe_model("churn@production", workspace=ws)
    assert info["history"] == {"production": [1]} and info["aliases"] == ["production"]
    events = audit_log(workspace=ws)
    rolled = [e["payload"] for e in events if e["action"] == "rollback"]
    assert rolled == [{"alias": "production", "from": 3, "to": 2},
                      {"alias": "production", "from": 2, "to": 1}]
    assert all(e["actor"] == "tester" for e in events)


def test_promotion_needs_passed_gates_or_a_recorded_override(ws: Any) -> None:
    register_package("churn", pkg(1.0, gates=False), workspace=ws)
    register_package("churn", pkg(0.5, gates=None), workspace=ws)
    with pytest.raises(UserError, match="its evaluation gates failed"):
        promote("churn", 1, "production", workspace=ws)
    with pytest.raises(UserError, match="has no evaluation with gates"):
        promote("churn", 2, "production", workspace=ws)
    with pytest.raises(UserError, match="--force needs --reason"):
        promote("churn", 1, "production", force=True, workspace=ws)
    promote("churn", 1, "production", force=True, reason="hotfix for incident 42",
            workspace=ws)
    last = audit_log(workspace=ws)[-1]
    assert last["payload"]["force"] is True and last["payload"]["reason"] == \
        "hotfix for incident 42" and last["payload"]["gates_passed"] is False


def test_archive_and_delete_rules(ws: Any) -> None:
    register_package("churn", pkg(1.0), workspace=ws)
    register_package("churn", pkg(0.5), workspace=ws)
    promote("churn", 2, "production", workspace=ws)
    for act in (archive_model, delete_model):
        with pytest.raises(UserError, match=r"held by alias\(es\) \['production'\]"):
            act("churn", 2, workspace=ws)
    archive_model("churn", 1, workspace=ws)
    with pytest.raises(UserError, match="is archived"):
        promote("churn", 1, "staging", workspace=ws)
    delete_model("churn", 1, workspace=ws)
    with pytest.raises(NotFoundError, match=r"has no version 1; versions: \[2\]"):
        get_model("churn:1", workspace=ws)
    assert [e["action"] for e in audit_log(workspace=ws)] == [
        "register", "register", "promote", "archive", "delete"]


@pytest.mark.parametrize(("ref", "needle"), [
    ("nope", "no model 'nope'"), ("churn@canary", "no alias 'canary'"),
    ("churn:9", "no version 9"), ("churn:x", "comes a version number"),
    ("bad name!", "is not valid"),
])
def test_unknown_references_are_clear(ws: Any, ref: str, needle: str) -> None:
    register_package("churn", pkg(1.0), workspace=ws)
    with pytest.raises(UserError, match=needle):
        get_model(ref, workspace=ws)


def _tamper(ws: Any, sql: str) -> None:
    import sqlalchemy as sa

    with ws.metadata.engine.begin() as conn:
        conn.execute(sa.text(sql))


def _chain(ws: Any) -> None:
    for c in (1.0, 0.5, 0.1, 0.05):
        register_package("churn", pkg(c), workspace=ws)
    promote("churn", 1, "production", workspace=ws)
    promote("churn", 2, "production", workspace=ws)


@pytest.mark.parametrize(("sql", "kind", "seq"), [
    ("UPDATE audit_events SET actor = 'mallory' WHERE seq = 3", "edited", 3),
    ("DELETE FROM audit_events WHERE seq = 3", "deleted", 3),
    ("UPDATE audit_events SET seq = seq + 100 WHERE seq = 2", "edited", 102),
])
def test_audit_verify_detects_tampering(ws: Any, sql: str, kind: str, seq: int) -> None:
    _chain(ws)
    clean = verify_audit(workspace=ws)
    assert clean.ok and clean.events == 6
    _tamper(ws, sql)
    report = verify_audit(workspace=ws)
    assert not report.ok
    assert any(p.kind == kind and p.seq == seq for p in report.problems), report.problems


def test_an_edit_with_a_recomputed_hash_breaks_the_next_link(ws: Any) -> None:
    from reprise.core._types import audit_hash

    _chain(ws)
    events = ws.metadata.list_audit_events()
    e = events[2]
    forged = {**e.payload, "gates_passed": True, "run": "forged"}
    h = audit_hash(e.seq, e.time, e.actor, e.action, e.subject, forged, e.prev_hash)
    payload = json.dumps(forged, sort_keys=True).replace("'", "''")
    _tamper(ws, f"UPDATE audit_events SET payload = '{payload}', hash = '{h}' WHERE seq = 3")
    report = verify_audit(workspace=ws)
    assert [(p.kind, p.seq) for p in report.problems] == [("rehashed", 3)]


def test_events_removed_from_the_end_need_the_recorded_head(ws: Any) -> None:
    _chain(ws)
    head = verify_audit(workspace=ws).head
    _tamper(ws, "DELETE FROM audit_events WHERE seq = 6")
    assert verify_audit(workspace=ws).ok  # consistent in itself...
    report = verify_audit(expect_head=head, workspace=ws)
    assert not report.ok and "removed from the end" in report.problems[0].message


def test_concurrent_registrations_keep_one_chain(ws: Any, tmp_path: Path) -> None:
    import subprocess
    import sys
    import textwrap

    script = tmp_path / "reg.py"
    script.write_text(textwrap.dedent('''
        import sys
        import reprise
        from tests.registry.test_registry import pkg
        ws = reprise.open_workspace(sys.argv[1])
        for i in range(5):
            reprise.registry.register_package("m" + sys.argv[2], pkg(1.0 + i),
                                              workspace=ws)
    '''))
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(  # the reprise this test imports
        [str(root), *filter(None, [os.environ.get("PYTHONPATH")])])}
    procs = [subprocess.Popen([sys.executable, str(script), str(ws.root), str(k)], env=env,
                              cwd=root) for k in range(3)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0]
    report = verify_audit(workspace=ws)
    assert report.ok and report.events == 15
    assert sorted(v.version for v in ws.metadata.list_model_versions("m0")) == [1, 2, 3, 4, 5]
