"""The test cluster itself: two nodes, a task forced onto the second by its custom
resource, and nothing listening beyond loopback."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from tests._ray_cluster import NODE2

pytest.importorskip("ray")

DRIVER = '''
import os, ray
ray.init(address=os.environ["ADDR"], log_to_driver=False)
@ray.remote(resources={"%s": 1})
def where():
    return ray.get_runtime_context().get_node_id()
nodes = [n for n in ray.nodes() if n["Alive"]]
print(len(nodes), ray.get(where.remote()) != ray.get_runtime_context().get_node_id(),
      sorted({n["NodeManagerAddress"] for n in nodes}))
''' % NODE2


def _listening(pids: set[int]) -> list[str]:
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines()
            if any(f"pid={p}," in line for p in pids)]


def test_the_cluster_has_two_nodes_on_loopback(ray_cluster: Any) -> None:
    env = {**os.environ, **ray_cluster.env, "ADDR": ray_cluster.address}
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(DRIVER)], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[:2] == ["2", "True"]  # the task ran on the second node
    assert "'127.0.0.1'" in out.stdout
    tree = subprocess.run(["ps", "-eo", "pid,pgid"], capture_output=True, text=True).stdout
    groups = {p.pid for p in ray_cluster.procs}
    pids = {int(a) for a, g in (line.split() for line in tree.splitlines()[1:])
            if int(g) in groups}
    sockets = _listening(pids)
    assert sockets, "the cluster's processes listen somewhere"
    assert all("127.0.0.1]:" in s or " 127.0.0.1:" in s for s in sockets), sockets
