"""Multi-node training through torchrun's c10d rendezvous, with two "nodes" on loopback:
two ``reprise train --nnodes 2`` launchers, each in a working folder of its own, meeting at
127.0.0.1:PORT (gloo on ``lo``). Checkpoints and the final weights go to a folder both
reach, the tracking run to a workspace given explicitly (``REPRISE_WORKSPACE``).

Proved: 2 nodes × 1 process end with the weights of 1 node × 2 processes, bit for bit (the
data shard and every random draw depend on the global rank only); one run is recorded and
one set of checkpoints written (global rank 0 alone writes, and alone reads them on
resume: the job gives the other ranks a checkpoint folder that stays empty); a run whose
two nodes are killed with SIGKILL mid-training, then one node alone (the other ends), then
the launchers alone (torchrun sees its parent gone and stops the ranks, which
checkpoint), resumes to the uninterrupted run's weights; bad options are refused with
exit code 2.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import torch
from safetensors.torch import load_file

import reprise
from reprise.core.errors import UserError
from reprise.train import launch
from reprise.train._launch import rendezvous, torchrun_command
from tests.train._procs import survivors

JOB = Path(__file__).with_name("_mnode_job.py")
ENV = {"PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1"}
TIMEOUT = 240.0  # 2 shared cores can be slow to start 4 interpreters that import torch
STEPS = ["ckpt-000000003", "ckpt-000000006", "ckpt-000000009", "ckpt-000000012",
         "ckpt-000000015", "ckpt-000000018"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Nodes:
    """The launchers a test started; every process of theirs is SIGKILLed at teardown."""

    def __init__(self, root: Path) -> None:
        self.root, self.procs = root, []  # type: list[subprocess.Popen[bytes]]
        self.workspace = reprise.init(root / "ws").root

    def start(self, shared: Path, *, delay: float = 0.0, ranks: tuple[int, int] = (0, 1),
              nproc: int = 1, port: int | None = None) -> list[subprocess.Popen[bytes]]:
        """Start the two launchers (node folders ``node0``/``node1``; ``ranks`` their
        ``--node-rank``), each in a session of its own."""
        port = port or free_port()
        env = {**os.environ, **ENV, "REPRISE_WORKSPACE": str(self.workspace)}
        started = []
        for i, rank in enumerate(ranks):
            folder = self.root / f"node{i}"
            folder.mkdir(exist_ok=True)
            log = (folder / "launcher.log").open("ab")
            cmd = [sys.executable, "-m", "reprise.cli", "train", "--nnodes", "2",
                   "--nproc-per-node", str(nproc), "--node-rank", str(rank),
                   "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "mnode-test",
                   str(JOB), str(shared)] + ([str(delay)] if delay else [])
            proc = subprocess.Popen(cmd, cwd=folder, env=env, stdout=log, stderr=log,
                                    start_new_session=True)
            log.close()
            started.append(proc)
        self.procs += started
        return started

    def wait(self, procs: list[subprocess.Popen[bytes]]) -> list[int]:
        deadline = time.monotonic() + TIMEOUT
        return [p.wait(timeout=max(1.0, deadline - time.monotonic())) for p in procs]

    def log(self, node: int) -> str:
        return (self.root / f"node{node}" / "launcher.log").read_text(errors="replace")

    def kill_all(self, procs: list[subprocess.Popen[bytes]]) -> list[Any]:
        """SIGKILL every process of these launchers at once (the machines die)."""
        tree = []
        for p in procs:
            try:
                top = psutil.Process(p.pid)
                tree += [top, *top.children(recursive=True)]
            except psutil.NoSuchProcess:
                continue
        for q in tree:
            try:
                q.kill()
            except psutil.NoSuchProcess:
                pass
        for p in procs:
            p.wait(timeout=30)
        psutil.wait_procs(tree, timeout=30)
        return tree

    def close(self) -> None:
        self.kill_all(self.procs)


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[Nodes]:
    n = Nodes(tmp_path)
    try:
        yield n
    finally:
        n.close()


def final(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(str(folder / "final.safetensors"))


def assert_identical(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def one_node_two_processes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                           nproc: int = 2) -> Path:
    """The reference: the same job on one node with ``nproc`` processes, run in a
    folder of its own."""
    out = tmp_path / "single"
    out.mkdir()
    monkeypatch.chdir(out)
    ws = reprise.init(tmp_path / "ws-single").root
    env = {**ENV, "REPRISE_WORKSPACE": str(ws)}
    assert launch(JOB, [str(out)], nproc=nproc, env=env, timeout=TIMEOUT) == 0
    return out


def ranks_by_node(root: Path) -> dict[str, dict[str, Any]]:
    return {f"{p.parent.name}/{p.name}": json.loads(p.read_text())
            for p in sorted(root.glob("node*/rank-*.json"))}


def test_two_nodes_equal_one_node_with_the_same_world_size(
        tmp_path: Path, nodes: Nodes, monkeypatch: pytest.MonkeyPatch) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    launchers = nodes.start(shared)
    reference = one_node_two_processes(tmp_path, monkeypatch)  # meanwhile, on its own
    assert nodes.wait(launchers) == [0, 0], nodes.log(0) + nodes.log(1)
    assert_identical(final(reference), final(shared))
    # one process per node, global ranks 0 and 1, each in its node's own folder
    seen = ranks_by_node(tmp_path)
    assert len(seen) == 2 and {s["rank"] for s in seen.values()} == {"0", "1"}
    assert {s["group_rank"] for s in seen.values()} == {"0", "1"}
    assert {Path(s["cwd"]).name for s in seen.values()} == {"node0", "node1"}
    # global rank 0 alone wrote: one set of checkpoints, nothing in the nodes' folders
    assert sorted(p.name for p in (shared / "ckpt").iterdir()) == STEPS
    assert not list(tmp_path.glob("node*/**/*ckpt*"))  # the other ranks' folders stay unmade
    # and logged: one run, finished, with the Trainer's metrics
    ws = reprise.open_workspace(nodes.workspace)
    (run,) = ws.metadata.list_runs()
    assert run.name == "mnode" and run.status == "finished"
    assert [p.step for p in ws.metadata.get_metrics(run.id, "train/loss")] == \
        list(range(2, 19, 2))
    assert (nodes.log(0) + nodes.log(1)).count("reprise.train: trained:") == 1
    assert survivors(shared) == []


@pytest.mark.reliability
def test_two_nodes_of_two_processes_have_one_writer_and_equal_one_node_of_four(
        tmp_path: Path, nodes: Nodes, monkeypatch: pytest.MonkeyPatch) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    launchers = nodes.start(shared, nproc=2)
    reference = one_node_two_processes(tmp_path, monkeypatch, nproc=4)
    assert nodes.wait(launchers) == [0, 0], nodes.log(0) + nodes.log(1)
    assert_identical(final(reference), final(shared))
    seen = ranks_by_node(tmp_path)
    assert sorted(s["rank"] for s in seen.values()) == ["0", "1", "2", "3"]
    by_node: dict[str, set[tuple[str, str]]] = {}  # node folder: {(node's rank, local rank)}
    for name, s in seen.items():
        by_node.setdefault(name.split("/")[0], set()).add((s["group_rank"], s["local_rank"]))
    assert sorted(map(sorted, by_node.values())) == [[("0", "0"), ("0", "1")],
                                                     [("1", "0"), ("1", "1")]]
    # a global batch of 64: 3 steps an epoch, 9 in all, a checkpoint every 3
    assert sorted(p.name for p in (shared / "ckpt").iterdir()) == STEPS[:3]
    assert not list(tmp_path.glob("node*/**/*ckpt*"))
    ws = reprise.open_workspace(nodes.workspace)
    assert len(ws.metadata.list_runs()) == 1
    assert (nodes.log(0) + nodes.log(1)).count("reprise.train: trained:") == 1


@pytest.mark.reliability
def test_nodes_killed_in_three_ways_resume_to_the_uninterrupted_weights(
        tmp_path: Path, nodes: Nodes) -> None:
    whole, shared = tmp_path / "whole", tmp_path / "shared"
    whole.mkdir()
    shared.mkdir()
    assert nodes.wait(nodes.start(whole)) == [0, 0], nodes.log(0) + nodes.log(1)

    # 1. both machines die (SIGKILL to every process of both nodes) after step 6
    first = nodes.start(shared, delay=DELAY)
    wait_for(shared / "ckpt" / STEPS[1], first)
    killed = nodes.kill_all(first)
    assert len(killed) >= 6  # per node: reprise train, torchrun, the rank
    assert survivors(shared) == []
    assert not (shared / "final.safetensors").exists()
    assert STEPS[-1] not in written(shared)

    # 2. resumed; then one machine dies, the one hosting the rendezvous (node rank 0):
    # the other's rank fails in its next collective and its launcher ends, non-zero
    second = nodes.start(shared, delay=DELAY)
    wait_for(shared / "ckpt" / next_step(shared), second)
    nodes.kill_all(second[:1])
    t0 = time.monotonic()
    assert second[1].wait(timeout=TIMEOUT) != 0
    took = time.monotonic() - t0
    assert survivors(shared) == [], f"left after the other node ended in {took:.1f} s"
    assert STEPS[-1] not in written(shared)

    # 3. resumed with the node ranks swapped; then the launchers alone are SIGKILLed:
    # torchrun sees its parent gone and SIGTERMs the ranks, which checkpoint and exit
    third = nodes.start(shared, delay=DELAY, ranks=(1, 0))
    wait_for(shared / "ckpt" / next_step(shared), third)
    tree = [q for p in third for q in [psutil.Process(p.pid),
                                       *psutil.Process(p.pid).children(recursive=True)]]
    for p in third:
        os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=30)
    _, alive = psutil.wait_procs(tree, timeout=90)
    assert alive == [], f"still running after their launchers died: {alive}"
    assert survivors(shared) == []
    stopped = nodes.log(0) + nodes.log(1)
    assert "SIGTERM: stopped at optimizer step" in stopped, stopped
    assert not (shared / "final.safetensors").exists()

    # 4. resumed to the end: the uninterrupted run's weights, bit for bit
    assert nodes.wait(nodes.start(shared)) == [0, 0], nodes.log(0) + nodes.log(1)
    assert json.loads((shared / "result.json").read_text())["resumed_from"]
    assert_identical(final(whole), final(shared))
    assert survivors(shared) == [] and survivors(whole) == []


DELAY = 0.4  # seconds a step in the runs killed from outside: 3 steps between checkpoints


def written(shared: Path) -> list[str]:
    return sorted(p.name for p in (shared / "ckpt").iterdir() if p.name.startswith("ckpt-"))


def next_step(shared: Path) -> str:
    """The checkpoint after the newest one written."""
    return STEPS[STEPS.index(written(shared)[-1]) + 1]


def wait_for(path: Path, procs: list[subprocess.Popen[bytes]]) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not path.exists():
        assert all(p.poll() is None for p in procs), f"a launcher ended before {path.name}"
        assert time.monotonic() < deadline, f"no {path.name} within {TIMEOUT} s"
        time.sleep(0.05)


# -- options --------------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "message"), [
    (["--nnodes", "0"], "--nnodes must be a positive integer; got 0"),
    (["--nnodes", "2"], "--nnodes 2 needs --rdzv-endpoint HOST:PORT"),
    (["--nnodes", "2", "--rdzv-endpoint", "10.0.0.1"], "--rdzv-endpoint must be HOST:PORT"),
    (["--nnodes", "2", "--rdzv-endpoint", "10.0.0.1:99999"], "port 99999 is out of range"),
    (["--nnodes", "2", "--node-rank", "2", "--rdzv-endpoint", "h:29400"],
     "--node-rank must be an integer from 0 to 1 (--nnodes 2); got 2"),
    (["--nnodes", "2", "--node-rank", "-1", "--rdzv-endpoint", "h:29400"], "--node-rank"),
    (["--nnodes", "2", "--rdzv-endpoint", "h:1", "--rdzv-id", "a b"], "--rdzv-id must be"),
    (["--rdzv-id", "job"], "--rdzv-id go with --rdzv-endpoint"),
    (["--nnodes", "2", "--nproc-per-node", "0", "--rdzv-endpoint", "h:1"],
     "--nproc-per-node must be a positive integer; got 0"),
])
def test_reprise_train_refuses_bad_multinode_options(tmp_path: Path, args: list[str],
                                                     message: str) -> None:
    from tests.pipeline.test_pipelines import cli

    res = cli(tmp_path, "train", *args, str(JOB), str(tmp_path), check=False)
    assert res.returncode == 2, res.stderr
    assert message in " ".join(res.stderr.split()), res.stderr


def test_the_torchrun_command_of_a_node(tmp_path: Path) -> None:
    rdzv = rendezvous(nnodes=2, node_rank=1, rdzv_endpoint="127.0.0.1:29400", rdzv_id="j-1")
    assert rdzv is not None and rdzv.loopback
    cmd = torchrun_command(JOB, ["--nnodes", "9"], 4, rdzv=rdzv)
    n = int(cmd[3])
    options, rest = cmd[4:4 + n], cmd[4 + n:]
    assert options == ["--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                       "127.0.0.1:29400", "--rdzv-id", "j-1", "--max-restarts", "0",
                       "--rdzv-conf", "is_host=false", "--local-addr", "127.0.0.1",
                       "--nproc-per-node", "4", "-m", "reprise.train._rank"]
    assert rest == [str(JOB), "--nnodes", "9"]  # the script, its arguments untouched
    far = rendezvous(nnodes=3, node_rank=0, rdzv_endpoint="[fd00::1]:7")
    assert far is not None and not far.loopback and (far.host, far.port) == ("fd00::1", 7)
    assert "is_host=true" in far.torchrun_options()
    assert "--local-addr" not in far.torchrun_options()  # torchrun finds a remote node's
    assert rendezvous() is None
    with pytest.raises(UserError, match="--nnodes"):
        launch(JOB, nnodes=True)
