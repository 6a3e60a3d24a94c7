"""The CLI as a user runs it: real processes, real workspace."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = textwrap.dedent("""
    import sys, numpy as np, reprise
    lr = float(sys.argv[1])
    with reprise.start_run("exp", params={"lr": lr}, tags={"kind": "test"}) as run:
        for i in range(3):
            run.log_metric("loss", lr * (3 - i))
        run.log_artifact(np.arange(10) * lr, "weights.npy")
    print(run.id)
""")


def cli(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **(env or {})}
    full_env.pop("REPRISE_WORKSPACE", None)
    return subprocess.run([sys.executable, "-m", "reprise.cli", *args], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def ws_dir(tmp_path: Path) -> Path:
    assert cli(tmp_path, "init").returncode == 0
    return tmp_path


def _log_run(ws_dir: Path, lr: float) -> str:
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(lr)], cwd=ws_dir, check=True,
                         capture_output=True, text=True, timeout=120)
    return out.stdout.strip()


def test_outside_a_workspace_is_a_one_line_hint(tmp_path: Path) -> None:
    res = cli(tmp_path, "runs", "list")
    assert res.returncode == 2
    assert res.stderr.strip().count("\n") == 0
    assert "reprise init" in res.stderr and "Traceback" not in res.stderr


def test_init_twice_is_a_user_error(ws_dir: Path) -> None:
    res = cli(ws_dir, "init")
    assert res.returncode == 2 and "already exists" in res.stderr


def test_runs_list_show_compare(ws_dir: Path) -> None:
    a, b = _log_run(ws_dir, 0.1), _log_run(ws_dir, 0.2)
    sub = ws_dir / "sub" / "dir"
    sub.mkdir(parents=True)
    rows = json.loads(cli(sub, "runs", "list", "--json").stdout)  # found upwards
    assert [r["id"] for r in rows] == [b, a]
    assert rows[0]["metrics"]["loss"] == pytest.approx(0.2)
    table = cli(ws_dir, "runs", "list", "--sort", "loss", "--asc")
    assert table.returncode == 0 and "exp" in table.stdout
    rows = json.loads(cli(ws_dir, "runs", "list", "--sort", "loss", "--asc", "--json").stdout)
    assert [r["id"] for r in rows] == [a, b]
    assert json.loads(cli(ws_dir, "runs", "list", "--tag", "kind=none", "--json").stdout) == []
    assert json.loads(cli(ws_dir, "runs", "list", "--status", "finished",
                          "--json").stdout)[0]["status"] == "finished"

    info = json.loads(cli(ws_dir, "runs", "show", a[:10], "--json").stdout)
    assert info["id"] == a and info["params"] == {"lr": 0.1}
    assert set(info["artifacts"]) == {"weights.npy"}
    shown = cli(ws_dir, "runs", "show", a)
    assert shown.returncode == 0 and "lr" in shown.stdout and "weights.npy" in shown.stdout

    cmp = json.loads(cli(ws_dir, "runs", "compare", a, b, "--json").stdout)
    assert cmp["params"] == [{"key": "lr", "a": 0.1, "b": 0.2, "changed": True}]
    assert cmp["metrics"][0]["delta"] == pytest.approx(0.1)
    assert cmp["environment"] == []
    assert cli(ws_dir, "runs", "compare", a, b).returncode == 0


@pytest.mark.parametrize("args", [["runs", "show", "nosuchrun"],
                                  ["runs", "compare", "nosuch", "other"],
                                  ["env", "show", "nosuchrun"],
                                  ["runs", "list", "--status", "sleeping"],
                                  ["runs", "list", "--tag", "novalue"]])
def test_user_errors_exit_2_with_one_line(ws_dir: Path, args: list[str]) -> None:
    res = cli(ws_dir, *args)
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr and res.stderr.startswith("error:")


def test_bad_store_url_is_a_user_error(ws_dir: Path) -> None:
    res = cli(ws_dir, "runs", "list", env={"REPRISE_STORE_URL": "bogus://nowhere"})
    assert res.returncode == 2 and "store URL" in res.stderr


def test_env_show_and_diff(ws_dir: Path) -> None:
    a, b = _log_run(ws_dir, 0.1), _log_run(ws_dir, 0.2)
    fp = json.loads(cli(ws_dir, "env", "show", a, "--json").stdout)
    assert "packages" in fp["fingerprint"] and len(fp["hash"]) == 64
    assert cli(ws_dir, "env", "show").returncode == 0
    assert json.loads(cli(ws_dir, "env", "diff", a, b, "--json").stdout) == []
    assert "identical" in cli(ws_dir, "env", "diff", a, b).stdout


def test_env_diff_names_the_changed_variable(ws_dir: Path) -> None:
    a = _log_run(ws_dir, 0.1)
    env = {**os.environ, "OMP_NUM_THREADS": "3"}
    out = subprocess.run([sys.executable, "-c", SCRIPT, "0.1"], cwd=ws_dir, env=env, check=True,
                         capture_output=True, text=True, timeout=120)
    b = out.stdout.strip()
    changes = json.loads(cli(ws_dir, "env", "diff", a, b, "--json").stdout)
    assert {(c["key"], c["new"]) for c in changes} >= {("OMP_NUM_THREADS", "3")}


def test_fsck_detects_corruption_and_gc_cleans(ws_dir: Path) -> None:
    a = _log_run(ws_dir, 0.1)
    assert cli(ws_dir, "fsck").returncode == 0
    info = json.loads(cli(ws_dir, "runs", "show", a, "--json").stdout)
    h = info["artifacts"]["weights.npy"]["hash"]
    blob = ws_dir / ".reprise" / "artifacts" / "blobs" / h[:2] / h[2:]
    blob.chmod(0o644)
    data = bytearray(blob.read_bytes())
    data[-1] ^= 0xFF
    blob.write_bytes(bytes(data))
    res = cli(ws_dir, "fsck", "--json")
    assert res.returncode == 1 and json.loads(res.stdout)["corrupted"] == [h]

    orphan = subprocess.run(
        [sys.executable, "-c", "import reprise; print(reprise.open_workspace()"
         ".artifacts.put_bytes(b'orphan')[0])"],
        cwd=ws_dir, check=True, capture_output=True, text=True).stdout.strip()
    dry = json.loads(cli(ws_dir, "gc", "--dry-run", "--grace", "0", "--json").stdout)
    assert dry["removed"] == [orphan]
    assert json.loads(cli(ws_dir, "gc", "--grace", "0", "--json").stdout)["removed"] == [orphan]
    assert json.loads(cli(ws_dir, "gc", "--grace", "0", "--json").stdout)["removed"] == []
    kept = json.loads(cli(ws_dir, "runs", "show", a, "--json").stdout)
    assert set(kept["artifacts"]) == {"weights.npy"}  # referenced blobs survive gc


def test_help_and_version(tmp_path: Path) -> None:
    res = cli(tmp_path, "--help")
    assert res.returncode == 0 and "runs" in res.stdout
    assert cli(tmp_path, "--version").stdout.startswith("reprise ")
    assert cli(tmp_path, "nosuchcommand").returncode == 2
