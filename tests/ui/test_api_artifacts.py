"""The run page's API through httpx on SQLite and PostgreSQL: a run's artifacts (its own
and its steps' outputs), previews (tables, texts, folders), downloads (media type, a safe
Content-Disposition, nosniff, HTML sandboxed by its CSP, big ones streamed), the code
snapshot, metric keys, the full environment and the models a run produced. An artifact is
only ever found by run id and recorded name: path traversal in any form is a 404."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

import reprise
from reprise import step

pytest.importorskip("fastapi")
import httpx  # noqa: E402

from reprise.ui import create_app  # noqa: E402
from tests.ui.test_api import Api  # noqa: E402

XSS = "<script>alert(1)</script>"
CSV = "id,label,score\n" + "".join(f"{i},{i % 2},{i / 10}\n" for i in range(50))
HTML = "<html><body><h1>Report</h1><script>alert(1)</script></body></html>"


def _run(coro: Any) -> Any:
    """``asyncio.run`` in a thread of its own: Playwright's sync API keeps an event loop
    running in the main thread when browser tests ran earlier in the same process."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


@pytest.fixture
def ws(tmp_path: Path, store_url: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("REPRISE_STORE_URL", store_url)
    monkeypatch.delenv("REPRISE_UI_TOKEN", raising=False)
    w = reprise.init(tmp_path / "ws")
    yield w
    w.close()


@pytest.fixture
def made(ws: Any, tmp_path: Path) -> dict[str, Any]:
    import pandas as pd

    files = tmp_path / "files"
    (files / "folder" / "sub").mkdir(parents=True)
    (files / "predictions.csv").write_text(CSV)
    (files / "notes.txt").write_text("x" * 10_000)
    (files / "report.html").write_text(HTML)
    (files / "weird name ü\";.txt").write_text("hello")
    (files / "folder" / "a.py").write_text("print('a')\n")
    (files / "folder" / "sub" / "b.bin").write_bytes(b"\xff\xfe\x00\x01")
    (files / "big.bin").write_bytes(os.urandom(3 * 2**20 + 5))
    (files / "bad.parquet").write_bytes(b"not parquet at all")
    (files / "bad.npy").write_bytes(b"\x93NUMPY garbage")
    (files / "bad.tsv").write_bytes(b"a\tb\n\xff\xfe\t\x00\n")
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET")
    with reprise.start_run("gallery", workspace=ws) as run:
        for name in ("predictions.csv", "notes.txt", "report.html", "big.bin", "bad.parquet",
                     "bad.npy", "bad.tsv"):
            run.log_artifact(files / name, name=f"out/{name}")
        run.log_artifact(files / "weird name ü\";.txt", name="weird name ü\";.txt")
        run.log_artifact(files / "folder", name="folder")
        run.log_artifact(pd.DataFrame({"a": range(100), "b": [XSS] * 100}), name="frame")
        run.log_artifact({"k": XSS}, name="config.json")
        import numpy as np

        run.log_artifact(np.arange(3000, dtype=np.float32).reshape(1000, 3), name="matrix")
        run.log_artifact(np.arange(7), name="vector")
        for i in range(30):
            run.log_metric("loss", 1 / (i + 1), step=i)
            run.log_metric("system/cpu_percent", float(i), step=i)
        run.log_metric("train/summary/energy_j", 12.5)
        gallery = run.id
    with reprise.start_run("other", workspace=ws) as run:
        run.log_artifact(secret, name="secret.txt")
        other = run.id
    return {"gallery": gallery, "other": other, "files": files}


@pytest.fixture
def client(ws: Any, made: dict[str, Any]) -> Api:
    return Api(create_app(ws))


def _art(client: Api, run: str, what: str, name: str, **params: Any) -> httpx.Response:
    return client.get(f"/api/runs/{run}/artifact/{what}", params={"name": name, **params})


def test_the_api_documents_the_new_endpoints(client: Api) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    for path in ("/api/runs/{run_id}/artifacts", "/api/runs/{run_id}/artifact/preview",
                 "/api/runs/{run_id}/artifact/download", "/api/runs/{run_id}/code",
                 "/api/runs/{run_id}/metric-keys", "/api/runs/{run_id}/environment",
                 "/api/runs/{run_id}/models"):
        assert paths[path]["get"]["summary"], path


def test_list_a_runs_artifacts(client: Api, made: dict[str, Any]) -> None:
    body = client.get(f"/api/runs/{made['gallery']}/artifacts").json()
    arts = {a["name"]: a for a in body["artifacts"]}
    assert set(arts) == {"out/predictions.csv", "out/notes.txt", "out/report.html",
                         "out/big.bin", "weird name ü\";.txt", "folder", "frame",
                         "config.json", "matrix", "vector", "out/bad.parquet", "out/bad.npy",
                         "out/bad.tsv"}
    csv = arts["out/predictions.csv"]
    assert csv["size"] == len(CSV) and len(csv["hash"]) == 64
    assert (csv["media_type"], csv["preview"], csv["origin"]) == ("text/csv", "table", "run")
    assert arts["frame"]["preview"] == "table" and arts["frame"]["kind"] == "dataframe"
    assert arts["out/report.html"]["preview"] == "html"
    assert arts["folder"]["preview"] == "dir"
    assert arts["config.json"]["media_type"] == "application/json"
    assert arts["out/big.bin"]["media_type"] == "application/octet-stream"
    assert "secret.txt" not in arts  # another run's
    res = client.get("/api/runs/0123456789abcdef/artifacts")
    assert res.status_code == 404 and "no run" in res.json()["detail"]


def test_previews(client: Api, made: dict[str, Any]) -> None:
    run = made["gallery"]
    table = _art(client, run, "preview", "out/predictions.csv", rows=3).json()["table"]
    assert table["columns"] == ["id", "label", "score"]
    assert table["rows"] == [{"id": "0", "label": "0", "score": "0.0"},
                             {"id": "1", "label": "1", "score": "0.1"},
                             {"id": "2", "label": "0", "score": "0.2"}]
    frame = _art(client, run, "preview", "frame", rows=5).json()["table"]
    assert frame["total_rows"] == 100 and len(frame["rows"]) == 5
    assert frame["rows"][4] == {"a": 4, "b": XSS} and frame["columns"][:2] == ["a", "b"]
    matrix = _art(client, run, "preview", "matrix", rows=2).json()
    assert (matrix["media_type"], matrix["meta"]) == ("application/x-npy",
                                                      {"dtype": "float32", "shape": [1000, 3]})
    assert matrix["table"] == {"columns": ["0", "1", "2"], "total_rows": 1000, "rows": [
        {"0": 0.0, "1": 1.0, "2": 2.0}, {"0": 3.0, "1": 4.0, "2": 5.0}]}
    vector = _art(client, run, "preview", "vector", rows=50).json()["table"]
    assert vector["rows"] == [{"value": i} for i in range(7)] and vector["total_rows"] == 7
    text = _art(client, run, "preview", "out/notes.txt", max_bytes=100).json()
    assert text["text"] == "x" * 100 and text["truncated"] is True
    assert _art(client, run, "preview", "config.json").json()["text"] == '{"k":"' + XSS + '"}'
    folder = _art(client, run, "preview", "folder").json()["files"]
    assert [(f["path"], f["text"]) for f in folder] == [("a.py", "print('a')\n"),
                                                         ("sub/b.bin", None)]
    big = _art(client, run, "preview", "out/big.bin").json()  # no preview: a description
    assert big["preview"] == "none" and "text" not in big and "table" not in big
    for broken in ("out/bad.parquet", "out/bad.npy"):  # not what their names say: a 400
        res = _art(client, run, "preview", broken)
        assert res.status_code == 400 and "cannot be previewed" in res.json()["detail"], broken
    tsv = _art(client, run, "preview", "out/bad.tsv").json()["table"]  # bad UTF-8: replaced
    assert tsv["columns"] == ["a", "b"] and tsv["rows"] == [{"a": "\ufffd\ufffd", "b": "\x00"}]
    for bad in ({"rows": 0}, {"rows": 10_000}, {"max_bytes": 0}):
        assert _art(client, run, "preview", "frame", **bad).status_code == 422


def test_downloads(client: Api, made: dict[str, Any]) -> None:
    run = made["gallery"]
    res = _art(client, run, "download", "out/predictions.csv")
    assert res.status_code == 200 and res.text == CSV
    assert res.headers["content-type"] == "text/csv; charset=utf-8"
    assert res.headers["x-content-type-options"] == "nosniff"
    assert res.headers["content-disposition"] == (
        "attachment; filename=\"predictions.csv\"; filename*=UTF-8''predictions.csv")
    html = _art(client, run, "download", "out/report.html")
    assert html.text == HTML and html.headers["content-type"].startswith("text/html")
    csp = html.headers["content-security-policy"]
    assert "sandbox" in csp and "default-src 'none'" in csp and "script" not in csp
    assert html.headers["content-disposition"].startswith("attachment;")
    weird = _art(client, run, "download", "weird name ü\";.txt")
    disposition = weird.headers["content-disposition"]
    assert disposition == ("attachment; filename=\"weird_name____.txt\"; "
                           "filename*=UTF-8''weird%20name%20%C3%BC%22%3B.txt")
    assert weird.text == "hello"
    big = _art(client, run, "download", "out/big.bin")
    assert big.content == (made["files"] / "big.bin").read_bytes()
    assert big.headers["content-length"] == str(3 * 2**20 + 5)


TRAVERSALS = ["../secret.txt", "../../secret.txt", "/etc/passwd", "out/../../secret.txt",
              "%2e%2e/secret.txt", "..%2F..%2Fsecret.txt", "out/./notes.txt", "secret.txt",
              "out\\..\\..\\secret.txt", "out/notes.txt\x00", "OUT/NOTES.TXT", " out/notes.txt"]


def test_path_traversal_is_refused(client: Api, made: dict[str, Any], ws: Any) -> None:
    run = made["gallery"]
    secret_hash = client.get(f"/api/runs/{made['other']}/artifacts").json()[
        "artifacts"][0]["hash"]
    for name in [*TRAVERSALS, secret_hash, str(made["files"] / "notes.txt")]:
        for what in ("preview", "download"):
            res = _art(client, run, what, name)
            assert res.status_code == 404, (name, what, res.status_code)
            assert "TOP-SECRET" not in res.text and "root:" not in res.text
            assert "no artifact named" in res.json()["detail"]
    # raw URLs, encoded by hand, straight to the server (httpx would not re-encode them)
    for raw in (f"/api/runs/{run}/artifact/download?name=..%2F..%2Fsecret.txt",
                f"/api/runs/{run}/artifact/download?name=%2Fetc%2Fpasswd",
                f"/api/runs/{run}/artifact/download?name=%252e%252e%252fsecret.txt",
                "/api/runs/..%2F..%2Fetc/artifact/download?name=passwd",
                "/api/runs/../../etc/passwd",
                f"/api/runs/{run}/artifact/..%2F..%2F..%2Fetc%2Fpasswd"):
        res = client.get(raw)
        assert res.status_code in (400, 404), (raw, res.status_code)
        assert "TOP-SECRET" not in res.text and "root:" not in res.text
    assert _art(client, "0123456789abcdef", "download", "out/notes.txt").status_code == 404
    assert client.get(f"/api/runs/{run}/artifact/download").status_code == 422  # no name
    assert _art(client, run, "download", "").status_code == 422


def test_a_big_artifact_is_streamed(ws: Any, made: dict[str, Any]) -> None:
    """The download is sent as many body messages of at most 64 KiB, each as it is read,
    not as one body holding the whole file."""
    app = create_app(ws)
    sent: list[dict[str, Any]] = []
    asked: list[int] = []

    async def receive() -> dict[str, Any]:
        asked.append(1)
        if len(asked) == 1:
            return {"type": "http.request", "body": b"", "more_body": False}
        await asyncio.Event().wait()  # the client stays connected
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "GET", "scheme": "http", "server": ("test", 80),
             "client": ("127.0.0.1", 1), "root_path": "",
             "path": f"/api/runs/{made['gallery']}/artifact/download",
             "raw_path": f"/api/runs/{made['gallery']}/artifact/download".encode(),
             "query_string": b"name=out%2Fbig.bin", "headers": [(b"host", b"test")]}
    _run(app(scope, receive, send))
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 200
    bodies = [m for m in sent if m["type"] == "http.response.body"]
    chunks = [m["body"] for m in bodies if m["body"]]
    assert len(chunks) >= 48 and max(len(c) for c in chunks) <= 2**16
    assert b"".join(chunks) == (made["files"] / "big.bin").read_bytes()
    assert all(m.get("more_body") for m in bodies[:-1])


def test_metric_keys_and_environment(client: Api, made: dict[str, Any]) -> None:
    run = made["gallery"]
    keys = {k["key"]: k for k in client.get(f"/api/runs/{run}/metric-keys").json()["keys"]}
    assert keys["loss"] == {"key": "loss", "points": 30, "first_step": 0, "last_step": 29,
                            "system": False, "last": pytest.approx(1 / 30)}
    assert keys["system/cpu_percent"]["system"] is True
    assert keys["train/summary/energy_j"]["system"] is True
    assert keys["train/summary/energy_j"]["points"] == 1
    env = client.get(f"/api/runs/{run}/environment").json()
    assert env["python"]["version"].count(".") == 2 and "env_vars" not in env
    names = [p["name"] for p in env["packages"]]
    assert names == sorted(names, key=str.lower) and len(names) > 10
    assert all(set(p) == {"name", "version"} for p in env["packages"])
    assert client.get(f"/api/runs/{run}/models").json() == {"run_id": run, "models": []}
    assert client.get(f"/api/runs/{run}/code").json() == {"run_id": run, "hash": None,
                                                          "files": []}
    for path in ("metric-keys", "environment", "models", "code"):
        res = client.get(f"/api/runs/0123456789abcdef/{path}")
        assert res.status_code == 404 and "no run" in res.json()["detail"], path


def test_the_token_guards_every_new_endpoint(ws: Any, made: dict[str, Any]) -> None:
    client = Api(create_app(ws, token="s3cret"))
    run = made["gallery"]
    for path in (f"/api/runs/{run}/artifacts", f"/api/runs/{run}/code",
                 f"/api/runs/{run}/artifact/preview?name=config.json",
                 f"/api/runs/{run}/artifact/download?name=config.json",
                 f"/api/runs/{run}/metric-keys", f"/api/runs/{run}/environment",
                 f"/api/runs/{run}/models"):
        res = client.get(path)
        assert res.status_code == 401 and XSS not in res.text, path
        assert client.get(path, headers={"Authorization": "Bearer s3cret"}).status_code == 200


@step
def triple(n: int) -> int:
    return 3 * n


@reprise.pipeline
def threes(n: int = 2):  # type: ignore[no-untyped-def]
    return triple(n)


def test_a_pipeline_runs_steps_outputs_and_code_snapshot(ws: Any) -> None:
    from reprise.pipeline._runner import run_pipeline

    result = run_pipeline(threes, {}, workspace=ws, workers=1)
    client = Api(create_app(ws))
    arts = {a["name"]: a for a in
            client.get(f"/api/runs/{result.run_id}/artifacts").json()["artifacts"]}
    out = arts["triple/output"]
    assert out["origin"] == "step" and out["step"] == "triple" and out["kind"] == "json"
    assert _art(client, result.run_id, "preview", "triple/output").json()["text"] == "6"
    assert _art(client, result.run_id, "download", "triple/output").content == b"6"
    code = client.get(f"/api/runs/{result.run_id}/code").json()
    assert code["hash"] == arts["code"]["hash"]
    mine = [f for f in code["files"] if f["path"].endswith("test_api_artifacts.py")]
    assert mine and "def triple(n: int) -> int:" in mine[0]["text"]
