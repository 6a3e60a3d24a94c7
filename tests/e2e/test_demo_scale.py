"""``make demo-scale`` end to end (examples/demo_scale.py): the tabular pipeline on a
local Ray cluster, artifacts on a moto S3 server, metadata in a fresh PostgreSQL
database, re-run from the cache and verified. About a minute: a reliability test."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.reliability, pytest.mark.postgres]


def test_the_scale_out_demo_runs_on_ray_s3_and_postgresql(pg_server: Any) -> None:
    pytest.importorskip("ray")
    pytest.importorskip("s3fs")
    pytest.importorskip("moto.server")
    path = os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path, "REPRISE_DEMO_PG": pg_server}
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "demo_scale.py")], env=env,
                         capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert out.returncode == 0, (out.stdout[-3000:], out.stderr[-3000:])
    said = out.stdout + out.stderr  # (progress lines go to stderr)
    assert "executed 8 step(s) as Ray tasks" in said
    assert "0 step(s) executed, 8 reused from cache" in said
    assert "verified: every output is identical." in said
    assert out.stdout.rstrip().endswith("ok")  # reprise fsck against the bucket
