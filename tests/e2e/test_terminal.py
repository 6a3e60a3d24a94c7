"""The read commands as a person sees them: run in a real 80x24 terminal (tmux), the
screen captured and checked; and the id prefix `runs list` shows accepted by every
command that takes a RUN."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

# a tracked run with a long name and many metrics, and a parent whose nested runs share
# its creation millisecond (so their ids share its first ten characters)
RUNS = textwrap.dedent("""
    import reprise
    from reprise.core._ids import new_id
    keys = ("val_accuracy", "val_loss", "train_loss", "f1_macro", "roc_auc", "precision",
            "recall", "train/epoch_time")
    for i in range(3):
        with reprise.start_run("experiment-with-a-rather-long-name", params={"lr": i}) as r:
            for k in keys:
                r.log_metric(k, 0.987654321 / (i + 1))
    ms = 1_780_000_000_000
    with reprise.start_run("sweep", run_id=new_id(ms)) as parent:
        for i in range(3):
            with reprise.start_run("trial", run_id=new_id(ms)) as child:
                child.log_metric("val_loss", 0.5 + i)
""")

FLOW = textwrap.dedent("""
    import numpy as np
    import reprise
    from reprise import step

    @step
    def make(n: int) -> np.ndarray:
        return np.arange(n, dtype=float)

    @step
    def double(x: np.ndarray) -> np.ndarray:
        return x * 2

    @reprise.pipeline
    def demo(n: int = 10):
        return double(make(n))
""")


def cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "REPRISE_WORKSPACE"}
    return subprocess.run([sys.executable, "-m", "reprise.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("terminal")
    assert cli(root, "init").returncode == 0
    (root / "flow.py").write_text(FLOW)
    assert cli(root, "run", "flow.py:demo", "--workers", "1", "--progress", "none"
               ).returncode == 0
    subprocess.run([sys.executable, "-c", RUNS], cwd=root, check=True, timeout=120)
    (root / "users.csv").write_text("id,age,income_in_thousands_of_euros\n1,30,5\n2,40,6\n")
    for name in ("users", "customers-of-the-northern-region"):
        assert cli(root, "data", "add", name, "users.csv").returncode == 0
    return root


def _tmux() -> str:
    path = shutil.which("tmux")
    if path is None:
        msg = "tmux is not installed (apt-get install tmux); the terminal tests need it"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return path


def screen(cwd: Path, *args: str, width: int = 80, height: int = 24) -> list[str]:
    """The screen of a ``width`` x ``height`` terminal after ``reprise ARGS`` ran in it,
    terminal-wrapped lines joined (so a line wider than the terminal shows as such)."""
    tmux = _tmux()
    name = f"reprise-test-{uuid.uuid4().hex[:12]}"
    sock = ["-L", name]  # a server of our own: other tmux sessions are left alone
    env = {k: v for k, v in os.environ.items()
           if k.startswith(("PYTHON", "PATH", "HOME", "LANG", "LC_", "VIRTUAL_ENV"))}
    exports = "".join(f"export {k}={shlex.quote(v)}; " for k, v in env.items())
    command = (f"{exports}unset COLUMNS LINES REPRISE_WORKSPACE; cd {shlex.quote(str(cwd))}; "
               f"{shlex.quote(sys.executable)} -m reprise.cli {shlex.join(args)}; "
               "echo \"<<exit $?>>\"; sleep 120")
    try:
        subprocess.run([tmux, *sock, "new-session", "-d", "-x", str(width), "-y", str(height),
                        "-s", name, "sh", "-c", command], check=True, timeout=30)
        deadline = time.monotonic() + 90
        while True:
            shot = subprocess.run([tmux, *sock, "capture-pane", "-p", "-J", "-t", name],
                                  check=True, capture_output=True, text=True, timeout=30).stdout
            if "<<exit" in shot or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    finally:
        subprocess.run([tmux, *sock, "kill-session", "-t", name], capture_output=True,
                       timeout=30)
        subprocess.run([tmux, *sock, "kill-server"], capture_output=True, timeout=30)
    assert "<<exit 0>>" in shot, shot
    return shot.split("<<exit")[0].rstrip("\n").splitlines()


def _ids(cwd: Path, *args: str) -> list[str]:
    return [r["id"] for r in json.loads(cli(cwd, "runs", "list", "--json", *args).stdout)]


def _row_ids(lines: list[str], ids: list[str]) -> dict[str, str]:
    """Full id -> the prefix its row shows (the row's first word)."""
    out: dict[str, str] = {}
    for line in lines:
        word = line.split(" ", 1)[0]
        hits = [i for i in ids if word and i.startswith(word)]
        if hits:
            assert len(hits) == 1, f"{word!r} names several listed runs"
            out[hits[0]] = word
    return out


def test_runs_list_fits_an_80_column_terminal(workspace: Path) -> None:
    lines = screen(workspace, "runs", "list")
    ids = _ids(workspace)
    assert all(len(line) <= 80 for line in lines), "\n".join(lines)
    shown = _row_ids(lines, ids)
    assert set(shown) == set(ids), "\n".join(lines)  # every run's id, on its own row
    for full, prefix in shown.items():
        assert len(prefix) >= 8 and "…" not in prefix and full.startswith(prefix)
    rows = [line for line in lines if line.split(" ", 1)[0] in shown.values()]
    assert len(rows) == len(ids)  # one line per run: nothing wrapped onto a second line
    assert len(lines) <= 3 + len(ids)  # header (two lines at most) and the hint
    header = " ".join(lines[:lines.index(rows[0])])
    for col in ("id", "name", "status", "age", "duration"):
        assert re.search(rf"\b{col}\b", header), header
    assert all("finished" in row and " ago" in row for row in rows)
    assert "f1_macro" in header  # of the metrics most runs have, by name
    assert "…" not in header
    assert "not shown" in lines[-1] and "--columns" in lines[-1]


def test_runs_list_columns_picks_what_to_show(workspace: Path) -> None:
    lines = screen(workspace, "runs", "list", "--columns", "name,metric:recall,param:lr")
    assert lines[0].split() == ["id", "name", "recall", "param:lr"]
    assert "status" not in "\n".join(lines)
    ids = _ids(workspace)
    assert len(_row_ids(lines, ids)) == len(ids)


def test_runs_list_sort_metric_comes_first(workspace: Path) -> None:
    lines = screen(workspace, "runs", "list", "--sort", "recall")
    assert lines[0].split()[5] == "recall" and max(map(len, lines)) <= 80


def test_data_list_keeps_names_whole(workspace: Path) -> None:
    lines = screen(workspace, "data", "list")
    assert [line.split()[0] for line in lines[1:]] == ["customers-of-the-northern-region",
                                                      "users"], "\n".join(lines)
    assert all(" ago" in line for line in lines[1:])  # one line each: nothing wrapped


def test_runs_list_bad_column_is_a_user_error(workspace: Path) -> None:
    res = cli(workspace, "runs", "list", "--columns", "name,metric:nope")
    assert res.returncode == 2 and "nope" in res.stderr and "val_loss" in res.stderr
    res = cli(workspace, "runs", "list", "--columns", "nmae")
    assert res.returncode == 2 and "'nmae'" in res.stderr and "metric:KEY" in res.stderr


def test_shown_prefix_is_unique_among_nested_runs_too(workspace: Path) -> None:
    # the parent's nested runs share its first ten characters; they are not listed,
    # yet the prefix shown must not match them
    lines = screen(workspace, "runs", "list", "--name", "sweep")
    (parent,) = _ids(workspace, "--name", "sweep")
    prefix = _row_ids(lines, [parent])[parent]
    assert len(prefix) > 10
    info = json.loads(cli(workspace, "runs", "show", prefix, "--json").stdout)
    assert info["id"] == parent


@pytest.fixture(scope="module")
def demo_prefix(workspace: Path) -> tuple[str, str]:
    """The pipeline run's full id and the prefix `runs list` shows for it."""
    (run,) = _ids(workspace, "--name", "demo")
    return run, _row_ids(screen(workspace, "runs", "list", "--name", "demo"), [run])[run]


@pytest.mark.parametrize("args", [
    ["runs", "show", "{run}", "--json"],
    ["runs", "compare", "{run}", "{run}", "--json"],
    ["env", "show", "{run}", "--json"],
    ["env", "diff", "{run}", "{run}", "--json"],
    ["lineage", "{run}", "--json"],
    ["lineage", "{run}"],
    ["verify", "{run}", "--workers", "1", "--json"],
])
def test_every_run_command_accepts_the_listed_prefix(workspace: Path, args: list[str],
                                                     demo_prefix: tuple[str, str]) -> None:
    _, prefix = demo_prefix
    res = cli(workspace, *(a.replace("{run}", prefix) for a in args))
    assert res.returncode == 0, res.stderr


def test_checkout_report_and_register_accept_the_listed_prefix(
        workspace: Path, tmp_path: Path, demo_prefix: tuple[str, str]) -> None:
    run, prefix = demo_prefix
    assert cli(workspace, "runs", "checkout", prefix, str(tmp_path / "code")).returncode == 0
    assert (tmp_path / "code" / "flow.py").exists()
    # the run holds no report and no model: the errors name the run, found by its prefix
    for args in (["report", prefix], ["models", "register", "m", "--run", prefix]):
        res = cli(workspace, *args)
        assert res.returncode == 2 and run in res.stderr, res.stderr


@pytest.fixture(scope="module")
def dag_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    from tests.pipeline.test_lineage_dag import FLOW as DAG_FLOW

    root = tmp_path_factory.mktemp("lineage")
    assert cli(root, "init").returncode == 0
    (root / "dagflow.py").write_text(textwrap.dedent(DAG_FLOW))
    (root / "data.txt").write_text("1 2 3 4 5 6 7 9")
    res = cli(root, "run", "dagflow.py:dag", "--workers", "1", "--json")
    assert res.returncode == 0, res.stderr
    return root, json.loads(res.stdout)["run_id"]


def test_lineage_prints_each_step_and_artifact_once(dag_run: tuple[Path, str]) -> None:
    root, run = dag_run
    lines = screen(root, "lineage", run)
    text = "\n".join(lines)
    assert len(lines) <= 24 and max(map(len, lines)) <= 80, text
    assert "see above" not in text
    tree = json.loads(cli(root, "lineage", run, "--json").stdout)
    hashes: set[str] = set()

    def walk(node: dict[str, object]) -> None:
        hashes.add(str(node["hash"]))
        prod = node.get("produced_by")
        for child in prod.get("inputs", ()) if isinstance(prod, dict) else ():
            walk(child)

    for node in tree["nodes"]:
        walk(node)
    assert len(hashes) >= 8
    for h in hashes:  # every artifact once: as the output of its step, or the raw file
        assert text.count(h[:12]) == 1, (h, text)
    order = [line.split()[1] for line in lines[2:] if line.split() and line.split()[0].isdigit()]
    # producers first; independent branches in the order they ran (which may vary)
    assert order[:3] == ["load", "split", "featurize"]
    assert sorted(order[3:]) == ["fit_a", "fit_b", "score", "score_2"]
    assert "fit_b" in text and "shift <- featurize[2]" in text


def test_lineage_keeps_the_tree_and_the_graph_formats(dag_run: tuple[Path, str]) -> None:
    root, run = dag_run
    tree = cli(root, "lineage", run, "--tree")
    assert tree.returncode == 0 and "see above" in tree.stdout and "step featurize" in tree.stdout
    as_json = cli(root, "lineage", run, "--format", "json")
    assert json.loads(as_json.stdout) == json.loads(cli(root, "lineage", run, "--json").stdout)
    assert cli(root, "lineage", run, "--format", "mermaid").stdout.startswith("graph BT")
    assert cli(root, "lineage", run, "--format", "dot").stdout.startswith("digraph")
    bad = cli(root, "lineage", run, "--format", "png")
    assert bad.returncode == 2 and "steps, tree, mermaid, dot, json" in bad.stderr


def test_data_show_never_cuts_a_number_at_80_columns(tmp_path: Path) -> None:
    assert cli(tmp_path, "init").returncode == 0
    rows = [f"{i},{(-1) ** i * 0.00123456 * (i + 1)},{1.5e9 + i},2020-01-{i % 28 + 1:02d}T10:00:00,"
            f"{'basic' if i % 2 else 'pro'}" for i in range(40)]
    (tmp_path / "d.csv").write_text("customer_id,small,big,when,plan\n" + "\n".join(rows) + "\n")
    assert cli(tmp_path, "data", "add", "d", "d.csv").returncode == 0
    lines = screen(tmp_path, "data", "show", "d")
    text = "\n".join(lines)
    assert "…" not in text and max(map(len, lines)) <= 80, text
    for whole in ("-0.04938", "0.04815", "1.5e+09", "2020-01-01T10:00:00", "2020-01-28T10:00:00",
                  "customer_id"):
        assert whole in text, text
