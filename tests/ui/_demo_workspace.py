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
    made.update(run_page_runs(project))
    (project / "built.json").write_text(json.dumps(made))
    return made


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
