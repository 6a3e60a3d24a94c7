"""A server's part in the rollouts of the aliases it follows.

Every poll, for each followed ``NAME@ALIAS`` that answers ``/v1/models/NAME/predict``,
the controller reads the alias's running rollout from the metadata store and makes the
table match it: a new rollout loads and warms up its candidate beside the stable
version and installs a :class:`~reprise.serve._router.Split`; a decision applied since
(by this server or another) changes the split's weight or phase; an ended rollout
removes the split — rolled back or aborted: every request goes to the stable version
at once and the candidate is drained and released; promoted: the alias has moved and
the candidate, already warm, takes it over.

While a rollout runs, every ``min(poll_interval, 1)`` seconds (a *tick*), each server
writes its outcomes to the store as per-bucket sums, off the event loop, and tries to
take the rollout's lease (``rollout:<id>``, three ticks long, renewed each tick): the
holder runs :func:`~reprise.serve._rollouts.analyze_once` and applies what it decided
at once; the others read the record and apply the decision within a tick. A decision
is a compare-and-set in the store, so even two holders (a lease that expired during a
long analysis) never apply one twice.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from typing import TYPE_CHECKING, Any

from reprise.core import new_id
from reprise.core._rollout_types import RolloutRecord
from reprise.serve._router import Outcomes, Shadow, Split

if TYPE_CHECKING:
    from reprise.serve._server import ServerState

__all__ = ["RolloutController"]

_logger = logging.getLogger(__name__)


class RolloutController:
    """Routes, records and decides the rollouts of one server's followed aliases.

    All of it runs on the server's event loop; the store is called in threads.
    """

    def __init__(self, state: ServerState, workspace: Any) -> None:
        self.state, self.workspace = state, workspace
        self.store = workspace.metadata
        settings = state.settings
        self.server = settings.server_name or \
            f"{socket.gethostname()}:{os.getpid()}:{new_id()[:6]}"
        self.actor = f"reprise serve {self.server}"
        self.outcomes = Outcomes(self.server)
        self.every = min(settings.poll_interval, 1.0)
        self._locks: dict[str, asyncio.Lock] = {}
        self._deciders: dict[str, asyncio.Task[None]] = {}  # rollout id -> its watcher
        self._leases: set[str] = set()  # rollout ids whose lease this server may hold
        self._refused: set[str] = set()  # rollouts whose candidate failed to load here
        self._failing: set[str] = set()  # what already logged a failure (once, not per poll)
        self._flushed_at = 0.0  # time.monotonic() of the last flush

    # -- following -------------------------------------------------------------------

    async def sync(self, ref: str) -> None:
        """Make the table match the running rollout of ``ref`` (``NAME@ALIAS``)."""
        async with self._locks.setdefault(ref, asyncio.Lock()):
            try:
                await self._sync(ref)
            except Exception as exc:  # the store is unreachable: keep routing as now
                self._warn(f"sync:{ref}", "could not read the rollouts of %s (%s); routing "
                           "stays as it is", ref, exc)
            else:
                self._failing.discard(f"sync:{ref}")

    async def _sync(self, ref: str) -> None:
        name, alias = ref.split("@", 1)
        split = self.state.table.splits.get(ref)
        rec = await asyncio.to_thread(self.store.find_rollout, name, alias, running_only=True)
        if split is not None and (rec is None or rec.id != split.rollout.id):
            final = await asyncio.to_thread(self.store.get_rollout, split.rollout.id)
            await self._end(ref, split, final)
            split = None
        if rec is None or self.state.stopping:
            return
        if split is None:
            await self._begin(ref, rec)
        else:
            self._apply(split, rec)

    async def _begin(self, ref: str, rec: RolloutRecord) -> None:
        state, table = self.state, self.state.table
        stable = table.by_ref.get(ref)
        if rec.id in self._refused or stable is None or stable.version != rec.stable:
            return  # refused here, or this server has not followed the alias there yet
        await asyncio.to_thread(_preload)
        candidate = table.loaded(rec.name, rec.candidate)
        if candidate is None:
            try:
                candidate = await state._load(rec.name, rec.candidate)
            except Exception as exc:
                self._refused.add(rec.id)
                _logger.error("rollout %s: %s v%d could not be loaded or warmed up here (%s); "
                              "aborting the rollout", rec.id, rec.name, rec.candidate, exc,
                              exc_info=exc)
                await self._abort(rec, f"candidate v{rec.candidate} failed to load or warm up "
                                       f"on server {self.server}: {exc}")
                return
        if state.stopping or table.by_ref.get(ref) is not stable or ref in table.splits:
            if not candidate.refs:  # loaded for nothing: things moved meanwhile
                state._spawn(state._retire(candidate), retire=True)
            return
        table.attach(_holder(rec), candidate)
        key = rec.key or {}
        settings = state.settings
        header = key.get("header") or (None if "column" in key else settings.key_header)
        split = Split(rec, stable, candidate, self.outcomes, metrics=state.metrics,
                      key_header=header.encode() if header else None,
                      key_column=key.get("column") or (None if "header" in key
                                                       else settings.key_column))
        table.splits[ref] = split
        state.invalidate(rec.name)
        self._apply(split, rec)
        self._leases.add(rec.id)
        self._deciders[rec.id] = state._spawn(self._watch(ref, rec.id))
        _logger.info("rollout %s of %s: v%d -> v%d (%s), candidate at %g%%", rec.id, ref,
                     rec.stable, rec.candidate, rec.strategy, rec.weight)

    def _apply(self, split: Split, rec: RolloutRecord) -> None:
        """Take a rollout's current weight and phase."""
        if split.weight != rec.weight or split.rollout.phase != rec.phase:
            _logger.info("rollout %s of %s: candidate v%d at %g%% (%s)", rec.id, rec.ref,
                         rec.candidate, rec.weight, rec.phase)
            self.state.invalidate(rec.name)  # the response cache: the split changed
        split.update(rec)
        # a live candidate's calls ride in the stable version's thread when cheap enough
        # (Batcher.carry); a shadow's copies never do (they wait for the stable to idle)
        carried = split.candidate.batcher if rec.phase != "shadow" and rec.weight < 100 \
            else None
        if split.stable.batcher.rider is not carried:
            split.stable.batcher.carry(carried)
        if rec.phase == "shadow" and split.shadow is None:
            split.shadow = Shadow(split, self.state.metrics, self.state.settings.shadow_queue)
        elif rec.phase != "shadow" and split.shadow is not None:
            shadow, split.shadow = split.shadow, None
            self.state._spawn(shadow.close())
        metrics = self.state.metrics
        metrics.rollout_weight(rec.name, str(rec.stable), rec.id, 100.0 - rec.weight)
        metrics.rollout_weight(rec.name, str(rec.candidate), rec.id, rec.weight)

    async def _end(self, ref: str, split: Split, final: RolloutRecord | None) -> None:
        """The rollout is over: promoted, the candidate takes the ref over (it is warm);
        otherwise every request goes back to the stable version at once."""
        state, table, rec = self.state, self.state.table, split.rollout
        if final is not None and final.state == "promoted" \
                and table.by_ref.get(ref) is split.stable:
            await state._switch(ref, rec.name, rec.candidate)
        if table.splits.get(ref) is split:
            del table.splits[ref]
        if split.stable.batcher.rider is split.candidate.batcher:
            split.stable.batcher.carry(None)
        state.invalidate(rec.name)
        if split.shadow is not None:
            shadow, split.shadow = split.shadow, None
            await shadow.close()
        released = table.detach(_holder(rec), split.candidate)
        if released is not None:
            state._spawn(state._retire(released), retire=True)
        task = self._deciders.pop(rec.id, None)
        if task is not None and task is not asyncio.current_task():
            task.cancel()
        await self._release(rec.id)
        state.metrics.rollout_ended(rec.name, rec.id, (str(rec.stable), str(rec.candidate)))
        how = final.state if final is not None else "gone"
        why = f": {final.reason}" if final is not None and final.reason else ""
        _logger.info("rollout %s of %s ended %s%s", rec.id, ref, how, why)

    # -- deciding --------------------------------------------------------------------

    async def _watch(self, ref: str, rollout_id: str) -> None:
        """While the rollout runs here, every ``min(poll_interval, 1)`` seconds: take (or
        renew) its lease; the holder analyses it and applies a decision here at once, the
        others read the record and apply what was decided (within that second, not the
        alias's poll)."""
        key, ttl = f"rollout:{rollout_id}", 3 * self.every
        while True:
            await asyncio.sleep(self.every)
            split = self.state.table.splits.get(ref)
            if split is None or split.rollout.id != rollout_id or self.state.stopping:
                return
            try:
                held = await asyncio.to_thread(self.store.acquire_lease, key, self.server,
                                               ttl, time.time())
            except Exception as exc:
                self._warn(key, "could not take the lease of rollout %s (%s)", rollout_id,
                           exc)
                held = False
            if held:
                await self._analyze(ref, split)
            else:
                await self.sync(ref)

    async def _analyze(self, ref: str, split: Split) -> None:
        from reprise.core.errors import NotFoundError
        from reprise.serve._rollouts import analyze_once

        rec = split.rollout
        await self.flush()  # this server's latest outcomes count too
        try:
            decision = await asyncio.to_thread(
                analyze_once, rec.name, rec.alias, None, rollout_id=rec.id, actor=self.actor,
                workspace=self.workspace, quick=True)
        except NotFoundError:  # ended meanwhile (by hand, or by another server)
            await self.sync(ref)
            return
        except Exception as exc:
            self._warn(f"analyze:{rec.id}", "could not analyse rollout %s (%s); trying again "
                       "next poll", rec.id, exc, exc_info=exc)
            return
        self._failing.discard(f"analyze:{rec.id}")
        if decision.applied:
            _logger.info("rollout %s of %s: %s (%s)", rec.id, rec.ref, decision.action,
                         decision.reason)
            if decision.action != "hold":
                await self.sync(ref)

    async def _abort(self, rec: RolloutRecord, reason: str) -> None:
        from reprise.serve._rollouts import abort_rollout

        try:
            await asyncio.to_thread(abort_rollout, rec.name, reason, rec.alias,
                                    workspace=self.workspace)
        except Exception as exc:  # ended meanwhile, or the store is down: logged
            _logger.warning("could not abort rollout %s (%s)", rec.id, exc)

    async def _release(self, rollout_id: str) -> None:
        if rollout_id not in self._leases:
            return
        self._leases.discard(rollout_id)
        try:
            await asyncio.to_thread(self.store.release_lease, f"rollout:{rollout_id}",
                                    self.server)
        except Exception as exc:  # it expires by itself
            _logger.warning("could not release the lease of rollout %s (%s)", rollout_id, exc)

    # -- recording -------------------------------------------------------------------

    async def flush(self) -> None:
        """Write what was counted since the last flush (kept for the next one when the
        store cannot be written)."""
        self._flushed_at = time.monotonic()
        rows = self.outcomes.take()
        if not rows:
            return
        try:
            await asyncio.to_thread(self.store.add_buckets, rows)
        except Exception as exc:
            self.outcomes.put_back(rows)
            self._warn("flush", "could not record rollout outcomes (%s); keeping them for the "
                       "next try", exc)
        else:
            self._failing.discard("flush")

    async def flusher(self) -> None:
        while True:
            await asyncio.sleep(self.every)
            # a decider flushes before each analysis: one write a tick is enough
            if time.monotonic() - self._flushed_at >= self.every / 2:
                await self.flush()

    async def stop_shadows(self) -> None:
        """At shutdown, before the queues drain: no more copies to candidates."""
        for split in list(self.state.table.splits.values()):
            if split.shadow is not None:
                shadow, split.shadow = split.shadow, None
                await shadow.close()

    async def close(self) -> None:
        """At shutdown, after the queues drained: record the last outcomes and give the
        leases up, so that another server decides at once."""
        await self.stop_shadows()
        await self.flush()
        for rollout_id in list(self._leases):
            await self._release(rollout_id)

    def _warn(self, what: str, msg: str, *args: Any, exc_info: Any = None) -> None:
        if what not in self._failing:
            self._failing.add(what)
            _logger.warning(msg, *args, exc_info=exc_info)


def _preload() -> None:
    """Import what the analysis needs now, beside the candidate's load, rather than in the
    first analysis (scipy takes a second to import, holding the interpreter meanwhile)."""
    import scipy.spatial.distance  # noqa: F401
    import scipy.stats  # noqa: F401


def _holder(rec: RolloutRecord) -> str:
    """The table's name for a rollout holding its candidate."""
    return f"rollout:{rec.id}"
