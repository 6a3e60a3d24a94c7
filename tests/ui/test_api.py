"""The dashboard's JSON API through FastAPI's Api (httpx), on SQLite and
PostgreSQL: every endpoint, the token, bad queries (400 with a message, never 500),
unknown runs (404), user strings returned as data."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import reprise
from reprise import step

pytest.importorskip("fastapi")
import httpx  # noqa: E402

from reprise.ui import create_app  # noqa: E402

XSS = "<script>alert(1)</script>"


class Api:
    """A synchronous face on httpx's ASGI transport (no sockets; Starlette's own
    TestClient warns about its httpx use, and warnings are errors here)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    def get(self, path: str, **kw: Any) -> httpx.Response:
        async def go() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
                return await c.get(path, **kw)

        # in a thread of its own: Playwright's sync API (a browser test earlier in this
        # process) leaves an event loop running in this one, where asyncio.run refuses
        with ThreadPoolExecutor(1) as pool:
            return pool.submit(asyncio.run, go()).result()


@pytest.fixture
def ws(tmp_path: Path, store_url: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("REPRISE_STORE_URL", store_url)
    monkeypatch.delenv("REPRISE_UI_TOKEN", raising=False)
    w = reprise.init(tmp_path)
    yield w
    w.close()


@pytest.fixture
def runs(ws: Any) -> dict[str, str]:
    ids: dict[str, str] = {}
    for name, lr, f1, team in [("a", 0.001, 0.95, "x"), ("b", 0.1, 0.5, "y"),
                               (XSS, 0.005, 0.97, "x")]:
        with reprise.start_run(name, params={"lr": lr}, tags={"team": team},
                               workspace=ws) as run:
            for step in range(50):
                run.log_metric("loss", 1.0 / (step + 1), step=step)
            run.log_metric("loss", 7.0, step=17)  # a spike at step 17 (a later write)
            run.log_metric("f1", f1)
            ids[name] = run.id
        if name == "a":
            with reprise.start_run("child", parent=run, workspace=ws) as child:
                ids["child"] = child.id
    with pytest.raises(RuntimeError), reprise.start_run("broken", workspace=ws) as run:
        ids["broken"] = run.id
        raise RuntimeError("disk on fire")
    return ids


@pytest.fixture
def client(ws: Any, runs: dict[str, str]) -> Api:
    return Api(create_app(ws))


def test_health_and_openapi(client: Api) -> None:
    assert client.get("/api/health").json()["read_only"] is True
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/api/runs", "/api/runs/{run_id}", "/api/runs/{run_id}/metrics/{key}",
            "/api/health"} <= set(paths)
    assert client.get("/docs").status_code == 404  # Swagger UI would load from a CDN


def test_runs_table_filter_sort_page(client: Api, runs: dict[str, str]) -> None:
    body = client.get("/api/runs").json()
    assert body["total"] == 5  # nested and failed runs included
    newest = body["runs"][0]
    assert newest["id"] == runs["broken"] and newest["status"] == "failed"
    row = next(r for r in body["runs"] if r["id"] == runs["a"])
    assert row["params"] == {"lr": 0.001} and row["tags"] == {"team": "x"}
    assert row["metrics"] == {"f1": 0.95, "loss": pytest.approx(1 / 50)}
    assert next(r for r in body["runs"] if r["id"] == runs["child"])["parent_id"] == runs["a"]

    q = 'metrics.f1 > 0.9 and params.lr < 0.01 and status = "finished" and tags.team = "x"'
    got = client.get("/api/runs", params={"q": q, "sort": "-metrics.f1"}).json()
    assert [r["id"] for r in got["runs"]] == [runs[XSS], runs["a"]]
    got = client.get("/api/runs", params={"q": q, "sort": "params.lr"}).json()
    assert [r["id"] for r in got["runs"]] == [runs["a"], runs[XSS]]
    page = client.get("/api/runs", params={"sort": "name", "limit": 2, "offset": 1}).json()
    assert page["total"] == 5 and [r["name"] for r in page["runs"]] == ["a", "b"]
    top = client.get("/api/runs", params={"top_level": "true"}).json()
    assert runs["child"] not in {r["id"] for r in top["runs"]} and top["total"] == 4
    assert client.get("/api/runs", params={"q": "tags.team = 'nobody'"}).json()["total"] == 0


BAD = [
    ({"q": "metrics.f1 >"}, "expected a value"),
    ({"q": "bogus = 1"}, "unknown field 'bogus'"),
    ({"q": "status = 'nope'"}, "unknown status 'nope'"),
    ({"q": "(metrics.f1 > 1"}, "never closed"),
    ({"q": "metrics.f1 > 1 ; drop table runs"}, "unexpected character ';'"),
    ({"sort": "-wat"}, "unknown field 'wat'"),
]


def test_bad_queries_are_400_with_a_message(client: Api) -> None:
    for params, message in BAD:  # one workspace for all (each costs ~0.8 s to fill)
        res = client.get("/api/runs", params=params)
        assert res.status_code == 400, params
        assert message in res.json()["detail"], (params, res.json())


def test_bad_numbers_are_422(client: Api) -> None:
    assert client.get("/api/runs", params={"limit": 0}).status_code == 422
    assert client.get("/api/runs", params={"limit": "x"}).status_code == 422


def test_run_detail(client: Api, runs: dict[str, str]) -> None:
    body = client.get(f"/api/runs/{runs['a']}").json()
    assert body["params"] == {"lr": 0.001} and body["tags"] == {"team": "x"}
    assert body["metrics"]["f1"] == 0.95 and body["children"] == [runs["child"]]
    assert body["environment"]["hash"] == body["env_hash"]
    assert "python" in body["environment"] and body["environment"]["packages_count"] > 0
    assert "env_vars" not in body["environment"] and body["steps"] == []
    broken = client.get(f"/api/runs/{runs['broken']}").json()
    assert broken["status"] == "failed" and "disk on fire" in broken["error"]


@step
def double(n: int) -> int:
    return 2 * n


@reprise.pipeline
def tiny(n: int = 2):  # type: ignore[no-untyped-def]
    return double(n)


def test_pipeline_run_steps(ws: Any) -> None:
    from reprise.pipeline._runner import run_pipeline

    first = run_pipeline(tiny, {}, workspace=ws, workers=1)
    again = run_pipeline(tiny, {}, workspace=ws, workers=1)
    client = Api(create_app(ws))
    steps = [client.get(f"/api/runs/{r.run_id}").json()["steps"] for r in (first, again)]
    assert [(st["step_name"], st["status"]) for st in steps[0]] == [("double", "executed")]
    assert [(st["step_name"], st["status"]) for st in steps[1]] == [("double", "cached")]
    assert steps[0][0]["outputs"][0]["hash"] == steps[1][0]["outputs"][0]["hash"]


def test_unknown_run_is_404(client: Api, runs: dict[str, str]) -> None:
    res = client.get("/api/runs/0123456789abcdef")
    assert res.status_code == 404 and "no run with id" in res.json()["detail"]
    assert client.get("/api/runs/0123456789abcdef/metrics/loss").status_code == 404
    res = client.get(f"/api/runs/{runs['a']}/metrics/nope")
    assert res.status_code == 404 and "no metric 'nope'" in res.json()["detail"]


def test_metric_series_downsampled_and_zoomed(client: Api, runs: dict[str, str]) -> None:
    url = f"/api/runs/{runs['a']}/metrics/loss"
    full = client.get(url).json()
    assert full["total_points"] == 51 and not full["downsampled"]
    assert full["xs"][0] == 0 and full["xs"][-1] == 49 and 7.0 in full["ys"]
    small = client.get(url, params={"max_points": 10}).json()
    assert small["downsampled"] and len(small["xs"]) <= 10
    assert 7.0 in small["ys"] and min(small["ys"]) == min(full["ys"])  # extremes kept
    assert small["xs"][0] == 0 and small["xs"][-1] == 49
    zoom = client.get(url, params={"max_points": 10, "start": 20, "end": 25}).json()
    assert zoom["in_range"] == 6 and zoom["xs"] == [20, 21, 22, 23, 24, 25]  # full resolution
    by_time = client.get(url, params={"x": "time"}).json()
    assert by_time["x"] == "time" and by_time["xs"] == sorted(by_time["xs"])
    assert client.get(url, params={"x": "epoch"}).status_code == 422
    assert client.get(url, params={"max_points": 3}).status_code == 422
    res = client.get(url, params={"start": 5, "end": 1})
    assert res.status_code == 400 and "after end" in res.json()["detail"]


def test_user_strings_come_back_as_json_data(client: Api, runs: dict[str, str]) -> None:
    res = client.get("/api/runs", params={"q": f'name = "{XSS}"'})
    assert res.headers["content-type"] == "application/json"
    assert [r["name"] for r in res.json()["runs"]] == [XSS]
    assert client.get(f"/api/runs/{runs[XSS]}").json()["name"] == XSS


def test_live_and_new_runs_show_up(ws: Any, client: Api) -> None:
    run = reprise.start_run("live", workspace=ws)  # started after the app
    try:
        run.log_metric("loss", 0.25, step=3)
        run.log_metric("val/loss", 0.5, step=3)
        row = client.get("/api/runs", params={"q": "name = 'live'"}).json()["runs"]
        assert [(r["id"], r["status"], r["metrics"]) for r in row] == [
            (run.id, "running", {"loss": 0.25, "val/loss": 0.5})]
        series = client.get(f"/api/runs/{run.id}/metrics/loss").json()
        assert series["xs"] == [3] and series["ys"] == [0.25]
        assert client.get(f"/api/runs/{run.id}/metrics/val/loss").json()["ys"] == [0.5]
    finally:
        run.end()
    assert client.get(f"/api/runs/{run.id}").json()["status"] == "finished"


def test_token_required_when_set(ws: Any, runs: dict[str, str],
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    client = Api(create_app(ws, token="s3cret"))
    for path in ("/api/health", "/api/runs", f"/api/runs/{runs['a']}",
                 f"/api/runs/{runs['a']}/metrics/loss"):
        assert client.get(path).status_code == 401
        assert client.get(path, headers={"Authorization": "Bearer wrong"}).status_code == 401
        ok = client.get(path, headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200, path
    monkeypatch.setenv("REPRISE_UI_TOKEN", "from-env")
    env_client = Api(create_app(ws))
    assert env_client.get("/api/runs").status_code == 401
    assert env_client.get("/api/runs", headers={"Authorization": "Bearer from-env"}
                          ).status_code == 200
