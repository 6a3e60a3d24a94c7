"""The Ray executor: each step a Ray task on a cluster, placed by its resources.

Only executing moves to the cluster. The driver (``run_pipeline``) still decides
every cache hit before anything is scheduled, and steps exchange their outputs
through the artifact store (which every node must reach: a shared folder, S3...),
so lineage, the cache and ``reprise verify`` are the same as with local processes.
A task carries the run's code snapshot by hash, and the worker runs exactly that
code (see ``._ship``).

Failures: an exception in a step comes back as the step's traceback (the runner
retries it as often as the step's ``retries`` says, and a dead worker counts as a
failed attempt too); for a step without ``retries``, a worker that dies (killed,
out of memory, its node lost) is Ray's to retry, :data:`CRASH_RETRIES` times. ``shutdown(cancel=True)``
(Ctrl-C) cancels every task still running with ``ray.cancel(force=True)``, which
kills its worker process.

``ray`` is imported here only, when a Ray executor is made.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
from concurrent.futures import Future
from typing import Any

from reprise.core.errors import UserError
from reprise.pipeline._execute import Task, TaskResult
from reprise.pipeline._executors import Executor

__all__ = ["CRASH_RETRIES", "RayExecutor", "check_ray_address", "ray_options",
           "stay_on_loopback"]

CRASH_RETRIES = 2  # re-runs of a task whose worker process died, when the step sets none
CONNECT_TIMEOUT = 10.0  # seconds to reach the head before giving up (ray.init would wait)


def _import_ray(address: str | None) -> Any:
    from reprise.core._lazy import require

    stay_on_loopback(address)
    return require("ray", "ray", "--executor ray")


def stay_on_loopback(address: str | None) -> None:
    """Keep this process's Ray on loopback when ``address`` (None: ``RAY_ADDRESS``, else a
    Ray started here) is on this machine. Ray makes a node reachable from other machines
    unless told not to; it reads this when it is imported, so call it before. Not for a
    cluster elsewhere: its workers must reach this driver at an outward address (the
    objects it owns, the tasks' arguments, are fetched from it). Shared by the pipeline's
    Ray executor and the tuner's Ray pool."""
    if _is_loopback(address or os.environ.get("RAY_ADDRESS")):
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


def _is_loopback(address: str | None) -> bool:
    if address is None:
        return True
    from reprise.core._net import is_loopback_host

    return is_loopback_host(address.removeprefix("ray://").rsplit(":", 1)[0])


def ray_options(task: Task) -> dict[str, Any]:
    """``.options(...)`` of the Ray task that runs ``task``: its step's resources and
    retries. Exceptions are not retried by Ray: the step's traceback comes back as a
    result, and the runner applies the step's own ``retries``."""
    from reprise.pipeline._step import Resources

    res = task.resources if isinstance(task.resources, Resources) else Resources.of(None)
    # A step with retries of its own gets them for crashes too (a dead worker comes back
    # as a failed attempt, which the runner re-submits); Ray retries the others' crashes.
    opts: dict[str, Any] = {"num_cpus": res.cpus, "num_gpus": res.gpus,
                            "max_retries": 0 if task.retries else CRASH_RETRIES,
                            "retry_exceptions": False}
    if res.memory is not None:
        opts["memory"] = res.memory
    if res.custom:
        opts["resources"] = dict(res.custom)
    return opts


def _run_remote(task: Task) -> TaskResult:  # runs on a Ray worker
    from reprise.pipeline._ship import run_shipped

    return run_shipped(task)


class RayExecutor(Executor):
    """Runs each task as a Ray task on the cluster at ``address``.

    ``address``: ``None`` starts a Ray instance on this machine for the run (loopback
    only); ``"auto"`` joins the cluster started here with ``ray start``; ``HOST:PORT``
    the head's GCS; ``ray://HOST:PORT`` a Ray Client server. When Ray is already
    initialised in this process, that connection is used and kept open.

    Example:
        >>> from reprise.pipeline import RayExecutor  # doctest: +SKIP
        >>> run_pipeline(pipe, {}, executor=RayExecutor("auto"))  # doctest: +SKIP
    """

    parallel = True

    def __init__(self, address: str | None = None, *, store: Any = None,
                 connect_timeout: float = CONNECT_TIMEOUT) -> None:
        self.address = address or None
        self.ray = _import_ray(self.address)
        self.store = store
        self._owns = False
        if not self.ray.is_initialized():
            self._connect(connect_timeout)
        self._remote = self.ray.remote(_run_remote)
        self._lock = threading.Lock()
        self._running: dict[Any, Future[TaskResult]] = {}
        self.submitted = 0  # Ray tasks started (a cached step starts none)
        if store is not None:
            self._check_shared_store(str(getattr(store, "url", "")))

    def _connect(self, timeout: float) -> None:
        address = self.address
        if address is not None and address != "auto":
            check_ray_address(address, timeout)
        # Ray's driver prints raylet messages ("a worker died...") on stdout, which is
        # the command's own (--json): while connected, Python-level stdout is stderr.
        self._stdout = sys.stdout
        sys.stdout = sys.stderr
        try:
            self.ray.init(address=address, log_to_driver=False,
                          logging_level=logging.WARNING, configure_logging=False)
        except BaseException as exc:
            sys.stdout = self._stdout
            if not isinstance(exc, (ConnectionError, RuntimeError, ValueError)):
                raise
            raise UserError(
                f"cannot connect to the Ray cluster at {address or 'a new local instance'!r}: "
                f"{exc}. Start one with `ray start --head`, or pass --ray-address "
                "(auto, HOST:PORT or ray://HOST:PORT).") from exc
        self._owns = True

    def _check_shared_store(self, url: str) -> None:
        """Steps exchange outputs through the artifact store: a folder on this machine
        cannot serve nodes on other machines (their outputs would be lost or missing)."""
        if "://" in url and not url.startswith("file://"):
            return
        here = self.ray.util.get_node_ip_address()
        others = sorted({n["NodeManagerAddress"] for n in self.ray.nodes() if n.get("Alive")}
                        - {here})
        if others:
            self.shutdown()
            raise UserError(
                f"the artifact store is the local folder {url}, which the cluster's nodes on "
                f"{', '.join(others)} cannot read; set [artifacts] url (or "
                "REPRISE_ARTIFACTS_URL) to storage every node reaches, e.g. s3://bucket/prefix.")

    def submit(self, task: Task, *, alone: bool = False) -> Future[TaskResult]:
        from reprise.pipeline._ship import ship

        ref = self._remote.options(**ray_options(task)).remote(ship(task))
        out: Future[TaskResult] = Future()
        with self._lock:
            self._running[ref] = out
            self.submitted += 1
        ref.future().add_done_callback(lambda f: self._done(ref, task, f))
        return out

    def _done(self, ref: Any, task: Task, fut: Future[Any]) -> None:
        with self._lock:
            out = self._running.pop(ref, None)
        if out is None or out.done():
            return
        try:
            out.set_result(fut.result())
        except BaseException as exc:  # the worker died (after Ray's retries) or was cancelled
            out.set_result(TaskResult(node=task.node, error=_describe(exc),
                                      error_type=type(exc).__name__))

    def shutdown(self, *, cancel: bool = False) -> None:
        with self._lock:
            refs = list(self._running)
        if cancel:
            for ref in refs:  # force: the worker process is killed, not asked
                try:
                    self.ray.cancel(ref, force=True, recursive=True)
                except Exception as exc:  # noqa: BLE001 - a finished task cannot be cancelled
                    logging.getLogger(__name__).debug("cancel %s: %s", ref, exc)
        if self._owns:
            self._owns = False
            try:
                self.ray.shutdown()
            finally:
                sys.stdout = self._stdout


def _describe(exc: BaseException) -> str:
    import traceback

    text = "".join(traceback.format_exception(exc))
    return (f"the Ray task running this step failed outside the step ({type(exc).__name__}), "
            f"after Ray's retries:\n{text}")


def check_ray_address(address: str, timeout: float) -> None:
    """Fail fast with a clear message (a :class:`UserError`) when ``address`` is not
    ``HOST:PORT`` or ``ray://HOST:PORT``, when nothing listens there, or when what
    listens is not a gRPC server (``ray.init`` would otherwise retry or wait for
    minutes). ``auto`` and None are for Ray to resolve: not checked here."""
    target = address.removeprefix("ray://")
    host, sep, port = target.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UserError(f"Ray address {address!r} must be auto, HOST:PORT or ray://HOST:PORT.")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as sock:
            answers = _speaks_http2(sock)
    except OSError as exc:
        raise UserError(
            f"cannot reach the Ray cluster at {address!r}: nothing answers there ({exc}); "
            "start it with "
            "`ray start --head` there, or fix --ray-address / [executor] address in "
            ".reprise/config.toml.") from None
    if not answers:
        raise UserError(
            f"{address!r} accepts connections but does not answer as a Ray cluster within "
            f"{timeout:g} s; check --ray-address / [executor] address (the head's GCS port, "
            "6379 by default, or ray://HOST:10001 for Ray Client).")


# The HTTP/2 client preface and an empty SETTINGS frame (RFC 9113, 3.4 and 6.5).
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def _speaks_http2(sock: socket.socket) -> bool:
    """Whether the listener answers the HTTP/2 preface with a SETTINGS frame, as every
    gRPC server does (Ray's GCS and its client server are gRPC). Written by hand because
    Ray's Python package does not bring grpcio, and ray.init itself would wait minutes
    on a listener that never answers."""
    try:
        sock.sendall(_H2_PREFACE)
        head = b""
        while len(head) < 9:
            chunk = sock.recv(9 - len(head))
            if not chunk:
                return False
            head += chunk
    except OSError:  # timed out or reset
        return False
    return head[3] == 0x04  # the server's first frame: SETTINGS
