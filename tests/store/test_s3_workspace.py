"""A whole workspace with its artifacts on S3 (moto on loopback): a pipeline run and
``reprise verify`` of it, ``reprise fsck`` and ``reprise gc`` against the bucket."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.pipeline.test_pipelines import write_project

ROOT = Path(__file__).resolve().parents[2]


def _cli(root: Path, env: dict[str, str], *args: str, check: bool = True
         ) -> subprocess.CompletedProcess[str]:
    full = {**{k: v for k, v in os.environ.items() if k != "REPRISE_WORKSPACE"}, **env,
            "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    res = subprocess.run([sys.executable, "-m", "reprise.cli", *args], cwd=root, env=full,
                         capture_output=True, text=True, timeout=240)
    if check and res.returncode != 0:
        raise AssertionError(f"reprise {args} exited {res.returncode}:\n{res.stdout}\n"
                             f"{res.stderr}")
    return res


@pytest.fixture
def s3_project(s3_bucket: Any, tmp_path: Path) -> tuple[Path, dict[str, str]]:
    root = tmp_path / "proj"
    root.mkdir()
    write_project(root)
    env = {**s3_bucket.env, "REPRISE_ARTIFACTS_URL": s3_bucket.url}
    _cli(root, env, "init", ".")
    return root, env


def _bucket_keys(s3_bucket: Any, folder: str = "blobs") -> set[str]:
    client = s3_bucket.server.client()
    pages = client.get_paginator("list_objects_v2").paginate(
        Bucket=s3_bucket.bucket, Prefix=f"ws/{folder}/")
    return {o["Key"].split("/", 2)[2].replace("/", "") for p in pages
            for o in p.get("Contents", [])}


def test_a_workspace_on_s3_runs_verifies_and_its_fsck_and_gc_use_the_bucket(
        s3_project: tuple[Path, dict[str, str]], s3_bucket: Any) -> None:
    from reprise.store._s3 import S3ArtifactStore

    root, env = s3_project
    first = json.loads(_cli(root, env, "run", "flow.py:demo", "--json").stdout)
    assert sorted(first["executed"]) == ["combine", "left", "make", "right"]
    assert not any((root / ".reprise" / "artifacts").rglob("*/*"))  # nothing stored locally
    assert len(_bucket_keys(s3_bucket)) >= 4
    second = json.loads(_cli(root, env, "run", "flow.py:demo", "--json").stdout)
    assert second["executed"] == [] and second["outputs"] == first["outputs"]
    report = json.loads(_cli(root, env, "verify", first["run_id"], "--json").stdout)
    assert report["ok"] and {s["status"] for s in report["steps"]} == {"identical"}
    assert json.loads(_cli(root, env, "fsck", "--json").stdout)["ok"]

    referenced = _bucket_keys(s3_bucket)  # the runs' blobs, and what verify stored
    store = S3ArtifactStore(s3_bucket.url, cache_size=0)
    stray, _ = store.put_bytes(b"nothing references this blob")
    # fresh: within the grace period, gc keeps it (S3 cannot tell live writers: the grace
    # period is what protects a blob a concurrent writer has just put)
    kept = json.loads(_cli(root, env, "gc", "--json").stdout)
    assert stray not in kept["removed"] and kept["kept_recent"] >= 1
    assert stray in _bucket_keys(s3_bucket)
    fsck = json.loads(_cli(root, env, "fsck", "--json").stdout)
    assert fsck["unrecorded"] == [stray]
    dry = json.loads(_cli(root, env, "gc", "--grace", "0", "--dry-run", "--json").stdout)
    assert dry["removed"] == [stray] and stray in _bucket_keys(s3_bucket)
    gone = json.loads(_cli(root, env, "gc", "--grace", "0", "--json").stdout)
    assert gone["removed"] == [stray]
    assert _bucket_keys(s3_bucket) == referenced  # everything referenced stays
    # a corrupt blob and a missing one are found in the bucket itself
    victim, other = sorted(referenced)[:2]
    client = s3_bucket.server.client()
    client.put_object(Bucket=s3_bucket.bucket, Key=f"ws/blobs/{victim[:2]}/{victim[2:]}",
                      Body=b"garbage")
    client.delete_object(Bucket=s3_bucket.bucket, Key=f"ws/blobs/{other[:2]}/{other[2:]}")
    res = _cli(root, env, "fsck", "--json", check=False)
    report = json.loads(res.stdout)
    assert res.returncode == 1 and report["corrupted"] == [victim]
    assert report["missing"] == [other]
