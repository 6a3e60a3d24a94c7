"""A read-only artifact folder is one line naming the folder and exit 2, not a traceback
(issue 20, item 16). Root ignores file modes, so as root the folder is made read-only by
a read-only bind mount in a private mount namespace (``unshare -Urm``)."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.store._live import cli


def _run_read_only(ws: Path, folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``reprise ARGS`` in ``ws`` with ``folder`` read-only."""
    command = [sys.executable, "-m", "reprise.cli", *args]
    env = {k: v for k, v in os.environ.items() if k != "REPRISE_WORKSPACE"}
    if os.geteuid() != 0:
        modes = {p: p.stat().st_mode for p in [folder, *folder.rglob("*")] if p.is_dir()}
        for p in modes:
            p.chmod(0o555)
        try:
            return subprocess.run(command, cwd=ws, env=env, capture_output=True, text=True,
                                  timeout=120)
        finally:
            for p, mode in modes.items():
                p.chmod(mode)
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1) to make a folder read-only as root")
    f = shlex.quote(str(folder))
    script = (f"mount --bind {f} {f} && mount -o remount,bind,ro {f} && "
              f"exec {shlex.join(command)}")
    res = subprocess.run(["unshare", "-Urm", "sh", "-c", script], cwd=ws, env=env,
                         capture_output=True, text=True, timeout=120)
    if "mount" in res.stderr and res.returncode not in (0, 2):
        pytest.skip(f"no private mount namespace here: {res.stderr.strip()[:200]}")
    return res


@pytest.mark.parametrize("fresh", [True, False], ids=["fresh-store", "used-store"])
def test_a_read_only_artifact_folder_is_one_line_and_exit_2(tmp_path: Path,
                                                           fresh: bool) -> None:
    assert cli(tmp_path, "init").returncode == 0
    if not fresh:  # the store's folders (tmp/, pins/) exist already
        (tmp_path / "a.csv").write_text("x,y\n1,2\n")
        assert cli(tmp_path, "data", "add", "a", "a.csv").returncode == 0
    (tmp_path / "b.csv").write_text("x,y\n3,4\n5,6\n")
    art = tmp_path / ".reprise" / "artifacts"
    art.mkdir(parents=True, exist_ok=True)
    res = _run_read_only(tmp_path, art, "data", "add", "b", "b.csv")
    assert res.returncode == 2, res.stderr[-3000:]
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr[-3000:]
    assert str(art) in lines[0] and "read-only" in lines[0].lower(), lines[0]
