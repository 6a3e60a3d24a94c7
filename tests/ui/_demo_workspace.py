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
    made["dataset_versions"] = add_second_dataset_version(demo, project)
    made["markup_study"] = add_markup_study(project)
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
