"""The compare part of the dashboard's API (``/api/compare``) and the runs page's nested
runs (``/api/run-children``), on SQLite and PostgreSQL: runs side by side (params that
differ, final metrics, common metrics, environment and output differences), bad input
400 with a message, unknown runs 404 naming the id."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

import reprise
from reprise import step

pytest.importorskip("fastapi")

from reprise.ui import create_app  # noqa: E402
from tests.ui.test_api import XSS, Api  # noqa: E402


@pytest.fixture
def ws(tmp_path: Path, store_url: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("REPRISE_STORE_URL", store_url)
    monkeypatch.delenv("REPRISE_UI_TOKEN", raising=False)
    w = reprise.init(tmp_path)
    yield w
    w.close()


@step
def scale(n: int) -> int:
    return 3 * n


@reprise.pipeline
def tiny(n: int = 2):  # type: ignore[no-untyped-def]
    return scale(n)


@pytest.fixture
def runs(ws: Any, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    from reprise.pipeline._runner import run_pipeline
    from reprise.tracking import _api, environment

    ids: dict[str, str] = {}
    for name, lr, f1 in [("a", 0.001, 0.95), (XSS, 0.1, 0.5)]:
        with reprise.start_run(name, params={"lr": lr, "seed": 7}, workspace=ws) as run:
            for i in range(10):
                run.log_metric("loss", lr * (10 - i), step=i)
            run.log_metric(f"only-{len(ids)}", 1.0)
            run.log_metric("f1", f1)
            ids[name] = run.id
        if name == "a":
            for child in ("c1", "c2"):
                with reprise.start_run(child, parent=run, workspace=ws) as kid:
                    ids[child] = kid.id
            with reprise.start_run("grandchild", parent=ids["c1"], workspace=ws) as grand:
                ids["grandchild"] = grand.id
    ids["p1"] = run_pipeline(tiny, {"n": 2}, workspace=ws, workers=1).run_id
    ids["p2"] = run_pipeline(tiny, {"n": 5}, workspace=ws, workers=1).run_id
    # a run recorded under another environment: a newer numpy, another Python
    digest, fp = environment(ws)
    other = copy.deepcopy(fp)
    other["packages"] = dict(other.get("packages") or {}, numpy="0.0.1-other")
    other["python"] = dict(other["python"], version="3.99.0")
    monkeypatch.setitem(_api._env_cache, ws.root, ("f" * 64, other))
    with reprise.start_run("elsewhere", params={"lr": 0.001, "seed": 7}, workspace=ws) as run:
        run.log_metric("loss", 0.5, step=0)
        ids["elsewhere"] = run.id
    monkeypatch.setitem(_api._env_cache, ws.root, (digest, fp))
    return ids


@pytest.fixture
def client(ws: Any, runs: dict[str, str]) -> Api:
    return Api(create_app(ws))


def test_openapi_documents_the_new_endpoints(client: Api) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/api/compare", "/api/run-children"} <= set(paths)
    params = {p["name"]: p for p in paths["/api/compare"]["get"]["parameters"]}
    assert "comma-separated" in params["ids"]["description"]


def test_compare_params_metrics_and_common_metrics(client: Api, runs: dict[str, str]) -> None:
    body = client.get("/api/compare", params={"ids": f"{runs['a']},{runs[XSS]}"}).json()
    assert [r["id"] for r in body["runs"]] == [runs["a"], runs[XSS]]
    assert body["runs"][1]["name"] == XSS  # data, as given
    params = {p["key"]: p for p in body["params"]}
    assert params["lr"] == {"key": "lr", "values": [0.001, 0.1], "differs": True}
    assert params["seed"] == {"key": "seed", "values": [7, 7], "differs": False}
    metrics = {m["key"]: m for m in body["metrics"]}
    assert metrics["f1"]["values"] == [0.95, 0.5] and metrics["f1"]["differs"]
    assert metrics["only-0"]["values"] == [1.0, None]  # absent on one side
    assert body["common_metrics"] == ["f1", "loss"]
    env = body["environment"]
    assert env["differs"] == [] and env["hashes"][0] == env["hashes"][1]
    assert env["python"][0] and env["recorded"] == [True, True]
    assert body["outputs"] == []  # plain runs: no step outputs, no artifacts


def test_compare_three_runs_environment_diff(client: Api, runs: dict[str, str]) -> None:
    ids = ",".join(runs[k] for k in ("a", XSS, "elsewhere"))
    body = client.get("/api/compare", params={"ids": ids}).json()
    assert len(body["runs"]) == 3 and body["common_metrics"] == ["loss"]
    env = body["environment"]
    assert env["hashes"][2] == "f" * 64 and env["python"][2] == "3.99.0"
    changed = {(d["section"], d["key"]): d["values"] for d in env["differs"]}
    assert changed[("python", "version")][2] == "3.99.0"
    assert changed[("python", "version")][0] == changed[("python", "version")][1] != "3.99.0"
    numpy = changed[("packages", "numpy")]
    assert numpy[2] == "0.0.1-other" and numpy[0] == numpy[1] != "0.0.1-other"
    assert not any(d["section"] == "env_vars" for d in env["differs"])  # never shown


def test_compare_pipeline_outputs(client: Api, runs: dict[str, str]) -> None:
    body = client.get("/api/compare", params={"ids": f"{runs['p1']},{runs['p2']}"}).json()
    outputs = {o["key"]: o for o in body["outputs"]}
    scaled = outputs["scale/output"]
    assert scaled["differs"] and all(len(v) == 64 for v in scaled["values"])
    params = {p["key"]: p for p in body["params"]}
    assert params["n"]["values"] == [2, 5]


BAD = [
    ("", 400, "at least two run ids"),
    ("abc", 400, "at least two run ids"),
    (" , ,", 400, "at least two run ids"),
    (",".join(["x"] * 21), 400, "at most 20 runs"),
]


def test_compare_bad_input_is_400_and_unknown_404(client: Api, runs: dict[str, str]) -> None:
    for ids, status, message in BAD:
        res = client.get("/api/compare", params={"ids": ids})
        assert res.status_code == status, ids
        assert message in res.json()["detail"], (ids, res.json())
    res = client.get("/api/compare", params={"ids": f"{runs['a']},{runs['a']}"})
    assert res.status_code == 400 and "twice" in res.json()["detail"]
    res = client.get("/api/compare", params={"ids": f"{runs['a']},0123456789nope"})
    assert res.status_code == 404 and "0123456789nope" in res.json()["detail"]
    assert client.get("/api/compare").status_code == 422  # ids is required


def test_run_children_nested_with_their_counts(client: Api, runs: dict[str, str]) -> None:
    ids = f"{runs['a']},{runs['c1']},{runs[XSS]}"
    body = client.get("/api/run-children", params={"ids": ids}).json()["children"]
    assert [(c["id"], c["name"], c["children"]) for c in body[runs["a"]]] == [
        (runs["c1"], "c1", 1), (runs["c2"], "c2", 0)]
    assert [c["id"] for c in body[runs["c1"]]] == [runs["grandchild"]]
    assert body[runs[XSS]] == []
    row = body[runs["c1"]][0]
    assert row["parent_id"] == runs["c1"] and row["status"] == "finished"
    assert {"params", "metrics", "tags", "started_at"} <= set(row)


def test_run_children_with_a_pipeline_runs_steps(client: Api, runs: dict[str, str]) -> None:
    ids = f"{runs['p1']},{runs['a']}"
    body = client.get("/api/run-children", params={"ids": ids, "steps": runs["p1"]}).json()
    assert [(st["step_name"], st["status"]) for st in body["steps"][runs["p1"]]] == [
        ("scale", "executed")]
    assert set(body["steps"]) == {runs["p1"]} and body["children"][runs["p1"]] == []
    assert client.get("/api/run-children", params={"ids": ids}).json()["steps"] == {}


def test_run_children_bad_input(client: Api, runs: dict[str, str]) -> None:
    res = client.get("/api/run-children", params={"ids": " , "})
    assert res.status_code == 400 and "parent run ids" in res.json()["detail"]
    res = client.get("/api/run-children", params={"ids": ",".join(["x"] * 1001)})
    assert res.status_code == 400 and "at most 1000" in res.json()["detail"]
    assert client.get("/api/run-children").status_code == 422
    res = client.get("/api/run-children", params={"ids": runs["a"], "steps": runs["p1"]})
    assert res.status_code == 400 and "steps among ids" in res.json()["detail"]
    res = client.get("/api/run-children", params={"ids": "0123456789nope",
                                                  "steps": "0123456789nope"})
    assert res.status_code == 404 and "0123456789nope" in res.json()["detail"]


def test_environment_diff_skips_a_run_without_a_recorded_environment() -> None:
    from types import SimpleNamespace

    from reprise.core.errors import NotFoundError
    from reprise.ui._api_compare import _environment

    prints = {"e1": {"python": {"version": "3.11.7"}, "packages": {"numpy": "2.0"},
                     "env_vars": {"TOKEN": "secret"}},
              "e2": {"python": {"version": "3.12.1"}, "packages": {"numpy": "2.0"},
                     "env_vars": {"TOKEN": "other"}}}

    def get_environment(env_hash: str) -> dict[str, Any]:
        if env_hash not in prints:
            raise NotFoundError(env_hash)
        return prints[env_hash]

    ctx: Any = SimpleNamespace(store=SimpleNamespace(get_environment=get_environment))
    runs = [{"env_hash": None}, {"env_hash": "e1"}, {"env_hash": "gone"}, {"env_hash": "e2"}]
    env = _environment(ctx, runs)
    assert env["recorded"] == [False, True, False, True]
    assert env["python"] == [None, "3.11.7", None, "3.12.1"]
    assert env["differs"] == [{"section": "python", "key": "version",
                               "values": [None, "3.11.7", None, "3.12.1"]}]
