"""The lineage, datasets and studies parts of the dashboard's API through httpx, on
SQLite and PostgreSQL: a pipeline run that read a dataset version, two versions of that
dataset, a tuning study; bad and unknown references (400 / 404 with a message, never
500); a registered model's lineage on the demo's workspace."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import reprise
from reprise import Dataset, step

pytest.importorskip("fastapi")

from reprise.ui import create_app  # noqa: E402
from tests.ui.test_api import (
    XSS,  # noqa: E402
    Api,  # noqa: E402
)


@step
def count(ds: Dataset) -> int:
    return len(ds.to_pandas())


@step
def double(n: int) -> int:
    return 2 * n


NUMS_1 = Dataset("nums@1")


@reprise.pipeline
def flow(data: Dataset = NUMS_1):  # type: ignore[no-untyped-def]
    return double(count(data))


@pytest.fixture
def made(tmp_path: Path, store_url: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A workspace: nums@1 and nums@2 (a row fewer, a column added), a run of ``flow``
    over nums@1, and a study of three trials whose objective is a plain function."""
    from reprise.pipeline._runner import run_pipeline

    monkeypatch.setenv("REPRISE_STORE_URL", store_url)
    monkeypatch.delenv("REPRISE_UI_TOKEN", raising=False)
    monkeypatch.chdir(tmp_path)
    ws = reprise.init(tmp_path)
    (tmp_path / "nums.csv").write_text("id,x\n1,1.5\n2,2.5\n3,10.0\n4,4.0\n")
    reprise.data.add_dataset("nums", tmp_path / "nums.csv", workspace=ws)
    (tmp_path / "nums2.csv").write_text("id,x,label\n1,1.5,a\n2,2.5,b\n3,99.0,a\n")
    reprise.data.add_dataset("nums", tmp_path / "nums2.csv", workspace=ws)
    run = run_pipeline(flow, {}, workspace=ws, workers=1)
    reprise.tune(lambda p: (p["x"] - 1.0) ** 2, {"x": {"low": -2.0, "high": 3.0}},
                 n_trials=3, study="quad", sampler="random", report=False, workspace=ws)
    yield {"ws": ws, "run_id": run.run_id, "client": Api(create_app(ws))}
    ws.close()


def test_openapi_documents_the_new_endpoints(made: dict[str, Any]) -> None:
    paths = made["client"].get("/openapi.json").json()["paths"]
    assert {"/api/lineage", "/api/datasets", "/api/datasets/{name}",
            "/api/datasets/{name}/diff", "/api/studies", "/api/studies/{name}"} <= set(paths)
    ref = paths["/api/lineage"]["get"]["parameters"][0]
    assert ref["name"] == "ref" and "NAME@ALIAS" in ref["description"]


def test_lineage_of_a_run_reaches_the_dataset_version_and_the_code(made: dict[str, Any]
                                                                    ) -> None:
    client, run_id = made["client"], made["run_id"]
    body = client.get("/api/lineage", params={"ref": run_id}).json()
    assert body["kind"] == "run" and body["root"] == run_id
    kinds = {n["id"]: n["kind"] for n in body["nodes"]}
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for n in body["nodes"]:
        by_kind.setdefault(n["kind"], []).append(n)
    (dataset,) = by_kind["dataset"]
    assert dataset["label"] == "nums@1" and (dataset["dataset"], dataset["version"]) == ("nums", 1)
    assert dataset["rows"] == 4 and dataset["format"] == "csv"
    assert sorted(n["label"] for n in by_kind["step"]) == ["count", "double"]
    (run,) = by_kind["run"]
    assert run["run"] == run_id and run["status"] == "finished"
    (code,) = by_kind["code"]
    assert len(code["hash"]) == 64
    edges = {(kinds[e["from"]], kinds[e["to"]]) for e in body["edges"]}
    # data flows dataset -> count -> its output -> double -> its output -> the run
    assert edges == {("dataset", "step"), ("step", "artifact"), ("artifact", "step"),
                     ("artifact", "run"), ("code", "run")}
    ids = set(kinds)
    assert all(e["from"] in ids and e["to"] in ids for e in body["edges"])
    # a prefix of the run id is enough; an artifact's own lineage by its hash
    assert client.get("/api/lineage", params={"ref": run_id[:10]}).json()["root"] == run_id
    out = next(n for n in body["nodes"] if n["kind"] == "artifact" and n["step"] == "double")
    by_hash = client.get("/api/lineage", params={"ref": out["hash"]}).json()
    assert by_hash["kind"] == "artifact"
    assert "nums@1" in {n["label"] for n in by_hash["nodes"]}
    with reprise.start_run("plain", workspace=made["ws"]) as plain:  # no pipeline, no steps
        pass
    alone = client.get("/api/lineage", params={"ref": plain.id}).json()
    assert [(n["kind"], n["label"]) for n in alone["nodes"]] == [("run", "plain")]
    assert alone["edges"] == []


BAD_REFS = [
    ("", 400, "give a run id"),
    ("   ", 400, "give a run id"),
    ("0123456789abcdef", 404, "no run or artifact '0123456789abcdef'"),
    ("f" * 64, 404, "no artifact recorded"),
    ("nope@production", 404, "no model 'nope'"),
    ("a@b@c", 400, "is not valid"),
    ("m:x", 400, "version number"),
    ("../../etc/passwd", 404, "no run or artifact"),
]


def test_bad_lineage_refs_are_400_or_404_with_a_message(made: dict[str, Any]) -> None:
    for ref, status, message in BAD_REFS:
        res = made["client"].get("/api/lineage", params={"ref": ref})
        assert res.status_code == status, (ref, res.text)
        assert message in res.json()["detail"], (ref, res.json())
    assert made["client"].get("/api/lineage").status_code == 422  # no ref at all


def test_datasets_versions_profile_and_diff(made: dict[str, Any]) -> None:
    client = made["client"]
    (ds,) = client.get("/api/datasets").json()["datasets"]
    assert ds["name"] == "nums" and ds["latest"] == 2 and ds["versions"] == 2
    assert [v["ref"] for v in ds["versions_list"]] == ["nums@2", "nums@1"]
    one = client.get("/api/datasets/nums", params={"version": 1}).json()
    assert one["ref"] == "nums@1" and one["rows"] == 4 and one["schema"] == {
        "id": "int64", "x": "double"}
    hist = one["profile"]["columns"]["x"]["histogram"]
    assert sum(hist["counts"]) == 4 and len(hist["edges"]) == len(hist["counts"]) + 1
    assert [v["version"] for v in one["versions"]] == [2, 1]
    assert client.get("/api/datasets/nums").json()["ref"] == "nums@2"  # latest
    diff = client.get("/api/datasets/nums/diff", params={"old": 1, "new": 2}).json()
    assert diff["identical"] is False and diff["rows"] == {"old": 4, "new": 3}
    assert diff["columns_added"] == ["label"] and diff["columns_removed"] == []
    assert diff["columns"]["x"]["max"] == {"old": 10.0, "new": 99.0}
    same = client.get("/api/datasets/nums/diff", params={"old": 2, "new": "latest"}).json()
    assert same["identical"] is True and same["columns"] == {}


BAD_DATASETS = [
    ("/api/datasets/nope", {}, 404, "no dataset named 'nope'"),
    ("/api/datasets/nums", {"version": 9}, 404, "has no version 9"),
    ("/api/datasets/nums", {"version": "x"}, 400, "must be a positive number"),
    ("/api/datasets/nums", {"version": 0}, 400, "must be a positive number"),
    ("/api/datasets/bad@name", {}, 400, "is not allowed"),
    ("/api/datasets/nums/diff", {"old": 1, "new": 7}, 404, "has no version 7"),
    ("/api/datasets/nope/diff", {"old": 1, "new": 2}, 404, "no dataset named"),
    ("/api/datasets/nums/diff", {"old": "-1", "new": 2}, 400, "must be a positive number"),
]


def test_bad_datasets_are_400_or_404_with_a_message(made: dict[str, Any]) -> None:
    for path, params, status, message in BAD_DATASETS:
        res = made["client"].get(path, params=params)
        assert res.status_code == status, (path, params, res.text)
        assert message in res.json()["detail"], (path, params, res.json())
    assert made["client"].get("/api/datasets/nums/diff").status_code == 422


def test_studies_trials_best_and_importances(made: dict[str, Any]) -> None:
    client = made["client"]
    (row,) = client.get("/api/studies").json()["studies"]
    assert row["study"] == "quad" and row["trials"] == 3 and row["direction"] == "minimize"
    body = client.get("/api/studies/quad").json()
    assert body["counts"]["complete"] == 3 and len(body["trials"]) == 3
    values = [t["value"] for t in body["trials"]]
    assert body["best"]["value"] == min(values)
    assert all(t["state"] == "complete" and set(t["params"]) == {"x"} for t in body["trials"])
    assert set(body["importances"]) <= {"x"}  # one param: fANOVA's share is all of it
    run_ids = [t["run_id"] for t in body["trials"]]
    for run_id in filter(None, run_ids):  # each trial's run is a run of the store
        assert client.get(f"/api/runs/{run_id}").status_code == 200
    res = client.get("/api/studies/nope")
    assert res.status_code == 404 and "no study 'nope'" in res.json()["detail"]
    assert "quad" in res.json()["detail"]
    res = client.get("/api/studies/" + XSS)
    assert res.status_code == 404 and XSS in res.json()["detail"]  # JSON data, not HTML
    assert res.headers["content-type"] == "application/json"


def test_model_lineage_on_the_demo_workspace(demo_project: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """``cancer@production`` down to ``cancer@1`` and the code (the demo's SQLite store)."""
    for key in ("REPRISE_WORKSPACE", "REPRISE_STORE_URL", "REPRISE_ARTIFACTS_URL"):
        monkeypatch.delenv(key, raising=False)
    built = json.loads((demo_project / "built.json").read_text())
    ws = reprise.open_workspace(demo_project)
    try:
        client = Api(create_app(ws))
        body = client.get("/api/lineage", params={"ref": "cancer@production"}).json()
        assert body["kind"] == "model" and body["ref"] == "cancer@production"
        model = next(n for n in body["nodes"] if n["kind"] == "model")
        assert (model["label"], model["model"], model["version"]) == ("cancer:1", "cancer", 1)
        assert model["run"] == built["run_id"]
        labels = {n["label"] for n in body["nodes"] if n["kind"] == "dataset"}
        assert labels == {"cancer@1"}
        assert {"train_mlp", "featurize", "package"} <= {
            n["label"] for n in body["nodes"] if n["kind"] == "step"}
        assert any(n["kind"] == "code" for n in body["nodes"])
        assert body["summary"]["datasets"] == ["cancer@1"]
        by_version = client.get("/api/lineage", params={"ref": "cancer:1"}).json()
        assert {n["id"] for n in by_version["nodes"]} == {n["id"] for n in body["nodes"]}
        res = client.get("/api/lineage", params={"ref": "cancer@nowhere"})
        assert res.status_code == 404 and "no alias 'nowhere'" in res.json()["detail"]
        res = client.get("/api/lineage", params={"ref": "cancer:99"})
        assert res.status_code == 404 and "no version 99" in res.json()["detail"]
        diff = client.get("/api/datasets/cancer/diff", params={"old": 1, "new": 2}).json()
        assert diff["rows"] == {"old": 569, "new": 529} and "mean_texture" in diff["columns"]
    finally:
        ws.close()
