"""Many short runs created beside recoveries and listings in other processes: no run
is lost and no command fails (issue 20, item 10). Real processes, no mocks; the
short version runs in ``make test``, the long one in ``make test-reliability``."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import reprise
from reprise.core import RunStatus

CREATOR = textwrap.dedent("""
    import sys, time, reprise
    root, seconds, out = sys.argv[1], float(sys.argv[2]), sys.argv[3]
    ws = reprise.open_workspace(root)
    end, i = time.monotonic() + seconds, 0
    with open(out, "w") as f:
        while time.monotonic() < end:
            i += 1  # half like tuning trials: the journal is left for others to ingest
            with reprise.start_run("r", workspace=ws, system_metrics_interval=0,
                                   defer_ingest=i % 2 == 0) as run:
                run.log_metric("x", float(i))
            f.write(run.id + "\\n")
            f.flush()
    ws.close()
""")

RECOVERER = textwrap.dedent("""
    import sys, time, reprise
    root, seconds = sys.argv[1], float(sys.argv[2])
    end = time.monotonic() + seconds
    ws = reprise.Workspace.open(root)
    while time.monotonic() < end:
        ws.recover()  # what every command does when it opens the store
        ws.metadata.list_runs()
    ws.close()
""")

LISTER = textwrap.dedent("""
    import subprocess, sys, time
    root, seconds = sys.argv[1], float(sys.argv[2])
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        subprocess.run([sys.executable, "-m", "reprise.cli", "runs", "list", "--json"],
                       cwd=root, check=True, stdout=subprocess.DEVNULL)
""")


def _race(root: Path, tmp: Path, seconds: float, creators: int, recoverers: int) -> None:
    procs: list[tuple[str, subprocess.Popen[str]]] = []
    outs = [tmp / f"ids{i}.txt" for i in range(creators)]
    for out in outs:
        procs.append(("creator", _spawn(CREATOR, root, seconds, str(out))))
    for _ in range(recoverers):
        procs.append(("recover", _spawn(RECOVERER, root, seconds)))
    procs.append(("runs list", _spawn(LISTER, root, seconds)))
    failures = []
    for what, proc in procs:
        _, err = proc.communicate(timeout=seconds + 300)
        if proc.returncode != 0 or "Traceback" in err or "could not" in err:
            failures.append(f"{what} (exit {proc.returncode}): {err[-1500:]}")
    assert not failures, "\n".join(failures)

    created = [line for out in outs for line in out.read_text().split()]
    assert len(created) >= creators * 3
    ws = reprise.Workspace.open(root)  # the next command: recovers whatever is left
    runs = {r.id: r for r in ws.metadata.list_runs()}
    lost = [rid for rid in created if rid not in runs]
    assert not lost, f"{len(lost)} of {len(created)} runs lost, e.g. {lost[:3]}"
    assert all(runs[rid].status is RunStatus.FINISHED for rid in created)
    for rid in created[:: max(1, len(created) // 50)]:
        assert len(ws.metadata.get_metrics(rid, "x")) == 1  # ingested once
    assert not list(ws.journals_dir.glob("*.jrnl"))
    assert not list(ws.journals_dir.glob(".*.tmp"))
    ws.close()


def _spawn(code: str, root: Path, seconds: float, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", code, str(root), str(seconds), *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def test_short_runs_beside_recovery_and_listing_lose_nothing(
        workspace: reprise.Workspace, tmp_path: Path) -> None:
    _race(workspace.root, tmp_path, seconds=15, creators=3, recoverers=2)


@pytest.mark.reliability
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgresql",
                                                            marks=pytest.mark.postgres)])
def test_minutes_of_short_runs_beside_recovery_and_listing_lose_nothing(
        workspace: reprise.Workspace, tmp_path: Path, backend: str,
        request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if backend == "postgresql":  # every process (they inherit the environment) uses it
        monkeypatch.setenv("REPRISE_STORE_URL", request.getfixturevalue("pg_url"))
    seconds = float(os.environ.get("REPRISE_RACE_SECONDS", "180"))
    started = time.monotonic()
    _race(workspace.root, tmp_path, seconds=seconds, creators=4, recoverers=2)
    assert time.monotonic() - started >= seconds
