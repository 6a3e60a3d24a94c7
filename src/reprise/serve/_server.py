"""A server's life: load and warm up every model at start-up, follow moving references
(aliases, newest version), swap versions without dropping a request, drain at shutdown.

Loading, warming up and resolving run off the event loop (``asyncio.to_thread`` and the
model's own worker thread), and so do parsing and checking large requests (``cpu``);
the swap itself is a few assignments on the loop.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any

from reprise.core.errors import UserError
from reprise.registry import ModelSource
from reprise.serve._cache import ResponseCache
from reprise.serve._metrics import Metrics
from reprise.serve._models import ModelTable, ServedModel, is_pinned, name_of
from reprise.serve._policy import Policy
from reprise.serve._rollout_server import RolloutController
from reprise.serve._settings import Settings
from reprise.serve._slo import SloBook
from reprise.serve._tracing import Tracing

__all__ = ["ServerState"]

_logger = logging.getLogger(__name__)
# Threads that parse, check and answer large requests off the event loop. Two: the work
# holds the GIL most of the time, so more threads would not go faster but would take
# more turns from the loop, which must keep answering health probes.
_CPU_THREADS = 2


class ServerState:
    """Everything one server holds: source, settings, metrics, the model table, tasks.

    ``ready`` is true once every ref is loaded and warmed up. ``failed`` holds the reason
    when start-up could not load a model; ``on_fatal`` (set by :func:`run_server`) is
    called then, so the process can exit instead of staying up unready.
    """

    def __init__(self, source: ModelSource, refs: list[str], settings: Settings) -> None:
        if not refs:
            from reprise.core.errors import UserError

            raise UserError("give at least one model to serve: NAME@ALIAS, NAME:VERSION "
                            "or NAME")
        self.source, self.settings = source, settings
        self.table = ModelTable(refs)
        self.metrics = Metrics()
        self.cache: ResponseCache | None = None
        if settings.cache_mb > 0:
            self.cache = ResponseCache(max(1, int(settings.cache_mb * 1024 * 1024)),
                                       self.metrics.registry,
                                       doorkeeper=settings.cache_admit == "second",
                                       min_hit_rate=settings.cache_min_hit_rate)
        self.slo = SloBook(self.table.default_ref, self.objectives, time.perf_counter)
        self.metrics.registry.register(self.slo)
        self.tracing: Tracing | None = None  # set by create_app (--otel)
        self.cpu = ThreadPoolExecutor(_CPU_THREADS, thread_name_prefix="reprise-request")
        self.token = settings.resolved_token()
        self.failed: str | None = None
        self.stopping = False
        self.on_fatal: Callable[[BaseException], None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()  # loading and following: cancelled
        self._retiring: set[asyncio.Task[None]] = set()  # draining old versions: awaited
        self._bad_versions: dict[str, int] = {}  # ref -> version that failed to load
        self._unresolved: set[str] = set()  # refs whose last resolve failed
        workspace = getattr(source, "workspace", None)  # the registry's: rollouts live there
        self.rollouts = RolloutController(self, workspace) if workspace is not None else None
        if workspace is not None:
            from reprise.serve._drift_metrics import DriftCollector

            self.metrics.registry.register(DriftCollector(
                workspace, lambda: list(self.table.default_ref), time.monotonic))
        from reprise.serve._reqlog import create_request_logger

        self.request_log = create_request_logger(settings, workspace, self.metrics.registry)

    @property
    def ready(self) -> bool:
        return self.table.complete and self.failed is None and not self.stopping

    def objectives(self, name: str) -> Policy:
        """The SLOs of model ``name`` now: its running rollout's policy, else the server's."""
        split = self.table.splits.get(self.table.default_ref.get(name, ""))
        if split is not None:
            try:
                return Policy.from_dict(split.rollout.policy, source=f"rollout {split.rollout.id}")
            except UserError:  # stored by another release, say: the server's objectives
                pass
        return self.settings.slo_policy()

    @asynccontextmanager
    async def lifespan(self, app: Any) -> AsyncIterator[None]:
        """The ASGI lifespan: start loading in the background (so /healthz answers while
        models load and /readyz says 503), and drain everything at shutdown."""
        self._spawn(self._start())
        try:
            yield
        finally:
            await self.stop()

    def _spawn(self, coro: Coroutine[Any, Any, None], *, retire: bool = False
               ) -> asyncio.Task[None]:
        tasks = self._retiring if retire else self._tasks
        task = asyncio.get_running_loop().create_task(coro)
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        return task

    async def _start(self) -> None:
        try:
            for ref in self.table.refs:
                name, version = await asyncio.to_thread(self.source.resolve, ref)
                model = self.table.loaded(name, version) or await self._load(name, version)
                self.table.install(ref, model)
                _logger.info("serving %s as %s v%d", ref, name, version)
        except Exception as exc:
            self.failed = f"{type(exc).__name__}: {exc}"
            _logger.error("could not start serving: %s", self.failed,
                          exc_info=exc if not _is_user_error(exc) else None)
            if self.on_fatal is not None:
                self.on_fatal(exc)
            return
        _freeze_heap()
        _logger.info("ready: %s", ", ".join(self.table.refs))
        for ref in self.table.refs:
            if not is_pinned(ref):
                self._spawn(self._follow(ref))
        if self.rollouts is not None:
            self._spawn(self.rollouts.flusher())
        if self.request_log is not None:
            self._spawn(self.request_log.run())
        if self.settings.warmup_idle > 0:
            self._spawn(self._keep_warm(self.settings.warmup_idle))

    async def _load(self, name: str, version: int) -> ServedModel:
        servable = await asyncio.to_thread(self.source.load, name, version)
        model = ServedModel.create(servable, self.settings.for_model(name), self.metrics)
        try:
            await model.warm_up()
        except BaseException:
            model.batcher.close()
            raise
        self.metrics.served(name, str(version), True)
        return model

    async def _follow(self, ref: str) -> None:
        """Poll where ``ref`` points; load, warm up and swap in a new version when it moves.
        An alias that answers for its name also follows its rollouts (``_rollout_server``)."""
        rollouts = self.rollouts if "@" in ref and \
            self.table.default_ref.get(name_of(ref)) == ref else None
        while True:
            if rollouts is not None:
                await rollouts.sync(ref)
            await asyncio.sleep(self.settings.poll_interval)
            try:
                name, version = await asyncio.to_thread(self.source.resolve, ref)
            except Exception as exc:
                if ref not in self._unresolved:  # once, not every poll
                    self._unresolved.add(ref)
                    _logger.warning("could not resolve %s (%s); still serving v%d", ref,
                                    exc, self.table.by_ref[ref].version)
                continue
            self._unresolved.discard(ref)
            if version != self.table.by_ref[ref].version:
                await self._switch(ref, name, version)

    async def _switch(self, ref: str, name: str, version: int) -> None:
        current = self.table.by_ref[ref]
        if self._bad_versions.get(ref) == version:
            return  # failed before: logged once, keep serving the current version
        try:
            model = self.table.loaded(name, version) or await self._load(name, version)
        except Exception as exc:
            self._bad_versions[ref] = version
            _logger.error("%s moved to v%d, which could not be loaded or warmed up (%s); "
                          "still serving v%d", ref, version, exc, current.version,
                          exc_info=exc)
            return
        if self.stopping:
            return
        self._bad_versions.pop(ref, None)
        old = self.table.install(ref, model)
        self.invalidate(name)
        _logger.info("%s moved: v%d -> v%d", ref, current.version, version)
        if old is not None:
            self._spawn(self._retire(old), retire=True)

    async def _retire(self, model: ServedModel) -> None:
        """Let a replaced version finish what it queued, then release it."""
        if not await model.batcher.drain(self.settings.drain_timeout):
            _logger.warning("%s v%d still had queued requests after %.0f s; failing them",
                            model.name, model.version, self.settings.drain_timeout)
        model.batcher.close()
        if self.cache is not None:
            self.cache.invalidate(model.name, model.version)
        self.metrics.served(model.name, str(model.version), False)
        _logger.info("released %s v%d", model.name, model.version)

    def invalidate(self, name: str) -> None:
        """Drop the cached answers of ``name``: the versions it answers with changed (an
        alias moved, a rollout started, changed or ended)."""
        if self.cache is not None:
            dropped = self.cache.invalidate(name)
            if dropped:
                _logger.info("response cache: dropped %d answers of %s", dropped, name)

    async def _keep_warm(self, idle_s: float) -> None:
        """Every served version idle for ``idle_s`` seconds gets a warm-up call (its
        example rows, straight to its batcher: not a request, counted on its own)."""
        period = min(max(idle_s / 4, 0.05), 30.0)
        while True:
            await asyncio.sleep(period)
            now = time.monotonic()
            for model in self.table.models():
                if self.stopping:
                    return
                if now - model.last_used < idle_s or model.batcher.busy \
                        or not model.servable.example:
                    continue
                model.last_used = now
                try:
                    await model.warm_up()
                except Exception as exc:
                    _logger.warning("warm-up of idle %s v%d failed: %s", model.name,
                                    model.version, exc)
                    self.metrics.warmup(model.name, str(model.version), False)
                else:
                    self.metrics.warmup(model.name, str(model.version), True)

    async def stop(self) -> None:
        """Stop following refs, let every queue drain, release every version."""
        self.stopping = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, *self._retiring, return_exceptions=True)
        if self.rollouts is not None:
            await self.rollouts.stop_shadows()
        models = self.table.models()
        await asyncio.gather(*(m.batcher.drain(self.settings.drain_timeout) for m in models))
        if self.rollouts is not None:  # after the drain: the last answers are counted
            await self.rollouts.close()
        for model in models:
            model.batcher.close()
        if self.request_log is not None:  # after the drain: every answer given is logged
            await self.request_log.close(max(1.0, self.settings.drain_timeout))
        self.cpu.shutdown(wait=False)
        if self.tracing is not None:  # flushes the spans still queued for export
            await asyncio.to_thread(self.tracing.shutdown)


def _freeze_heap() -> None:
    """Move everything allocated so far (libraries, models) out of the cyclic garbage
    collector's reach. Otherwise its occasional full passes walk the million or so
    objects that scikit-learn, pandas and numpy leave behind and stall every request
    for 50-100 ms; what requests allocate afterwards is still collected.

    Only the young generations are collected first: a full pass here walks that same
    heap (0.2-0.5 s before the server reports ready) to free a few dozen objects.
    (``run_server`` also makes the collector's young passes rarer: ``_run._lazy_collector``.)"""
    gc.collect(1)
    gc.freeze()


def _is_user_error(exc: BaseException) -> bool:
    from reprise.core.errors import UserError

    return isinstance(exc, UserError)
