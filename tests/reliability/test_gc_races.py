"""gc racing live work for minutes, with real processes (issue 20, item 14; the short
versions are in tests/store/test_gc_live.py). REPRISE_RELIABILITY_SECONDS sets how long
each race runs (default 60)."""

from __future__ import annotations

import json
import os
import random
import signal
import textwrap
import threading
import time
from pathlib import Path

import pytest

from tests.store._live import cli, fsck, popen_cli
from tests.store.test_gc_live import kill_gc_midway, make_orphans

pytestmark = pytest.mark.reliability

SECONDS = float(os.environ.get("REPRISE_RELIABILITY_SECONDS", "60"))

# four branches at once (the process pool), each storing outputs and a logged artifact
FAN = textwrap.dedent("""
    import numpy as np
    import reprise
    from reprise import step

    @step(cache=False)
    def part(i: int, n: int) -> np.ndarray:
        reprise.log_artifact(np.random.default_rng().random(n), "noise.npy")
        return np.random.default_rng().random(n) + i

    @step(cache=False)
    def total(a: np.ndarray, b: np.ndarray, c: np.ndarray, d: np.ndarray) -> float:
        return float(a.sum() + b.sum() + c.sum() + d.sum())

    @reprise.pipeline
    def fan(n: int = 200000):
        return total(part(0, n), part(1, n), part(2, n), part(3, n))
""")


class _GcLoop:
    """`reprise gc --grace 0` over and over in another thread until stopped."""

    def __init__(self, ws: Path) -> None:
        self.ws, self.runs, self.failures = ws, 0, list[str]()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> _GcLoop:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=120)

    def _loop(self) -> None:
        while not self._stop.is_set():
            res = cli(self.ws, "gc", "--grace", "0", "--json")
            self.runs += 1
            if res.returncode != 0:
                self.failures.append(res.stderr[-2000:])


@pytest.fixture
def ws_dir(tmp_path: Path) -> Path:
    assert cli(tmp_path, "init").returncode == 0
    return tmp_path


def test_gc_grace_0_racing_pipeline_runs_with_process_workers(ws_dir: Path) -> None:
    (ws_dir / "fan.py").write_text(FAN)
    runs, deadline = 0, time.monotonic() + SECONDS
    with _GcLoop(ws_dir) as gc:
        while time.monotonic() < deadline:
            res = cli(ws_dir, "run", "fan.py:fan", "--workers", "4", "--progress", "none",
                      timeout=300)
            assert res.returncode == 0, res.stderr[-3000:]
            runs += 1
    assert runs >= 2 and gc.runs >= 2 and not gc.failures, gc.failures[:1]
    report = fsck(ws_dir)
    assert report["ok"], report


def test_gc_grace_0_racing_data_add_of_a_large_file(ws_dir: Path) -> None:
    big = ws_dir / "big.bin"
    adds, deadline = 0, time.monotonic() + SECONDS
    with _GcLoop(ws_dir) as gc:
        while time.monotonic() < deadline:
            with open(big, "wb") as f:  # new content each time: a real copy, not a dedup
                f.write(os.urandom(1 << 20) * 200)
                f.write(os.urandom(64))
            res = cli(ws_dir, "data", "add", "big", "big.bin", "--format", "file", "--json",
                      timeout=300)
            assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr[-3000:]
            adds += 1
    assert adds >= 2 and gc.runs >= 2 and not gc.failures, gc.failures[:1]
    versions = json.loads(cli(ws_dir, "data", "list", "--json").stdout)
    assert versions, "no dataset version registered"
    report = fsck(ws_dir)
    assert report["ok"], report


def test_gc_killed_at_random_moments_never_leaves_missing_blobs(ws_dir: Path) -> None:
    rounds, deadline = 0, time.monotonic() + SECONDS
    rng = random.Random(20)
    while time.monotonic() < deadline:
        first = make_orphans(ws_dir, 1500)
        if rng.random() < 0.5:
            kill_gc_midway(ws_dir, first)  # while it deletes blobs
        else:  # anywhere: opening, listing, deleting rows...
            gc = popen_cli(ws_dir, "gc", "--grace", "0")
            time.sleep(rng.uniform(0.2, 3.0))
            if gc.poll() is None:
                os.kill(gc.pid, signal.SIGKILL)
            gc.communicate(timeout=60)
        report = fsck(ws_dir)
        assert report["ok"] and not report["missing"], (rounds, len(report["missing"]))
        rounds += 1
    assert rounds >= 2
