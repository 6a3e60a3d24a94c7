"""``run_server``: serve models with uvicorn in this process until stopped."""

from __future__ import annotations

import gc
import logging
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from reprise.core import require
from reprise.registry import ModelSource
from reprise.serve._settings import Settings

__all__ = ["run_server"]

_logger = logging.getLogger(__name__)
_LOOPBACK = ("127.", "localhost", "::1")
_LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
_YOUNG_THRESHOLD = 10_000  # net allocations between passes of the youngest generation


def run_server(source: ModelSource, refs: list[str], *, settings: Settings | None = None,
               host: str = "127.0.0.1", port: int = 8000, log_level: str = "info",
               access_log: bool = False) -> None:
    """Resolve ``refs`` (unknown ones raise before anything binds), then serve them with
    uvicorn on ``host:port`` until SIGINT/SIGTERM, which drains in-flight requests.

    uvicorn runs with uvloop when installed and httptools (both in the ``serve`` extra),
    through a protocol that bounds request heads in size and time and the number of open
    connections (``_guard.py``). Bound to a loopback address with no ``allowed_hosts``,
    only the loopback names are accepted in ``Host`` (against DNS rebinding).

    Raises:
        NotFoundError: a ref names no model, alias or version.
        ServingError: a model failed to load or warm up at start-up.

    Example:
        >>> from reprise.registry import RegistrySource
        >>> run_server(RegistrySource(), ["churn@production"], port=8000)  # doctest: +SKIP
    """
    uvicorn = require("uvicorn", "serve", "serving models")
    require("starlette", "serve", "serving models")
    require("prometheus_client", "serve", "serving models")
    require("httptools", "serve", "serving models")
    from reprise.core.errors import RepriseError, ServingError
    from reprise.serve._app import create_app
    from reprise.serve._guard import guarded_protocol

    settings = settings or Settings()
    for ref in refs:
        source.resolve(ref)
    if not host.startswith(_LOOPBACK) and settings.resolved_token() is None:
        _logger.warning("serving on %s without a token: anyone who can reach this address "
                        "can use the models; set REPRISE_SERVE_TOKEN", host)
    if host.startswith(_LOOPBACK) and not settings.allowed_hosts:
        settings = replace(settings, allowed_hosts=_LOOPBACK_NAMES)
    _raise_file_limit(settings.max_connections)
    app = create_app(source, refs, settings=settings)
    server = uvicorn.Server(uvicorn.Config(
        app, host=host, port=port, log_level=log_level, access_log=access_log,
        http=guarded_protocol(settings),
        timeout_graceful_shutdown=max(1, int(settings.drain_timeout)), lifespan="on"))
    fatal: list[BaseException] = []

    def on_fatal(exc: BaseException) -> None:
        fatal.append(exc)
        server.should_exit = True

    app.state.reprise.on_fatal = on_fatal
    _configure_logging(log_level)
    with _lazy_collector():
        _run_until_stopped(server)
    if fatal:
        exc = fatal[0]
        if isinstance(exc, RepriseError):
            raise exc
        raise ServingError(f"the server could not start: {type(exc).__name__}: {exc}")


@contextmanager
def _lazy_collector() -> Iterator[None]:
    """While the server runs, the cyclic garbage collector's youngest generation waits
    for :data:`_YOUNG_THRESHOLD` net allocations instead of 700 (restored after; left
    alone when the collector is off or already lazier). Only here, where the server owns
    the process: an application embedding ``create_app`` keeps its own settings.

    Why: a request's objects are freed by reference counting when it ends, so the
    collector finds little garbage in a serving process; what its passes did under load
    was walk the objects of the requests in flight, promote them, and (the oldest
    generation being nearly empty once the start-up heap is frozen, so that a quarter of
    it is soon reached) run a full pass every 10 young ones: under ``wrk -c32``
    (``bench/_gc_probe.py``) some 300 young passes and 2-3 full passes of 1.4-2.4 ms a
    second, 3-4 % of the server's time, and the full passes stalled every request in
    flight. At 10,000 the young passes come every few seconds (~2 ms each) and full ones
    were not seen."""
    before = gc.get_threshold()
    changed = 0 < before[0] < _YOUNG_THRESHOLD
    if changed:
        gc.set_threshold(_YOUNG_THRESHOLD, *before[1:])
    try:
        yield
    finally:
        if changed:
            gc.set_threshold(*before)


def _raise_file_limit(connections: int) -> None:
    """Let the process hold ``connections`` sockets plus its own files: raise the soft
    limit on open files towards the hard one (without it, accepting fails with EMFILE
    before the connection limit is reached); warn when even the hard one is too low."""
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = connections + 256
    if soft != resource.RLIM_INFINITY and soft < wanted:
        new = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
        if new < wanted:
            _logger.warning("the open-file limit (%d) is below max_connections + 256; "
                            "raise it (ulimit -n) or lower max_connections", new)


class _Stopped(Exception):
    pass


def _raise_stopped(signum: int, frame: Any) -> None:
    raise _Stopped


def _run_until_stopped(server: Any) -> None:
    """Run uvicorn; a SIGINT or SIGTERM stops it gracefully (uvicorn drains, then raises
    the signal again once its own handlers are gone), which is a clean exit, not an
    interruption."""
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _raise_stopped) if in_main else None
    try:
        server.run()
    except (KeyboardInterrupt, _Stopped):
        _logger.info("stopped")
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, previous)


def _configure_logging(level: str) -> None:
    """Show Reprise's serving log (errors with their ids) when nothing else configured
    logging; uvicorn configures only its own loggers."""
    root: Any = logging.getLogger()
    if not root.handlers:
        logging.basicConfig(level=level.upper(),
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
