"""The registry under processes that race each other (issue 20, items 12, 13, 16).

Separate processes promote a version while others delete it, archive it, or delete it
and register a package whose gates failed: whatever the interleaving, an alias must end
on a version that exists, is ready, and passed its gates. On SQLite and PostgreSQL; a
short run here, a long one under ``make test-reliability``.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import reprise
from reprise.registry import promote, register_package, verify_audit
from tests.registry.test_registry import pkg

ROOT = Path(__file__).resolve().parents[2]

_WORKER = '''
import random, sys, time
from pathlib import Path
import reprise
from reprise.core.errors import UserError
from reprise.registry import archive_model, delete_model, promote, register_package

root, role, trials = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
ws = reprise.open_workspace(root)
if role == "replace":
    from tests.registry.test_registry import pkg
    failed = pkg(0.3, gates=False)
sync = root / "sync"
(sync / f"ready.{role}").touch()
for k in range(trials):
    while not (sync / f"go.{k}").exists():
        time.sleep(0.002)
    time.sleep(random.random() * 0.02)
    name = f"m{k}"
    try:
        if role == "promote":
            promote(name, 2, "production", workspace=ws)
        elif role == "delete":
            delete_model(name, 2, workspace=ws)
        elif role == "archive":
            archive_model(name, 2, workspace=ws)
        else:  # delete the newest version, then register a package whose gates failed
            delete_model(name, 2, workspace=ws)
            register_package(name, failed, workspace=ws)
        out = "ok"
    except UserError as exc:
        out = "refused: " + str(exc)
    (sync / f"{role}.{k}").write_text(out)
ws.close()
'''


@pytest.fixture
def ws(tmp_path: Path, store_url: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("REPRISE_STORE_URL", store_url)
    monkeypatch.setenv("REPRISE_ACTOR", "tester")
    monkeypatch.chdir(tmp_path)
    w = reprise.init(tmp_path / "ws")
    yield w
    w.close()


def _spawn(ws: Any, role: str, trials: int) -> subprocess.Popen[bytes]:
    path = os.pathsep.join([str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")])
    return subprocess.Popen([sys.executable, "-c", _WORKER, str(ws.root), role, str(trials)],
                            env={**os.environ, "PYTHONPATH": path}, cwd=ROOT)


def _wait_for(paths: list[Path], procs: list[subprocess.Popen[bytes]],
              timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not all(p.exists() for p in paths):
        dead = [p.args for p in procs if p.poll() not in (None, 0)]
        assert not dead, f"a worker failed: {dead}"
        assert time.monotonic() < deadline, f"workers did not answer: {paths}"
        time.sleep(0.005)


def race(ws: Any, rival: str, trials: int) -> list[str]:
    """``trials`` races of ``promote m:2`` against ``rival``; the trials that broke a rule."""
    sync = ws.root / "sync"
    sync.mkdir()
    procs = [_spawn(ws, "promote", trials), _spawn(ws, rival, trials)]  # start up meanwhile
    try:
        _prepare(ws, trials)
        _wait_for([sync / "ready.promote", sync / f"ready.{rival}"], procs)
        for k in range(trials):
            (sync / f"go.{k}").touch()
            _wait_for([sync / f"promote.{k}", sync / f"{rival}.{k}"], procs)
        assert [p.wait(timeout=60) for p in procs] == [0, 0]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return [f"m{k}: {broken}" for k in range(trials)
            if (broken := _broken(ws, f"m{k}")) is not None]


def _prepare(ws: Any, trials: int) -> None:
    """Models m0, m1, ...: two versions whose gates passed, ``production`` on the first."""
    from reprise.registry import _registry as reg

    good = _good_packages()
    stored = [register_package("m0", p, workspace=ws).package_hash for p in good]
    for k in range(trials):
        for p, h in zip(good, stored, strict=True):
            reg.register_package(ws, f"m{k}", h, run_id=None, package=p)  # already stored
        promote(f"m{k}", 1, "production", workspace=ws)


@functools.cache
def _good_packages() -> tuple[Any, Any]:
    return pkg(1.0), pkg(0.5)


def _broken(ws: Any, name: str) -> str | None:
    version = ws.metadata.get_aliases(name).get("production")
    if version is None:
        return "lost its alias"
    rec = ws.metadata.get_model_version(name, version)
    if rec is None:
        return f"production -> {version}, a deleted version"
    if rec.status != "ready":
        return f"production -> {version}, which is {rec.status}"
    if rec.metrics.get("gates_passed") is not True:
        return f"production -> {version}, whose gates failed and nobody forced"
    return None


@pytest.mark.parametrize("rival", ["delete", "archive", "replace"])
def test_promote_racing_delete_or_archive_never_leaves_a_bad_alias(ws: Any,
                                                                   rival: str) -> None:
    assert race(ws, rival, trials=6) == []
    assert verify_audit(workspace=ws).ok


@pytest.mark.reliability
@pytest.mark.parametrize("rival", ["delete", "archive", "replace"])
def test_promote_racing_delete_or_archive_many_trials(ws: Any, rival: str) -> None:
    assert race(ws, rival, trials=60) == []
    assert verify_audit(workspace=ws).ok
