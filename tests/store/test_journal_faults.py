"""Torn journal lines, made by hand and by a real full disk (a small tmpfs in a
private mount namespace): every complete line is kept, the torn one is dropped and
reported, and no command fails because of it (issue 20, item 11)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import reprise
from reprise.core import RunStatus

DIES_MID_RUN = textwrap.dedent("""
    import os, reprise
    run = reprise.start_run("torn", system_metrics_interval=0, defer_ingest=True)
    for i in range(10):
        run.log_metric("loss", float(i), step=i)
    print(run.id, flush=True)
    os._exit(0)  # dies without ending the run: its journal waits for recovery
""")

COMMANDS = (["runs", "list"], ["fsck"], ["audit", "verify"], ["data", "list"],
            ["data", "add", "iris", "iris.csv"])


def _cli(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "reprise.cli", *args], cwd=root,
                          capture_output=True, text=True, timeout=300, check=False)


def test_a_line_cut_by_hand_is_dropped_reported_and_fails_no_command(
        workspace: reprise.Workspace) -> None:
    root = workspace.root
    run_id = subprocess.run([sys.executable, "-c", DIES_MID_RUN], cwd=root, check=True,
                            capture_output=True, text=True, timeout=120).stdout.strip()
    path = workspace.journal_path(run_id)
    lines = path.read_bytes().split(b"\n")
    at3 = next(i for i, line in enumerate(lines) if line.startswith(b"M\tloss\t3\t"))
    lines[at3] = lines[at3][:9] + lines.pop(at3 + 1)  # point 3 cut, glued to point 4
    body = b"\n".join(lines)  # ends with point 9's "\n"
    path.write_bytes(body[:-12])  # ... now torn: the last line has no "\n"
    (root / "iris.csv").write_text("a,b\n1,2\n3,4\n")

    results = [_cli(root, *cmd) for cmd in COMMANDS]
    for cmd, res in zip(COMMANDS, results, strict=True):
        assert res.returncode == 0, (cmd, res.stderr[-2000:])
        assert "Traceback" not in res.stderr, (cmd, res.stderr[-2000:])
    report = results[0].stderr  # the first command recovered the journal and said so
    assert "dropped a torn last journal line" in report
    assert "dropped 1 malformed journal line" in report

    ws = reprise.Workspace.open(root)
    assert [p.step for p in ws.metadata.get_metrics(run_id, "loss")] == [0, 1, 2, 4, 5, 6, 7, 8]
    rec = ws.metadata.get_run(run_id)
    assert rec.status is RunStatus.KILLED
    assert "reprise.journal.torn" in rec.tags and "reprise.journal.dropped" in rec.tags
    assert not list(ws.journals_dir.glob("*.jrnl"))
    ws.close()


FILLS_THE_DISK = textwrap.dedent("""
    import json, os, subprocess, sys
    import reprise
    root, jdir = sys.argv[1], sys.argv[2]
    ballast = os.path.join(jdir, "ballast")
    with open(ballast, "wb") as f:
        f.write(b"x" * 16384)
    ws = reprise.open_workspace(root)
    run = reprise.start_run("full", workspace=ws, system_metrics_interval=0)
    kept, error = [], None
    for i in range(100_000):
        try:
            run.log_metric("loss", i / 7, step=i)
        except OSError as exc:  # the disk is full: this point is not kept
            error = str(exc)
            break
        kept.append(i)
    os.remove(ballast)  # space is freed; logging goes on
    for i in range(len(kept) + 1, len(kept) + 11):
        run.log_metric("loss", i / 7, step=i)
        kept.append(i)
    run.end()
    out = {"run_id": run.id, "kept": kept, "error": error, "commands": []}
    for cmd in (["runs", "list"], ["fsck"], ["audit", "verify"], ["data", "list"],
                ["data", "add", "iris", "iris.csv"]):
        res = subprocess.run([sys.executable, "-m", "reprise.cli", *cmd], cwd=root,
                             capture_output=True, text=True, timeout=300)
        out["commands"].append([cmd, res.returncode, res.stderr[-2000:]])
    fresh = reprise.Workspace.open(root)
    out["steps"] = [p.step for p in fresh.metadata.get_metrics(run.id, "loss")]
    out["status"] = fresh.metadata.get_run(run.id).status.value
    print(json.dumps(out))
""")


def _unshare_or_skip() -> None:
    why = None
    if shutil.which("unshare") is None:
        why = "the unshare command is not installed"
    else:
        probe = subprocess.run(["unshare", "-Urm", "true"], capture_output=True, text=True,
                               check=False, timeout=30)
        if probe.returncode != 0:
            why = f"unshare -Urm fails here (no user namespaces?): {probe.stderr.strip()}"
    if why is not None:
        if os.environ.get("CI"):
            pytest.fail(f"{why}; CI must run the full-disk test")
        pytest.skip(why)


def test_a_full_disk_while_logging_keeps_every_acknowledged_point(
        workspace: reprise.Workspace) -> None:
    _unshare_or_skip()
    root = workspace.root
    jdir = workspace.journals_dir
    jdir.mkdir(parents=True, exist_ok=True)
    (root / "iris.csv").write_text("a,b\n1,2\n3,4\n")
    script = root / "fill.py"
    script.write_text(FILLS_THE_DISK)
    res = subprocess.run(
        ["unshare", "-Urm", "sh", "-c",
         'mount -t tmpfs -o size=64k tmpfs "$1" && exec "$2" "$3" "$4" "$1"',
         "sh", str(jdir), sys.executable, str(script), str(root)],
        capture_output=True, text=True, timeout=600, check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["error"] is not None and "not recorded" in out["error"], out["error"]
    assert 200 < len(out["kept"]) < 5000  # the 64 kB disk really filled up
    for cmd, rc, err in out["commands"]:
        assert rc == 0 and "Traceback" not in err, (cmd, err)
    assert out["steps"] == out["kept"]  # every acknowledged point, each once, no other
    assert out["status"] == "finished"
