"""Launching a training script on N processes through ``torch.distributed.run``.

torchrun (``torch.distributed.run``) is the trusted launcher: it sets the
environment every rank reads (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``,
``MASTER_ADDR``, ``MASTER_PORT``), watches the workers and stops them all when
one fails. This module only picks a free loopback port and keeps gloo on the
loopback interface for single-machine runs, and makes sure that no process of
a launch outlives it (:func:`launch`).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from reprise.core.errors import UserError

__all__ = ["launch", "torchrun_command"]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# torchrun's own entry point is ``main(args) = run(parse_args(args))``. Its parser
# would also read the script's arguments, and argparse classifies every argument that
# starts with "--" before it looks at positions: a script option that abbreviates one
# of torchrun's (``--n``, ``--node``, ``--max``) is an "ambiguous option" error, and one
# that spells one exactly would be taken by torchrun. So torchrun's parser reads only
# torchrun's options and the script's path, and the script's arguments are set on
# the parsed namespace as they were given.
_TORCHRUN = """\
import sys
from torch.distributed.elastic.multiprocessing.errors import record
from torch.distributed.run import parse_args, run
n = int(sys.argv[1])
args = parse_args(sys.argv[2:2 + n])
args.training_script_args = sys.argv[2 + n:]
record(run)(args)
"""


def torchrun_command(script: str | os.PathLike[str], args: Sequence[str], nproc: int,
                     port: int | None = None) -> list[str]:
    """The torchrun (``torch.distributed.run``) command line for one machine; the
    script's ``args`` reach it untouched, whatever they look like."""
    options = ["--nnodes", "1", "--node-rank", "0", "--nproc-per-node", str(nproc),
               "--master-addr", "127.0.0.1", "--master-port", str(port or _free_port()),
               str(script)]
    return [sys.executable, "-c", _TORCHRUN, str(len(options)), *options, *args]


def launch(script: str | os.PathLike[str], args: Sequence[str] = (), *, nproc: int = 1,
           env: dict[str, str] | None = None, timeout: float | None = None,
           grace: float = 30.0) -> int:
    """Run ``script`` with ``args`` on ``nproc`` processes; its exit code.

    One process runs the script directly. More go through torchrun with a
    torchrun-compatible environment, so the :class:`~reprise.train.Trainer`
    inside shards the data by rank, logs and checkpoints on rank 0 only, and
    resumes the same way. When one rank dies, torchrun stops the others and
    the exit code is non-zero; run again with ``resume="auto"`` to continue.

    No process of the launch outlives it: after ``timeout`` seconds (which then
    raises :class:`subprocess.TimeoutExpired`), on any exception (Ctrl-C
    included) and after a non-zero exit, every process it started — torchrun,
    the ranks, their data-loader workers, wherever they were re-parented — gets
    SIGTERM (a Trainer checkpoints and exits) and, ``grace`` seconds later,
    SIGKILL (see :mod:`reprise.train._proctree`).
    """
    from reprise.train._proctree import MARKER_ENV, new_marker, stop_tree

    path = Path(script)
    if not path.is_file():
        raise UserError(f"{str(path)!r} is not a file; give the training script to launch")
    if isinstance(nproc, bool) or not isinstance(nproc, int) or nproc < 1:
        raise UserError(f"--nproc must be a positive integer; got {nproc!r}")
    if not (isinstance(grace, int | float) and grace >= 0):
        raise UserError(f"grace must be a number of seconds >= 0; got {grace!r}")
    full_env = {**os.environ, **(env or {})}
    if nproc == 1:
        cmd = [sys.executable, str(path), *args]
    else:
        # one machine: keep gloo's connections on the loopback interface
        full_env.setdefault("GLOO_SOCKET_IFNAME", "lo")
        full_env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc)))
        cmd = torchrun_command(path, args, nproc)
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
