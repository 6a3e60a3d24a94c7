"""gc against live work, with real processes: an in-progress run's step outputs, the temp
files and pins of a live writer, and a gc killed half-way (issue 20, item 14)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.store._live import FLOW, cli, fsck, popen_cli, wait_for


@pytest.fixture
def ws_dir(tmp_path: Path) -> Path:
    assert cli(tmp_path, "init").returncode == 0
    (tmp_path / "flow.py").write_text(FLOW)
    return tmp_path


def test_gc_grace_0_during_a_run_keeps_its_step_outputs(ws_dir: Path) -> None:
    flag = ws_dir / "go"
    run = popen_cli(ws_dir, "run", "flow.py:flow", "-p", f"flag={flag}", "--workers", "1",
                    "--progress", "none", "--json")
    try:
        wait_for(lambda: Path(f"{flag}.waiting").exists(), 60, "the run to reach `hold`")
        gc = cli(ws_dir, "gc", "--grace", "0", "--json")
        assert gc.returncode == 0, gc.stderr
    finally:
        flag.touch()
        out, err = run.communicate(timeout=120)
    assert run.returncode == 0, err[-3000:]
    report = fsck(ws_dir)
    assert report["ok"] and not report["missing"], report
    assert json.loads(gc.stdout)["removed"] == []


HOLDER = textwrap.dedent("""
    import os, sys
    import reprise
    ws = reprise.open_workspace(sys.argv[1])
    store = ws.artifacts
    h, _ = store.put_bytes(b"pinned by a live writer")
    with store._temp() as (f, tmp):
        f.write(b"half-written")
        f.flush()
        print(h, tmp, flush=True)
        sys.stdin.readline()
        os._exit(0)  # dies like a killed writer: its temp file stays behind
""")


def test_a_live_writers_blobs_and_temp_files_survive_gc_grace_0(ws_dir: Path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(ws_dir)], cwd=ws_dir,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdin is not None
        h, tmp = holder.stdout.readline().split()
        gc = json.loads(cli(ws_dir, "gc", "--grace", "0", "--json").stdout)
        assert gc["removed"] == [] and gc["temp_files_removed"] == 0
        assert Path(tmp).exists()
        holder.communicate("\n", timeout=30)
        assert holder.returncode == 0
    finally:
        holder.kill()
        holder.communicate()
    gc = json.loads(cli(ws_dir, "gc", "--grace", "0", "--json").stdout)
    assert gc["removed"] == [h] and gc["temp_files_removed"] == 1  # its writer is gone
    assert not Path(tmp).exists()


MAKE_ORPHANS = textwrap.dedent("""
    import os, sys, time
    import reprise
    from reprise.core._hashing import hash_bytes
    from reprise.core._types import ArtifactRecord
    ws = reprise.open_workspace(sys.argv[1])
    root = ws.artifacts.root / "blobs"
    records = []
    for i in range(int(sys.argv[2])):
        data = b"orphan %d" % i
        h = hash_bytes(data)
        (root / h[:2]).mkdir(parents=True, exist_ok=True)
        (root / h[:2] / h[2:]).write_bytes(data)
        records.append(ArtifactRecord(h, len(data), "bytes", "bytes", created=time.time()))
    for r in records:
        ws.metadata.put_artifact(r)
    print(min(r.hash for r in records))
""")


def make_orphans(ws_dir: Path, n: int) -> str:
    """``n`` recorded blobs nothing references; return the first gc deletes."""
    out = subprocess.run([sys.executable, "-c", MAKE_ORPHANS, str(ws_dir), str(n)],
                         capture_output=True, text=True, timeout=300, check=True)
    return out.stdout.strip()


def kill_gc_midway(ws_dir: Path, first: str) -> None:
    blob = ws_dir / ".reprise" / "artifacts" / "blobs" / first[:2] / first[2:]
    gc = popen_cli(ws_dir, "gc", "--grace", "0")
    try:
        wait_for(lambda: not blob.exists() or gc.poll() is not None, 60, "gc to start deleting")
        os.kill(gc.pid, signal.SIGKILL)
    finally:
        gc.communicate(timeout=30)


def test_a_gc_killed_midway_leaves_no_missing_blobs(ws_dir: Path) -> None:
    n = 3000
    first = make_orphans(ws_dir, n)
    kill_gc_midway(ws_dir, first)
    left = sum(len(files) for _, _, files in os.walk(ws_dir / ".reprise" / "artifacts" / "blobs"))
    assert 0 < left < n, "the kill did not land while gc was deleting"
    report = fsck(ws_dir)
    assert report["ok"] and report["missing"] == [], len(report["missing"])
    assert json.loads(cli(ws_dir, "gc", "--grace", "0", "--json").stdout)["removed"]
    assert fsck(ws_dir) | {"checked": 0} == {"ok": True, "checked": 0, "missing": [],
                                             "corrupted": [], "unrecorded": []}
