"""End-to-end pipeline behaviour through the CLI, as a user runs it: caching,
what the cache key covers, resume after failure, parallel branches, Ctrl-C,
verification and lineage."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

HELPERS = '''
def scale(x, factor):
    return x * factor
'''

PIPELINE = '''
import os
import numpy as np
import reprise
from reprise import step
from helpers import scale

OFFSET = 1.0


@step
def make(n: int) -> np.ndarray:
    return np.random.rand(n)


@step
def left(x: np.ndarray) -> np.ndarray:
    # a comment
    return scale(x, 2.0)


@step
def right(x: np.ndarray) -> np.ndarray:
    return x + OFFSET


@step
def combine(a: np.ndarray, b: np.ndarray) -> dict:
    reprise.log_metric("total", float(a.sum() + b.sum()))
    return {"total": float(a.sum() + b.sum())}


@reprise.pipeline
def demo(n: int = 100):
    x = make(n)
    return combine(left(x), right(x))
'''


def write_project(root: Path, pipeline: str = PIPELINE, helpers: str = HELPERS) -> None:
    (root / "flow.py").write_text(textwrap.dedent(pipeline))
    (root / "helpers.py").write_text(textwrap.dedent(helpers))


def cli(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "REPRISE_WORKSPACE"}
    res = subprocess.run([sys.executable, "-m", "reprise.cli", *args], cwd=root, env=env,
                         capture_output=True, text=True, timeout=240)
    if check and res.returncode != 0:
        raise AssertionError(f"reprise {args} exited {res.returncode}:\n{res.stdout}\n{res.stderr}")
    return res


def run_json(root: Path, *args: str) -> dict[str, Any]:
    return json.loads(cli(root, "run", "flow.py:demo", "--json", *args).stdout)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    root.mkdir()
    write_project(root)
    cli(root, "init", ".")
    return root


def test_second_run_reuses_every_step_and_verifies(project: Path) -> None:
    first = run_json(project)
    assert sorted(first["executed"]) == ["combine", "left", "make", "right"]
    second = run_json(project)
    assert second["executed"] == [] and sorted(second["reused"]) == sorted(first["executed"])
    assert second["outputs"] == first["outputs"]
    res = cli(project, "verify", first["run_id"], "--json")
    report = json.loads(res.stdout)
    assert report["ok"] and {s["status"] for s in report["steps"]} == {"identical"}
    shown = json.loads(cli(project, "runs", "show", first["run_id"][:10], "--json").stdout)
    assert shown["status"] == "finished"


def test_comment_keeps_key_helper_change_reruns_exactly_dependents(project: Path) -> None:
    run_json(project)
    write_project(project, PIPELINE.replace("# a comment", "# another comment\n    # more"))
    assert run_json(project)["executed"] == []
    write_project(project, helpers=HELPERS.replace("x * factor", "x * factor + 1"))
    res = run_json(project)
    assert sorted(res["executed"]) == ["combine", "left"]  # right and make do not call it
    write_project(project, PIPELINE.replace("OFFSET = 1.0", "OFFSET = 2.0"),
                  HELPERS.replace("x * factor", "x * factor + 1"))
    assert sorted(run_json(project)["executed"]) == ["combine", "right"]


def test_params_seed_force_and_no_cache(project: Path) -> None:
    run_json(project)
    assert sorted(run_json(project, "-p", "n=50")["executed"]) == ["combine", "left", "make",
                                                                   "right"]
    assert run_json(project, "-p", "n=50")["executed"] == []
    assert len(run_json(project, "--seed", "3")["executed"]) == 4  # make's seed changed
    assert sorted(run_json(project, "--force", "left")["executed"]) == ["combine", "left"]
    assert len(run_json(project, "--no-cache")["executed"]) == 4


def test_a_no_cache_run_stores_what_later_runs_reuse(project: Path) -> None:
    first = run_json(project, "--no-cache")  # the workspace's first run: the cache is empty
    assert len(first["executed"]) == 4
    second = run_json(project)
    assert second["executed"] == [] and second["outputs"] == first["outputs"]


MOVED = '''
import numpy as np
from reprise import step

OFFSET = 1.0


@step
def right(x: np.ndarray) -> np.ndarray:
    return x + OFFSET
'''


def test_a_step_moved_unchanged_to_another_module_is_reused(project: Path) -> None:
    first = run_json(project)
    flow = PIPELINE.replace("OFFSET = 1.0\n", "").replace(
        "@step\ndef right(x: np.ndarray) -> np.ndarray:\n    return x + OFFSET\n", "")
    assert "right" not in flow.replace("right(x)", "")
    (project / "moved.py").write_text(textwrap.dedent(MOVED))
    write_project(project, flow.replace("from helpers import scale",
                                        "from helpers import scale\nfrom moved import right"))
    second = run_json(project)
    assert second["executed"] == [] and second["outputs"] == first["outputs"]
    (project / "moved.py").write_text(textwrap.dedent(MOVED).replace("1.0", "2.0"))
    assert sorted(run_json(project)["executed"]) == ["combine", "right"]


def test_failure_then_resume(project: Path) -> None:
    broken = PIPELINE.replace("return {\"total\"", "raise RuntimeError('boom')\n    return {\"total\"")
    write_project(project, broken)
    res = cli(project, "run", "flow.py:demo", "--progress", "lines", check=False)
    assert res.returncode == 1
    assert "boom" in res.stderr and "combine" in res.stderr
    runs = json.loads(cli(project, "runs", "list", "--json").stdout)
    assert runs[0]["status"] == "failed"
    write_project(project)
    again = run_json(project)
    assert again["executed"] == ["combine"]  # the rest was cached before the failure


def test_parallel_branches_run_in_separate_processes(project: Path) -> None:
    slow = PIPELINE.replace("import os\n", "import os, time\n").replace(
        "    return scale(x, 2.0)", "    time.sleep(1.0)\n    return scale(x, 2.0)").replace(
        "    return x + OFFSET", "    time.sleep(1.0)\n    return x + OFFSET")
    write_project(project, slow)
    first = run_json(project, "--workers", "2")
    run_id = first["run_id"]
    cli(project, "runs", "list")  # ingests the journal
    from reprise.store import Workspace

    ws = Workspace.open(project)
    steps = {s["step_name"]: s for s in ws.metadata.get_step_runs(run_id)}
    lft, r = steps["left"], steps["right"]
    assert lft["details"]["pid"] != r["details"]["pid"]
    assert lft["started_at"] < r["ended_at"] and r["started_at"] < lft["ended_at"]  # overlapped
    ws.close()


def test_ctrl_c_marks_run_killed_and_leaves_no_partial_blob(project: Path) -> None:
    slow = PIPELINE.replace("import os\n", "import os, time\n").replace(
        "    return np.random.rand(n)", "    print('started', flush=True)\n    time.sleep(60)\n"
        "    return np.random.rand(n)")
    write_project(project, slow)
    env = {k: v for k, v in os.environ.items() if k != "REPRISE_WORKSPACE"}
    proc = subprocess.Popen([sys.executable, "-m", "reprise.cli", "run", "flow.py:demo",
                             "--progress", "lines"], cwd=project, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    try:
        deadline = time.monotonic() + 60
        line = ""
        while "started" not in line and time.monotonic() < deadline:
            line = proc.stdout.readline()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:  # a failure here must not leave the run (and its pipes) to later tests
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    runs = json.loads(cli(project, "runs", "list", "--json").stdout)
    assert runs[0]["status"] == "killed"
    assert not list((project / ".reprise" / "artifacts" / "blobs").rglob("*.tmp*"))
    fsck = json.loads(cli(project, "fsck", "--json").stdout)
    assert fsck["ok"]


NONDET = PIPELINE.replace("    return np.random.rand(n)",
                          "    return np.frombuffer(os.urandom(8 * n), dtype=np.uint64)")


def test_verify_detects_unseeded_randomness(project: Path) -> None:
    write_project(project, NONDET)
    first = run_json(project)
    res = cli(project, "verify", first["run_id"], check=False)
    assert res.returncode == 1
    assert "make" in res.stdout and "differs" in res.stdout
    report = json.loads(cli(project, "verify", first["run_id"], "--json", check=False).stdout)
    bad = {s["step"] for s in report["steps"] if s["status"] == "differs"}
    assert "make" in bad


def test_verify_tolerance_reports_equal_within_bound(project: Path) -> None:
    noisy = PIPELINE.replace(
        '    return {"total": float(a.sum() + b.sum())}',
        '    return {"total": float(a.sum() + b.sum()) + int.from_bytes(os.urandom(2), "big") * 1e-12}')
    write_project(project, noisy)
    first = run_json(project)
    assert cli(project, "verify", first["run_id"], check=False).returncode == 1
    res = cli(project, "verify", first["run_id"], "--tolerance", "1e-6", "--json", check=False)
    report = json.loads(res.stdout)
    assert res.returncode == 0 and report["ok"]
    statuses = {s["step"]: s["status"] for s in report["steps"]}
    assert statuses["combine"] == "within_tolerance" and statuses["make"] == "identical"


def test_file_input_counts_by_content_and_lineage_reaches_it(project: Path) -> None:
    flow = '''
    import numpy as np
    import reprise
    from reprise import step, File

    @step
    def read(src: File) -> np.ndarray:
        return np.array([float(v) for v in src.read_text().split()])

    @step
    def total(x: np.ndarray) -> float:
        return float(x.sum())

    @reprise.pipeline
    def demo(src: File = File("data.txt")):
        return total(read(src))
    '''
    write_project(project, flow)
    (project / "data.txt").write_text("1 2 3")
    first = run_json(project)
    assert run_json(project)["executed"] == []
    (project / "data.txt").write_text("1 2 4")
    assert sorted(run_json(project)["executed"]) == ["read", "total"]
    tree = json.loads(cli(project, "lineage", first["run_id"], "--json").stdout)
    text = json.dumps(tree)
    assert '"source": "data.txt"' in text
    mermaid = cli(project, "lineage", first["run_id"], "--format", "mermaid").stdout
    assert mermaid.startswith("graph") and "step read" in mermaid
    dot = cli(project, "lineage", first["run_id"], "--format", "dot").stdout
    assert dot.startswith("digraph")
    final = first["outputs"]["total"]["output"]
    by_hash = json.loads(cli(project, "lineage", final, "--json").stdout)
    assert by_hash["kind"] == "artifact"
    produced = by_hash["nodes"][0]["produced_by"]
    assert produced["step"] == "total"
    assert produced["inputs"][0]["produced_by"]["inputs"][0]["source"] == "data.txt"


def test_runs_checkout_writes_the_snapshot(project: Path, tmp_path: Path) -> None:
    first = run_json(project)
    dest = tmp_path / "out"
    cli(project, "runs", "checkout", first["run_id"], str(dest))
    assert (dest / "flow.py").read_text() == (project / "flow.py").read_text()
    assert (dest / "helpers.py").exists()
    res = cli(project, "runs", "checkout", first["run_id"], str(dest), check=False)
    assert res.returncode == 2 and "empty folder" in res.stderr


@pytest.mark.parametrize("args,needle", [
    (["run", "nofile.py:demo"], "no pipeline file"),
    (["run", "flow.py:nothere"], "no pipeline 'nothere'"),
    (["run", "flow.py"], "FILE.py:PIPELINE"),
    (["run", "flow.py:demo", "-p", "n=abc"], "must be an integer"),
    (["run", "flow.py:demo", "-p", "zzz=1"], "has no parameter"),
    (["run", "flow.py:demo", "--force", "nope"], "no step(s) ['nope']"),
    (["run", "flow.py:demo", "--seed", "x"], "invalid int value"),
    (["run", "flow.py:demo", "--workers", "0"], "--workers must be 1 or more"),
    (["run", "flow.py:demo", "--progress", "loud"], "--progress must be"),
    (["run", "flow.py:demo", "--colour"], "unrecognized arguments: --colour"),
    (["run"], "the following arguments are required: target"),
    (["verify", "00000000zz"], "no run"),
    (["lineage", "00000000zz"], "no run or artifact"),
])
def test_user_errors_exit_2(project: Path, args: list[str], needle: str) -> None:
    res = cli(project, *args, check=False)
    assert res.returncode == 2, res.stderr
    assert needle in res.stderr
    assert "Traceback" not in res.stderr


def test_run_help_goes_through_typer(project: Path) -> None:
    res = cli(project, "run", "flow.py:demo", "--help")
    assert "Run a pipeline" in res.stdout and "--no-cache" in res.stdout


@pytest.mark.parametrize("words", [("run",), ("data", "add"), ("serve",), ("runs", "list"),
                                   ("runs", "show"), ("data", "list"), ("models", "list")])
def test_fast_parsers_accept_exactly_the_typer_options(words: tuple[str, ...]) -> None:
    """Hot commands are parsed by argparse for start-up time; they must not drift from
    the Typer commands that ``--help`` documents."""
    import typer.main

    from reprise.cli._app import app
    from reprise.cli._fast import parsers

    command: Any = typer.main.get_command(app)
    for word in words:
        command = command.commands[word]
    typer_opts = {opt: p.default for p in command.params for opt in p.opts
                  if opt.startswith("-")}
    typer_args = [p.name for p in command.params if not p.opts[0].startswith("-")]
    fast = parsers[words][0]()
    fast_opts = {opt: a.default for a in fast._actions for opt in a.option_strings}
    fast_args = [a.dest for a in fast._actions if not a.option_strings]
    assert set(fast_opts) == set(typer_opts)
    assert fast_args == typer_args
    for opt, default in typer_opts.items():
        assert fast_opts[opt] in (default, [] if default is None else default), opt
