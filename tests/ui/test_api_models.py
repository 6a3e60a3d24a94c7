"""The models part of the dashboard's API through httpx, on SQLite and PostgreSQL: the
models, one model (aliases with who moved them), one version (card, evaluation), the audit
log and its verification (intact, then broken by a tampered row), and the actions
(promote, rollback, abort a rollout): refused on a read-only server and to what a page of
another site could send, audited with their reason when allowed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import reprise

pytest.importorskip("fastapi")
import httpx  # noqa: E402

from reprise.registry import audit_log, package_model, promote, register_package  # noqa: E402
from reprise.ui import create_app  # noqa: E402
from tests.ui.test_api import Api  # noqa: E402

XSS = "<script>alert(1)</script>"


def _package(c: float, gates: bool) -> Any:
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(0)
    x = pd.DataFrame({"a": rng.normal(size=40), "b": rng.normal(size=40)})
    y = (x["a"] + x["b"] > 0).astype(int)
    evaluation = {"task": "binary", "n": 40,
                  "metrics": {"accuracy": {"value": 0.9 if gates else 0.4}},
                  "gates": {"passed": gates, "results": [
                      {"metric": "accuracy", "rule": ">= 0.8", "threshold": 0.8,
                       "actual": 0.9 if gates else 0.4, "by": None, "baseline": None,
                       "passed": gates}]}}
    return package_model(LogisticRegression(C=c).fit(x, y), sample=x, evaluation=evaluation,
                         description=XSS)


@pytest.fixture
def ws(tmp_path: Path, store_url: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("REPRISE_STORE_URL", store_url)
    monkeypatch.setenv("REPRISE_ACTOR", "alice@test")
    monkeypatch.delenv("REPRISE_UI_TOKEN", raising=False)
    w = reprise.init(tmp_path)
    register_package("churn", _package(1.0, True), workspace=w)
    register_package("churn", _package(0.1, True), workspace=w)
    register_package("churn", _package(0.01, False), workspace=w)
    promote("churn", 1, "production", workspace=w)
    yield w
    w.close()


@pytest.fixture
def ro(ws: Any) -> Api:
    return Api(create_app(ws))


@pytest.fixture
def rw(ws: Any) -> Api:
    return Api(create_app(ws, allow_actions=True))


def _post(api: Api, path: str, body: Any, **headers: str) -> httpx.Response:
    return api.post(path, json=body, headers=headers)


def test_models_list_detail_and_version(ro: Api) -> None:
    assert ro.get("/api/models").json()["models"] == [
        {"name": "churn", "versions": 3, "latest": 3, "aliases": {"production": 1},
         "updated": ro.get("/api/models").json()["models"][0]["updated"]}]
    model = ro.get("/api/models/churn").json()
    assert [v["version"] for v in model["versions"]] == [1, 2, 3]
    assert [v["gates_passed"] for v in model["versions"]] == [True, True, False]
    assert model["versions"][0]["aliases"] == ["production"]
    [alias] = model["aliases"]
    assert alias["alias"] == "production" and alias["version"] == 1
    assert alias["rollback_to"] is None
    assert [(m["action"], m["from"], m["to"], m["actor"]) for m in alias["history"]] == [
        ("promote", None, 1, "alice@test")]
    assert model["rollouts"] == []
    v3 = ro.get("/api/models/churn/versions/3").json()
    assert v3["version"] == 3 and v3["gates_passed"] is False
    assert v3["card"]["description"] == XSS  # user strings come back as data
    assert v3["card"]["gates"]["passed"] is False
    assert v3["evaluation"]["gates"]["results"][0]["metric"] == "accuracy"
    assert "signature" in v3


def test_unknown_and_bad_models(ro: Api) -> None:
    missing = ro.get("/api/models/nope")
    assert missing.status_code == 404 and "no model 'nope'" in missing.json()["detail"]
    gone = ro.get("/api/models/churn/versions/9")
    assert gone.status_code == 404 and "versions: [1, 2, 3]" in gone.json()["detail"]
    bad = ro.get("/api/models/bad%20name")
    assert bad.status_code == 400 and "not valid" in bad.json()["detail"]
    assert ro.get("/api/models/churn/versions/x").status_code == 422
    assert ro.get("/api/audit?limit=0").status_code == 422


def test_audit_log_pages_newest_first_and_filters_by_model(ws: Any, ro: Api) -> None:
    register_package("other", _package(2.0, True), workspace=ws)
    page = ro.get("/api/audit?limit=2").json()
    assert page["total"] == 5 and [e["seq"] for e in page["events"]] == [5, 4]
    assert [e["seq"] for e in ro.get("/api/audit?limit=2&offset=4").json()["events"]] == [1]
    churn = ro.get("/api/audit?model=churn").json()
    assert churn["total"] == 4
    assert {e["subject"] for e in churn["events"]} == {"churn", "churn@production"}
    assert ro.get("/api/audit?model=nobody").json()["total"] == 0


def test_audit_verify_intact_then_broken_by_a_tampered_row(ws: Any, ro: Api) -> None:
    import sqlalchemy as sa

    ok = ro.get("/api/audit/verify").json()
    assert ok["status"] == "intact" and ok["ok"] is True and ok["events"] == 4
    with ws.metadata.engine.begin() as conn:
        conn.execute(sa.text("UPDATE audit_events SET actor = 'mallory' WHERE seq = 2"))
    broken = ro.get("/api/audit/verify").json()
    assert broken["status"] == "broken" and broken["ok"] is False
    assert [(p["kind"], p["seq"]) for p in broken["problems"]] == [("edited", 2)]
    assert "was changed after it was written" in broken["problems"][0]["message"]


def test_actions_are_refused_on_a_read_only_server(ro: Api) -> None:
    assert ro.get("/api/health").json()["actions"] == []
    for path, body in [("/api/models/churn/promote", {"version": 2, "alias": "production",
                                                     "reason": "r"}),
                       ("/api/models/churn/rollback", {"alias": "production", "reason": "r"}),
                       ("/api/models/churn/rollouts/abort", {"reason": "r"})]:
        r = _post(ro, path, body)
        assert r.status_code == 403, path
        assert "--allow-actions" in r.json()["detail"]
    assert len(ro.get("/api/audit").json()["events"]) == 4  # nothing happened


def test_promote_and_rollback_are_audited_with_their_reason(ws: Any, rw: Api) -> None:
    assert rw.get("/api/health").json()["actions"] == ["promote", "rollback", "abort_rollout"]
    r = _post(rw, "/api/models/churn/promote", {"version": 2, "alias": "production",
                                                 "reason": "better recall, ticket 7"})
    assert r.status_code == 200, r.text
    assert r.json() == {"name": "churn", "alias": "production", "version": 2, "previous": 1,
                        "changed": True}
    last = audit_log(workspace=ws)[-1]
    assert last["action"] == "promote" and last["actor"] == "ui:alice@test"
    assert last["payload"]["reason"] == "better recall, ticket 7"
    alias = rw.get("/api/models/churn").json()["aliases"][0]
    assert alias["version"] == 2 and alias["rollback_to"] == 1
    assert alias["history"][0]["reason"] == "better recall, ticket 7"

    r = _post(rw, "/api/models/churn/rollback", {"alias": "production", "reason": "alerts"})
    assert r.status_code == 200, r.text
    assert r.json() == {"name": "churn", "alias": "production", "from": 2, "to": 1}
    last = audit_log(workspace=ws)[-1]
    assert (last["action"], last["actor"], last["payload"]["reason"]) == (
        "rollback", "ui:alice@test", "alerts")
    assert rw.get("/api/audit/verify").json()["status"] == "intact"


def test_action_errors_are_400_or_404_with_a_message(rw: Api) -> None:
    no_reason = _post(rw, "/api/models/churn/promote", {"version": 2, "alias": "production"})
    assert no_reason.status_code == 400 and "reason" in no_reason.json()["detail"]
    blank = _post(rw, "/api/models/churn/rollback", {"alias": "production", "reason": "  "})
    assert blank.status_code == 400 and "reason is required" in blank.json()["detail"]
    gated = _post(rw, "/api/models/churn/promote", {"version": 3, "alias": "production",
                                                     "reason": "try"})
    assert gated.status_code == 400 and "gates failed" in gated.json()["detail"]
    once = _post(rw, "/api/models/churn/rollback", {"alias": "production", "reason": "x"})
    assert once.status_code == 400 and "no earlier version" in once.json()["detail"]
    missing = _post(rw, "/api/models/nope/promote", {"version": 1, "alias": "production",
                                                      "reason": "x"})
    assert missing.status_code == 404
    bad_alias = _post(rw, "/api/models/churn/promote", {"version": 2, "alias": "a/b",
                                                         "reason": "x"})
    assert bad_alias.status_code == 400 and "not valid" in bad_alias.json()["detail"]
    not_json = rw.post("/api/models/churn/rollback", content=b"{oops",
                       headers={"Content-Type": "application/json"})
    assert not_json.status_code == 400 and "not valid JSON" in not_json.json()["detail"]
    wrong = _post(rw, "/api/models/churn/promote", {"version": "two", "alias": "production",
                                                     "reason": "x"})
    assert wrong.status_code == 400 and "version" in wrong.json()["detail"]
    no_rollout = _post(rw, "/api/models/churn/rollouts/abort", {"reason": "x"})
    assert no_rollout.status_code == 404 and "no running rollout" in no_rollout.json()["detail"]


def test_cross_site_requests_are_refused(ws: Any, rw: Api) -> None:
    form = rw.post("/api/models/churn/promote", data={"version": "2", "alias": "production",
                                                      "reason": "csrf"})
    assert form.status_code == 403 and "JSON body" in form.json()["detail"]
    plain = rw.post("/api/models/churn/rollback", content=b'{"alias": "production"}',
                    headers={"Content-Type": "text/plain"})
    assert plain.status_code == 403
    foreign = _post(rw, "/api/models/churn/promote", {"version": 2, "alias": "production",
                                                       "reason": "csrf"},
                    Origin="http://evil.example")
    assert foreign.status_code == 403 and "another site" in foreign.json()["detail"]
    same = _post(rw, "/api/models/churn/promote", {"version": 2, "alias": "staging",
                                                    "reason": "same site"},
                 Origin="http://test")
    assert same.status_code == 200, same.text
    assert [e["payload"].get("reason") for e in audit_log(workspace=ws)][-1] == "same site"
    assert len(audit_log(workspace=ws)) == 5  # only the same-site promotion happened


def test_abort_a_running_rollout(ws: Any, rw: Api) -> None:
    from reprise.serve import start_rollout

    rec = start_rollout("churn", 2, workspace=ws)
    running = rw.get("/api/models/churn").json()["rollouts"]
    assert [(r["id"], r["stable"], r["candidate"], r["state"]) for r in running] == [
        (rec.id, 1, 2, "running")]
    r = _post(rw, "/api/models/churn/rollouts/abort", {"reason": "latency spike"})
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "aborted" and r.json()["id"] == rec.id
    last = audit_log(workspace=ws)[-1]
    assert (last["action"], last["actor"], last["payload"]["reason"]) == (
        "rollout.abort", "ui:alice@test", "latency spike")
    assert rw.get("/api/models/churn").json()["rollouts"] == []


def test_the_openapi_documents_the_models_api(ro: Api) -> None:
    paths = ro.get("/openapi.json").json()["paths"]
    assert {"/api/models", "/api/models/{name}", "/api/models/{name}/versions/{version}",
            "/api/audit", "/api/audit/verify", "/api/models/{name}/promote",
            "/api/models/{name}/rollback", "/api/models/{name}/rollouts/abort"} <= set(paths)
    promote_doc = paths["/api/models/{name}/promote"]["post"]
    schema = promote_doc["requestBody"]["content"]["application/json"]["schema"]
    assert {"version", "alias", "reason"} <= set(schema["required"])


def test_the_evaluation_report_is_sandboxed_html(ws: Any, ro: Api) -> None:
    from sklearn.linear_model import LogisticRegression

    r = ro.get("/api/models/churn/versions/1/report")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/html")
    assert "<h1>Evaluation report</h1>" in r.text
    csp = r.headers["content-security-policy"]
    assert csp.startswith("sandbox allow-scripts;") and "default-src 'none'" in csp
    x = pd.DataFrame({"a": [0.0, 1.0, 2.0, 3.0], "b": [1.0, 0.0, 1.0, 0.0]})
    bare = package_model(LogisticRegression().fit(x, [0, 1, 0, 1]), sample=x)
    register_package("churn", bare, workspace=ws)
    none = ro.get("/api/models/churn/versions/4/report")
    assert none.status_code == 404 and "without an evaluation" in none.json()["detail"]
    assert ro.get("/api/models/churn/versions/9/report").status_code == 404
