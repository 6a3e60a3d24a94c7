"""The workspace the dashboard's browser tests look at: the demo's project
(examples/tabular) taken through the demo's own steps, smaller (three tuning trials),
built once per test session and shared by the test processes (pytest-xdist workers)
through a file lock in the session's common temporary folder. The dashboard only reads
it; a test that acts (promote, rollback) works on its own copy (:func:`copy_of`)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
_SETTINGS = ("REPRISE_WORKSPACE", "REPRISE_STORE_URL", "REPRISE_ARTIFACTS_URL")


def _demo(project: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("reprise_demo_ui", ROOT / "examples" / "demo.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.PROJECT = project
    return module


def build(project: Path) -> dict[str, object]:
    """Run the demo's steps in ``project`` (a fresh copy of examples/tabular); what was
    made, by name (run ids, model versions), also written to ``project/built.json``."""
    shutil.copytree(ROOT / "examples" / "tabular", project, ignore=shutil.ignore_patterns(
        ".reprise", "data", "reports", "__pycache__"))
    demo = _demo(project)
    demo.export_data()
    say = dict(echo=False, capture=True)
    demo.reprise("init", ".", **say)
    demo.reprise("data", "add", "cancer", "data/cancer.csv", "--schema", "schema.py:schema",
                 **say)
    demo.reprise("tune", "pipeline.py:tabular", "--space", "space.yaml", "--metric",
                 "train_mlp/best_val_loss", "--trials", "3", "--pruner", "median", "-p",
                 "C=0.5", **say)
    best = json.loads(demo.reprise("tune", "show", "tabular", "--json", **say))["best"]
    params = ["-p", "C=0.5", *(a for k, v in sorted(best["params"].items())
                               for a in ("-p", f"{k}={v}"))]
    run = json.loads(demo.reprise("run", "pipeline.py:tabular", *params, "--json", **say))
    demo.reprise("report", run["run_id"], "--name", "mlp", "-o", "reports/evaluation-mlp.html",
                 **say)
    demo.reprise("models", "register", "cancer", "--run", run["run_id"], **say)
    demo.reprise("models", "promote", "cancer", "1", "--alias", "production", **say)
    broken = demo.register_broken()
    made: dict[str, object] = {"run_id": run["run_id"], "study": "tabular",
                               "model": "cancer", "production": 1, "broken": broken}
    made["rollout"] = record_rollout(project, broken)
    made["monitoring"] = record_monitoring(project)
    made["dataset_versions"] = add_second_dataset_version(demo, project)
    made["markup_study"] = add_markup_study(project)
    made.update(run_page_runs(project))
    (project / "built.json").write_text(json.dumps(made))
    return made


def add_second_dataset_version(demo: ModuleType, project: Path) -> int:
    """``cancer@2`` (the runs above all read ``cancer@1``): 40 rows fewer and one column
    rescaled, so that the datasets page's diff of two versions has something to show."""
    import pandas as pd

    frame = pd.read_csv(project / "data" / "cancer.csv")
    frame = frame.iloc[40:].copy()
    frame["mean_texture"] = frame["mean_texture"] * 1.5
    frame.to_csv(project / "data" / "cancer-v2.csv", index=False)
    demo.reprise("data", "add", "cancer", "data/cancer-v2.csv", echo=False, capture=True)
    return 2


MARKUP = "<script>alert(1)</script>"


def add_markup_study(project: Path) -> str:
    """A three-trial study named like markup, with markup among a param's choices: the
    studies pages must show them as text."""
    import reprise

    ws = reprise.open_workspace(project)
    try:
        reprise.tune(lambda p: len(p["kind"]) / 10 + p["x"],
                     {"kind": ["<b>bold</b>", "<img src=x onerror=alert(2)>"],
                      "x": {"low": 0.0, "high": 1.0}},
                     n_trials=3, study=MARKUP, sampler="random", report=False, workspace=ws)
    finally:
        ws.close()
    return MARKUP


def shared(base: Path) -> Path:
    """The built project under ``base`` (the session's common temporary folder), built by
    the first process that asks, the others waiting on its lock."""
    from filelock import FileLock

    project = base / "ui-demo" / "tabular"
    with FileLock(str(base / "ui-demo.lock")):
        if not (project / "built.json").exists():
            shutil.rmtree(project.parent, ignore_errors=True)
            project.parent.mkdir(parents=True)
            saved = {k: os.environ.pop(k) for k in _SETTINGS if k in os.environ}
            try:  # the demo's embedded workspace, whatever this process was given
                build(project)
            finally:
                os.environ.update(saved)
    return project


def copy_of(project: Path, dest: Path) -> Path:
    """A private copy of the built project (for tests that change it)."""
    shutil.copytree(project, dest, ignore=shutil.ignore_patterns("*.lock"))
    return dest


def record_rollout(project: Path, candidate: int) -> str:
    """A canary of the broken ``cancer:CANDIDATE`` on ``cancer@production``, through
    reprise.serve's own functions: :func:`start_rollout` (forced: its gates failed), the
    per-version outcome buckets a server flushes (``store.add_buckets``), and
    :func:`analyze_once` deciding as a server's decider does, a real second apart: a step
    (both versions answer alike at 10 %), then two failed prediction-shift checks (the
    candidate answers one class only) and the rollback. The traffic is made up here
    (counts, latencies, outputs); the decisions and their evidence are the analysis' own.
    Returns the rollout's id."""
    import time

    import reprise
    from reprise.core import LATENCY_BOUNDS_MS, BucketRow
    from reprise.core._rollout_types import bucket_of, bucket_seconds, latency_index
    from reprise.serve import analyze_once, start_rollout

    ws = reprise.open_workspace(project)
    rec = start_rollout("cancer", candidate, steps=[10, 50, 100], interval="1s",
                        policy={"analysis": {"min_requests": 100}}, force=True,
                        reason="the UI demo: a canary of a model whose gates failed",
                        workspace=ws)

    def feed(version: int, requests: int, ms: float, outputs: dict[str, int]) -> None:
        latency = [0] * (len(LATENCY_BOUNDS_MS) + 1)
        latency[latency_index(ms)] = requests - requests // 10
        latency[latency_index(ms * 4)] += requests // 10  # a slow tenth: a p99 above p50
        ws.metadata.add_buckets([BucketRow(
            rec.id, version, bucket_of(time.time(), bucket_seconds(rec.interval_s)),
            "demo-server", requests, 0, latency, outputs)])

    def decide() -> str:
        for _ in range(40):  # a decision is due an interval after the last one
            time.sleep(0.3)
            d = analyze_once("cancer", "production", workspace=ws)
            if d.action != "wait":
                return str(d.action)
        raise RuntimeError("the demo's rollout took no decision")

    feed(1, 1800, 3.0, {"0": 670, "1": 1130})
    feed(candidate, 200, 3.5, {"0": 74, "1": 126})
    assert decide() == "step"
    while True:  # the candidate at 50 %: it answers "1" (benign) whatever it is asked
        feed(1, 600, 3.0, {"0": 220, "1": 380})
        feed(candidate, 600, 4.0, {"1": 600})
        action = decide()
        if action != "hold":
            break
    assert action == "rollback", action
    return str(rec.id)


def record_monitoring(project: Path) -> dict[str, object]:
    """Monitoring of ``cancer@production`` through reprise.monitor's own functions: the
    request log of v1 (600 rows drawn from the demo's data answered by the real model, written as the
    server writes its chunks; the last 150 rows with ``mean_radius`` 60 % larger), four
    live windows judged and stored by :func:`live_report`, then one round of the closed
    loop (:func:`watch_once`) that records the drift alarm and its notify action (POSTed
    to a webhook served here). Latencies and arrival times are made up."""
    import threading
    import time
    from http.server import BaseHTTPRequestHandler, HTTPServer

    import pandas as pd

    import reprise
    from reprise.monitor import live_report, watch_once
    from reprise.monitor._loop import live_detector
    from reprise.registry import load_model
    from reprise.serve._reqlog import _Record, build_table
    from reprise.store._request_log import write_request_chunk

    ws = reprise.open_workspace(project)
    pkg = load_model("cancer:1", workspace=ws)
    frame = pd.read_csv(project / "data" / "cancer.csv")
    frame = frame.sample(600, random_state=0, replace=True).reset_index(drop=True)
    frame.loc[450:, "mean_radius"] *= 1.6  # the newest window drifts
    columns = [f.name for f in pkg.signature.inputs]
    start = time.time() - 3600
    records = []
    for k, i in enumerate(range(0, len(frame), 5)):
        part = frame.iloc[i:i + 5]
        cols = pkg.signature.validate_columns({c: part[c].to_numpy() for c in columns}).columns
        outs = pkg.predict(cols)
        records.append(_Record("cancer", 1, f"demo-{k}", start + k * 29.0,
                               float(3.0 + (k % 7) * 0.4), len(part), cols, outs))
    write_request_chunk(ws, build_table(records), name="cancer", version=1, server="demo",
                        first_at=records[0].at, last_at=records[-1].at,
                        requests=len(records))
    live_report("cancer@production", window=150, windows=4, workspace=ws)

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            self.rfile.read(int(self.headers.get("content-length") or 0))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    hook = HTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=hook.serve_forever, daemon=True).start()
    try:
        policy = {"window": 150, "rules": [{"on": ["input_drift", "prediction_drift"],
                                            "do": ["notify"]}],
                  "notify": {"url": f"http://127.0.0.1:{hook.server_port}/hook"}}
        result = watch_once("cancer@production", policy,
                            live_detector("cancer@production", workspace=ws, window=150),
                            workspace=ws)
    finally:
        hook.shutdown()
        hook.server_close()
    return {"alarms": list(result.new_alarms)}


XSS = "<script>alert(1)</script>"


def _png(width: int, height: int) -> bytes:
    """A small RGB PNG (a gradient), written by hand: no imaging library needed."""
    import struct
    import zlib

    def chunk(tag: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + tag + data
                + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF))

    rows = b"".join(b"\x00" + bytes(v for x in range(width)
                                     for v in (x * 255 // width, y * 255 // height, 160))
                    for y in range(height))
    return (b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def run_page_runs(project: Path) -> dict[str, object]:
    """For the run page: a run that logs artifacts of each previewable kind (a CSV table,
    a PNG image, a text, JSON) and samples system metrics, a run named like a script (it
    must show as text), and a run that fails with a traceback."""
    import time

    import reprise

    ws = reprise.open_workspace(project)
    try:
        with reprise.start_run("artifacts-gallery", workspace=ws, params={"kind": "gallery"},
                               system_metrics_interval=0.05) as run:
            for i in range(20):
                run.log_metric("loss", 1.0 / (i + 1), step=i)
            time.sleep(0.5)  # a few system samples
            folder = project / "gallery"
            folder.mkdir(exist_ok=True)
            (folder / "predictions.csv").write_text(
                "id,label,score\n" + "".join(f"{i},{i % 2},{i / 10:.2f}\n" for i in range(30)))
            (folder / "notes.txt").write_text("trained on the demo data\n" + XSS + "\n")
            (folder / "curve.png").write_bytes(_png(64, 32))
            for name in ("predictions.csv", "notes.txt", "curve.png"):
                run.log_artifact(folder / name, name=f"reports/{name}")
            run.log_artifact({"threshold": 0.5, "note": XSS}, name="config.json")
            gallery = run.id
        with reprise.start_run(XSS, workspace=ws) as run:
            run.log_metric("x", 1.0)
            xss = run.id
        failed = ""
        try:
            with reprise.start_run("failing-run", workspace=ws) as run:
                failed = run.id
                raise RuntimeError("the GPU caught fire at step 3")
        except RuntimeError:
            pass
    finally:
        ws.close()
    return {"gallery_run": gallery, "xss_run": xss, "failed_run": failed}
