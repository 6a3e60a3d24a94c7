"""Real processes, really killed: no acknowledged metric point is lost."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import reprise
from reprise.core import RunStatus

CHILD = textwrap.dedent("""
    import sys, reprise
    run = reprise.start_run("victim", system_metrics_interval=0)
    print("RUN", run.id, flush=True)
    i = 0
    while True:
        run.log_metric("loss", i * 0.5, step=i)
        print(i, flush=True)   # acknowledged: the call above returned
        i += 1
""")


def test_sigkill_loses_no_acknowledged_point(workspace: reprise.Workspace) -> None:
    proc = subprocess.Popen([sys.executable, "-c", CHILD], cwd=workspace.root,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    run_id = proc.stdout.readline().split()[1]
    acked = -1
    deadline = time.monotonic() + 60
    while acked < 3000 and time.monotonic() < deadline:
        acked = int(proc.stdout.readline())
    os.kill(proc.pid, signal.SIGKILL)
    rest = proc.stdout.read().split()
    proc.stdout.close()
    proc.wait(timeout=30)
    acked = max([acked, *map(int, rest)])
    assert acked >= 3000

    ws = reprise.Workspace.open(workspace.root)  # a fresh "next command"
    rec = ws.metadata.get_run(run_id)
    assert rec.status is RunStatus.KILLED
    steps = [p.step for p in ws.metadata.get_metrics(run_id, "loss")]
    assert steps[: acked + 1] == list(range(acked + 1))
    assert len(steps) == len(set(steps))  # nothing ingested twice
    assert not list(ws.journals_dir.glob("*.jrnl"))
    ws.close()


def test_live_run_is_not_recovered_by_another_process(workspace: reprise.Workspace) -> None:
    with reprise.start_run("alive") as run:
        run.log_metric("x", 1.0)
        other = reprise.Workspace.open(workspace.root)
        assert other.recover() == []
        assert other.metadata.get_run(run.id).status is RunStatus.RUNNING
        other.close()
    assert workspace.metadata.get_run(run.id).status is RunStatus.FINISHED


WRITER = textwrap.dedent("""
    import sys, reprise
    n, name = int(sys.argv[1]), sys.argv[2]
    with reprise.start_run(name, system_metrics_interval=0) as run:
        for i in range(n):
            run.log_metric("m", float(i), step=i)
            if i % 2500 == 0:
                run.log_param(f"p{i}", i)
""")


def _hammer(root: Path, env: dict[str, str], procs: int = 8, points: int = 10_000) -> None:
    env = {**os.environ, **env}
    env.pop("REPRISE_WORKSPACE", None)
    # a short flush interval makes the writers contend for the database while logging
    (root / ".reprise" / "config.toml").write_text("[tracking]\nflush_interval = 0.05\n")
    children = [subprocess.Popen([sys.executable, "-c", WRITER, str(points), f"w{i}"],
                                 cwd=root, env=env, stderr=subprocess.PIPE, text=True)
                for i in range(procs)]
    errors = []
    for child in children:
        _, err = child.communicate(timeout=240)
        if child.returncode != 0 or "locked" in err or "could not ingest" in err:
            errors.append(err)
    assert errors == []
    if "REPRISE_STORE_URL" in env:  # read back from the same database
        os.environ["REPRISE_STORE_URL"] = env["REPRISE_STORE_URL"]
    ws = reprise.Workspace.open(root)
    runs = ws.metadata.list_runs()
    assert sorted(r.name for r in runs) == [f"w{i}" for i in range(procs)]
    for r in runs:
        assert r.status is RunStatus.FINISHED
        steps = [p.step for p in ws.metadata.get_metrics(r.id, "m")]
        assert steps == list(range(points)), r.name
    ws.close()


@pytest.mark.slow
def test_eight_processes_log_concurrently_sqlite(workspace: reprise.Workspace) -> None:
    _hammer(workspace.root, {})


@pytest.mark.slow
@pytest.mark.postgres
def test_eight_processes_log_concurrently_postgres(workspace: reprise.Workspace,
                                                   pg_url: str) -> None:
    _hammer(workspace.root, {"REPRISE_STORE_URL": pg_url})
