"""In-memory stand-ins for the registry: a ``ModelSource`` whose aliases a test moves,
and ``Servable`` models whose outputs encode their inputs and version, so a test can
check that every caller got exactly its own rows from the version it was told about."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx

from reprise.core.errors import NotFoundError
from reprise.registry import Field, Signature
from reprise.serve import Settings, create_app

SIGNATURE = Signature(
    inputs=[Field("x", "float", min=0.0, max=10.0), Field("y", "int", min=0, max=100),
            Field("plan", "string", categories=("basic", "gold"))],
    outputs=[Field("score", "float"), Field("label", "string")])
EXAMPLE = [{"x": 1.0, "y": 2, "plan": "basic"}]
TOKEN = "s3cret-token"


def score(x: float, y: int, plan: str, version: int) -> float:
    """What FakeModel v``version`` answers for one row."""
    return x + 1000 * y + (0.5 if plan == "gold" else 0.0) + 1_000_000 * version


class FakeModel:
    """A servable whose prediction encodes each row's input and the version."""

    def __init__(self, name: str, version: int, *, signature: Signature = SIGNATURE,
                 example: list[dict[str, Any]] | None = None, delay: float = 0.0,
                 fail_when: Callable[[dict[str, Any]], bool] | None = None) -> None:
        self.name, self.version, self.signature = name, version, signature
        self.example = EXAMPLE if example is None else example
        self.delay, self.fail_when = delay, fail_when
        self.batches: list[int] = []
        self.active = 0
        self.max_active = 0
        self._lock = threading.Lock()

    def predict(self, columns: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        try:
            n = len(columns["x"])
            self.batches.append(n)
            if self.delay:
                time.sleep(self.delay)
            if self.fail_when is not None and self.fail_when(columns):
                raise RuntimeError("the model broke")
            xs, ys, plans = columns["x"].tolist(), columns["y"].tolist(), columns["plan"]
            rows = zip(xs, ys, plans, strict=True)
            return {"score": [score(x, y, p, self.version) for x, y, p in rows],
                    "label": ["high" if y > 50 else "low" for y in ys]}
        finally:
            with self._lock:
                self.active -= 1


class FakeSource:
    """A ``ModelSource`` in memory: versions by name, movable aliases, an optional gate
    that holds ``load`` until a test opens it, and counters of calls."""

    def __init__(self, models: dict[str, dict[int, FakeModel]] | None = None,
                 aliases: dict[str, int] | None = None) -> None:
        self.models = models if models is not None else {
            "churn": {1: FakeModel("churn", 1), 2: FakeModel("churn", 2)}}
        self.aliases = aliases if aliases is not None else {"churn@production": 1}
        self.gate: threading.Event | None = None
        self.loads: list[tuple[str, int]] = []
        self.broken: set[tuple[str, int]] = set()

    def resolve(self, ref: str) -> tuple[str, int]:
        if "@" in ref:
            if ref not in self.aliases:
                raise NotFoundError(f"no alias {ref!r}")
            return ref.split("@")[0], self.aliases[ref]
        if ":" in ref:
            name, v = ref.split(":")
            if int(v) not in self.models.get(name, {}):
                raise NotFoundError(f"no version {ref!r}")
            return name, int(v)
        if ref not in self.models:
            raise NotFoundError(f"no model {ref!r}")
        return ref, max(self.models[ref])

    def load(self, name: str, version: int) -> FakeModel:
        if self.gate is not None:
            self.gate.wait(10)
        self.loads.append((name, version))
        if (name, version) in self.broken:
            raise RuntimeError(f"cannot load {name} v{version}")
        return self.models[name][version]


@asynccontextmanager
async def serving(source: Any, refs: list[str], settings: Settings | None = None, *,
                  wait_ready: bool = True) -> AsyncIterator[tuple[httpx.AsyncClient, Any]]:
    """A started app (lifespan run) and an httpx client on it, without sockets."""
    app = create_app(source, refs, settings=settings or Settings(poll_interval=0.05))
    async with app.router.lifespan_context(app):
        if wait_ready:
            await wait_until(lambda: app.state.reprise.ready or app.state.reprise.failed)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            yield client, app


async def wait_until(condition: Callable[[], Any], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.005)


def run(coro: Any) -> Any:
    """Run a coroutine in a fresh event loop (tests are plain functions)."""
    return asyncio.run(coro)
