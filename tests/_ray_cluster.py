"""A real two-node Ray cluster on loopback for the tests: ``ray start --head`` and
``ray start --address`` as two launchers, each with its own temp folder, the second
with a custom resource (``reprise_node2``) so a test can force a task onto it.

Loopback only. Ray makes a node reachable from other machines unless told not to:
``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` keeps the head and every driver on 127.0.0.1,
but the same setting makes ``ray start --address`` refuse to join (it is Ray's
single-machine mode), and with it on, Ray replaces a loopback ``--address`` by the
machine's outward address. The second node therefore starts through
``_ray_start.py``, Ray's own CLI with that one replacement turned off.

Both launchers run ``--block`` in process groups of their own; stopping them
(SIGTERM, then SIGKILL) stops the GCS, raylets and workers they started.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NODE2 = "reprise_node2"  # the custom resource only the second node has
LOOPBACK = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}  # for the head and for drivers
# Ray turns token authentication on for a cluster started where a token exists (any local
# ray.init() writes ~/.ray/auth_token): the test cluster and its drivers do without,
# whatever the machine holds, so that it behaves the same everywhere
NO_AUTH = {"RAY_AUTH_MODE": "disabled"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class RayCluster:
    address: str  # host:port of the head's GCS, for ray.init(address=...) / --ray-address
    env: dict[str, str]  # what a driver process needs in its environment
    folders: list[Path] = field(default_factory=list)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def stop(self) -> None:
        for proc in reversed(self.procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 5  # a graceful stop, else the groups are killed
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        for pid in _in_sessions({p.pid for p in self.procs}):  # what outlived its launcher
            with contextlib.suppress(ProcessLookupError):  # (Ray's workers set their own
                os.kill(pid, signal.SIGKILL)               # process group, not session)
        for folder in self.folders:
            shutil.rmtree(folder, ignore_errors=True)


def _in_sessions(sids: set[int]) -> list[int]:
    out = subprocess.run(["ps", "-eo", "pid=,sid=,stat="], capture_output=True, text=True)
    return [int(pid) for pid, sid, stat in (line.split()[:3] for line in out.stdout.splitlines())
            if int(sid) in sids and not stat.startswith("Z")]


def _launch(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen([sys.executable, str(ROOT / "tests" / "_ray_start.py"), *args],
                                env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def _wait_for(log: Path, proc: subprocess.Popen[bytes], what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if "Ray runtime started" in log.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    raise RuntimeError(f"the Ray {what} did not start:\n{log.read_text(errors='replace')[-3000:]}")


@contextlib.contextmanager
def ray_cluster(*, cpus_per_node: int = 1, timeout: float = 90.0) -> Iterator[RayCluster]:
    """A head and a second node on loopback; stopped (both) on exit."""
    path = os.pathsep.join(filter(None, [str(ROOT / "src"), str(ROOT),
                                         os.environ.get("PYTHONPATH")]))
    base = {**os.environ, "PYTHONPATH": path, "RAY_USAGE_STATS_ENABLED": "0", **NO_AUTH}
    port = _free_port()
    common = ["--node-ip-address=127.0.0.1", f"--num-cpus={cpus_per_node}", "--num-gpus=0",
              "--object-store-memory=100000000", "--disable-usage-stats", "--block"]
    # Ray's socket paths must stay under 108 bytes: short folders in /tmp
    head_dir = Path(tempfile.mkdtemp(prefix="rh", dir="/tmp"))
    node_dir = Path(tempfile.mkdtemp(prefix="rn", dir="/tmp"))
    cluster = RayCluster(address=f"127.0.0.1:{port}", env={**LOOPBACK, **NO_AUTH},
                         folders=[head_dir, node_dir])
    try:
        head = _launch(["start", "--head", f"--port={port}", "--include-dashboard=false",
                        f"--temp-dir={head_dir}", *common], {**base, **LOOPBACK},
                       head_dir / "launcher.log")
        cluster.procs.append(head)
        _wait_for(head_dir / "launcher.log", head, "head", timeout)
        node = _launch(["start", f"--address={cluster.address}", f"--temp-dir={node_dir}",
                        f'--resources={{"{NODE2}": 4}}', *common],
                       {**base, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1",
                        "REPRISE_RAY_KEEP_LOOPBACK": "1"}, node_dir / "launcher.log")
        cluster.procs.append(node)
        _wait_for(node_dir / "launcher.log", node, "second node", timeout)
        yield cluster
    finally:
        cluster.stop()
