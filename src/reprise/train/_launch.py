"""Launching a training script on N processes, on one machine or several, through
``torch.distributed.run``.

torchrun (``torch.distributed.run``) is the trusted launcher: it sets the
environment every rank reads (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``,
``MASTER_ADDR``, ``MASTER_PORT``), watches the workers and stops them all when
one fails. On several machines (``nnodes > 1``) one launcher runs on each and
they meet through torchrun's c10d rendezvous at ``rdzv_endpoint``, a TCP store
hosted by the launcher on that address; the rendezvous numbers the nodes and
gives the global ranks. This module validates the options, picks a free
loopback port and keeps gloo on the loopback interface for single-machine runs
(and for "nodes" that meet on a loopback endpoint), and makes sure that no
process of a launch outlives it (:func:`launch`).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from reprise.core._net import is_loopback_host
from reprise.core.errors import UserError

__all__ = ["Rendezvous", "launch", "rendezvous", "torchrun_command"]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# A launcher whose parent died (a ``reprise train`` killed with SIGKILL: it cannot stop
# its children) would leave torchrun and the ranks training on, unattended. torchrun
# watches its parent and, once it is gone (re-parented), sends itself SIGTERM: torchrun
# passes it to the ranks, which checkpoint at their next step and exit. Polled by hand
# because the portable alternative does not exist (PR_SET_PDEATHSIG is Linux-only and
# fires on the death of the parent *thread*).
#
# torchrun's own entry point is ``main(args) = run(parse_args(args))``. Its parser
# would also read the script's arguments, and argparse classifies every argument that
# starts with "--" before it looks at positions: a script option that abbreviates one
# of torchrun's (``--n``, ``--node``, ``--max``) is an "ambiguous option" error, and one
# that spells one exactly would be taken by torchrun. So torchrun's parser reads only
# torchrun's options and the script's path, and the script's arguments are set on
# the parsed namespace as they were given.
_TORCHRUN = """\
import os, signal, sys, threading, time
from torch.distributed.elastic.multiprocessing.errors import record
from torch.distributed.run import parse_args, run
def _orphaned(parent=os.getppid()):
    while os.getppid() == parent:
        time.sleep(0.25)
    os.kill(os.getpid(), signal.SIGTERM)
threading.Thread(target=_orphaned, daemon=True).start()
n = int(sys.argv[1])
args = parse_args(sys.argv[2:2 + n])
args.training_script_args = sys.argv[2 + n:]
record(run)(args)
"""


_RDZV_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class Rendezvous:
    """Where and how the launchers of a multi-node run meet (validated options).

    ``endpoint`` is ``HOST:PORT`` of torchrun's c10d rendezvous store; ``node_rank``
    (optional) says which launcher hosts that store: node 0 hosts it (so HOST must be
    node 0's address) and the others connect to it; without it each launcher hosts the
    store when HOST is one of its own addresses (torchrun's rule). Global ranks are
    given by the rendezvous, not by ``node_rank``.
    """

    __slots__ = ("endpoint", "host", "local_addr", "nnodes", "node_rank", "port", "run_id")

    def __init__(self, *, nnodes: int, endpoint: str, node_rank: int | None,
                 run_id: str, local_addr: str | None) -> None:
        self.nnodes, self.endpoint, self.node_rank = nnodes, endpoint, node_rank
        self.run_id, self.local_addr = run_id, local_addr
        self.host, self.port = _split_endpoint(endpoint)

    @property
    def loopback(self) -> bool:
        """Do the nodes meet on this machine's loopback interface (nodes in one box)?"""
        return is_loopback_host(self.host)

    def torchrun_options(self) -> list[str]:
        options = ["--nnodes", str(self.nnodes), "--rdzv-backend", "c10d",
                   "--rdzv-endpoint", self.endpoint, "--rdzv-id", self.run_id,
                   # a failed node fails the run; `resume="auto"` continues it
                   "--max-restarts", "0"]
        if self.node_rank is not None:
            options += ["--rdzv-conf", f"is_host={str(self.node_rank == 0).lower()}"]
        local = self.local_addr or (
            ("::1" if ":" in self.host else "127.0.0.1") if self.loopback else None)
        if local is not None:  # the address rank 0's node advertises as MASTER_ADDR
            options += ["--local-addr", local]
        return options


_HOST = re.compile(r"^[\w.-]+$")  # what torchrun's endpoint parser accepts as a name


def _split_endpoint(endpoint: str) -> tuple[str, int]:
    """``(host, port)`` of ``HOST:PORT`` (``[IPv6]:PORT``); a port is required here,
    where torchrun would quietly use 29400."""
    bad = (f"--rdzv-endpoint must be HOST:PORT, the address of the node that hosts the "
           f"rendezvous and a free port, the same on every node (e.g. 10.0.0.1:29400, "
           f"[fd00::1]:29400); got {endpoint!r}")
    if not isinstance(endpoint, str):
        raise UserError(bad)
    host, sep, port_text = endpoint.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise UserError(bad) from None
    elif not _HOST.match(host):  # empty, spaces, an unbracketed IPv6 address...
        raise UserError(bad)
    if not sep or not port_text.isascii() or not port_text.isdigit():
        raise UserError(bad)
    port = int(port_text)
    if not 0 < port < 65536:
        raise UserError(f"--rdzv-endpoint {endpoint!r}: port {port} is out of range "
                        "(1 to 65535)")
    return host, port


def _positive(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UserError(f"{name} must be a positive integer; got {value!r}")
    return value


def rendezvous(*, nnodes: int = 1, node_rank: int | None = None,
               rdzv_endpoint: str | None = None, rdzv_id: str | None = None,
               local_addr: str | None = None) -> Rendezvous | None:
    """The validated multi-node options, or None for a run on this machine alone.

    Bad input is a :class:`UserError` naming the option: ``nnodes`` < 1, a
    ``node_rank`` outside ``[0, nnodes)``, an endpoint that is not ``HOST:PORT``, a
    missing endpoint with ``nnodes > 1``, an ``rdzv_id`` that is not a short name.
    """
    _positive("--nnodes", nnodes)
    if node_rank is not None and (isinstance(node_rank, bool) or not isinstance(node_rank, int)
                                  or not 0 <= node_rank < nnodes):
        raise UserError(f"--node-rank must be an integer from 0 to {nnodes - 1} (--nnodes "
                        f"{nnodes}); got {node_rank!r}")
    if rdzv_endpoint is None:
        if nnodes > 1:
            raise UserError(f"--nnodes {nnodes} needs --rdzv-endpoint HOST:PORT: the address "
                            "where the launchers of all nodes meet (node 0's, with a free "
                            "port), the same on every node")
        extra = [f"--{n}" for n, v in (("rdzv-id", rdzv_id), ("local-addr", local_addr))
                 if v is not None]
        if extra:
            raise UserError(f"{' and '.join(extra)} go with --rdzv-endpoint HOST:PORT (a "
                            "multi-node run); give it, or leave them out")
        return None
    if rdzv_id is not None and not (isinstance(rdzv_id, str) and _RDZV_ID.match(rdzv_id)):
        raise UserError("--rdzv-id must be 1 to 64 letters, digits, '_', '.' or '-' "
                        f"(the same on every node); got {rdzv_id!r}")
    if local_addr is not None and (not isinstance(local_addr, str) or not local_addr.strip()
                                   or any(c.isspace() for c in local_addr)):
        raise UserError(f"--local-addr must be this node's address or host name; got "
                        f"{local_addr!r}")
    return Rendezvous(nnodes=nnodes, endpoint=rdzv_endpoint, node_rank=node_rank,
                      run_id=rdzv_id or "reprise", local_addr=local_addr)


def torchrun_command(script: str | os.PathLike[str], args: Sequence[str], nproc: int,
                     port: int | None = None, rdzv: Rendezvous | None = None) -> list[str]:
    """The torchrun (``torch.distributed.run``) command line, for this machine alone or
    (with ``rdzv``) for this node of a multi-node run; the script's ``args`` reach it
    untouched, whatever they look like."""
    if rdzv is None:
        options = ["--nnodes", "1", "--node-rank", "0", "--nproc-per-node", str(nproc),
                   "--master-addr", "127.0.0.1", "--master-port", str(port or _free_port())]
    else:
        options = [*rdzv.torchrun_options(), "--nproc-per-node", str(nproc)]
    # each rank runs the script through reprise.train._rank (see there why)
    options += ["-m", "reprise.train._rank"]
    return [sys.executable, "-c", _TORCHRUN, str(len(options)), *options, str(script), *args]


def launch(script: str | os.PathLike[str], args: Sequence[str] = (), *, nproc: int = 1,
           nnodes: int = 1, node_rank: int | None = None, rdzv_endpoint: str | None = None,
           rdzv_id: str | None = None, local_addr: str | None = None,
           env: dict[str, str] | None = None, timeout: float | None = None,
           grace: float = 30.0) -> int:
    """Run ``script`` with ``args`` on ``nproc`` processes (per node); its exit code.

    One process runs the script directly. More go through torchrun with a
    torchrun-compatible environment, so the :class:`~reprise.train.Trainer`
    inside shards the data by global rank, logs and checkpoints on global rank 0
    only, and resumes the same way. When one rank dies, torchrun stops the others
    and the exit code is non-zero; run again with ``resume="auto"`` to continue.

    Several machines: run ``launch`` on each with the same ``nnodes``, ``nproc``,
    ``rdzv_endpoint`` (``HOST:PORT`` of the node hosting the rendezvous) and
    ``rdzv_id``; ``node_rank`` (optional) names the host, node 0. The global rank 0
    may land on any node, so ``checkpoint_dir`` and the workspace must be storage
    every node reaches (a shared file system; PostgreSQL and S3 for the workspace).
    Only global rank 0 reads a checkpoint when resuming: it sends the state to the
    other ranks. Gloo picks its network interface from ``GLOO_SOCKET_IFNAME`` (NCCL
    from ``NCCL_SOCKET_IFNAME``); on a loopback endpoint (nodes in one box) it is
    kept on ``lo``.

    No process of the launch outlives it: after ``timeout`` seconds (which then
    raises :class:`subprocess.TimeoutExpired`), on any exception (Ctrl-C
    included) and after a non-zero exit, every process it started — torchrun,
    the ranks, their data-loader workers, wherever they were re-parented — gets
    SIGTERM (a Trainer checkpoints and exits) and, ``grace`` seconds later,
    SIGKILL (see :mod:`reprise.train._proctree`). If the launching process itself
    is killed outright, torchrun sees it and stops the ranks the same way.
    """
    from reprise.train._proctree import MARKER_ENV, new_marker, stop_tree

    path = Path(script)
    if not path.is_file():
        raise UserError(f"{str(path)!r} is not a file; give the training script to launch")
    _positive("--nproc" if nnodes == 1 else "--nproc-per-node", nproc)
    rdzv = rendezvous(nnodes=nnodes, node_rank=node_rank, rdzv_endpoint=rdzv_endpoint,
                      rdzv_id=rdzv_id, local_addr=local_addr)
    if not (isinstance(grace, int | float) and grace >= 0):
        raise UserError(f"grace must be a number of seconds >= 0; got {grace!r}")
    full_env = {**os.environ, **(env or {})}
    if nproc == 1 and rdzv is None:
        cmd = [sys.executable, str(path), *args]
    else:
        if rdzv is None or rdzv.loopback:  # one machine: keep gloo's connections on lo
            full_env.setdefault("GLOO_SOCKET_IFNAME", "lo")
        full_env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc)))
        cmd = torchrun_command(path, args, nproc, rdzv=rdzv)
    marker = full_env[MARKER_ENV] = new_marker()
    # a session of its own: a terminal's Ctrl-C reaches this process alone, which then
    # stops the launch in order (SIGTERM, grace, SIGKILL) rather than all of it at once
    proc = subprocess.Popen(cmd, env=full_env, start_new_session=True)
    try:
        code = proc.wait(timeout=timeout)
    except BaseException:
        stop_tree(proc.pid, marker, grace)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
        raise
    if code != 0:  # a failed run may leave ranks behind, re-parented to PID 1
        stop_tree(None, marker, grace)
    return code
