"""Hostile request bodies (issue 20, items 1 and 2): the time to answer bodies that cost
far more than they weigh, beside a good single-row request, for Reprise's server and for
the plain FastAPI + pydantic endpoint of ``bench_serve.py`` (the peer: a body model
``records: list[dict[str, float]]``, no signature).

Both apps run in process through httpx's ASGI transport (no sockets: this measures the
application's own work, which is what blocked the event loop). Bodies:

* ``distinct_keys_N``: N one-key records, each key different (12,000 is the issue's
  145 kB body that took 44 s and 1.6 GB before the fix); sizes doubling from 3,000 show
  the growth (linear: each doubling about 2x);
* ``oip_ghost``: an unknown OIP input of shape [10^9, 0] with no data (86 bytes; it
  allocated 8 GB before the fix). Reprise only: the peer does not speak the protocol.

Median of repeats, per body; ratios are Reprise's time over the peer's.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

from _common import finish
from _serve_peers import FEATURES, create_plain_app, make_model


class _Servable:
    def __init__(self) -> None:
        from reprise.registry import infer_signature

        frame, self.model = make_model()
        self.name, self.version = "bench", 1
        self.signature = infer_signature(frame)
        self.example = frame.head(1).to_dict("records")

    def predict(self, columns: dict[str, Any]) -> dict[str, Any]:
        import numpy as np

        x = np.column_stack([columns[f] for f in FEATURES])
        return {"prediction": self.model.predict(x)}


class _Source:
    def __init__(self) -> None:
        self.servable = _Servable()

    def resolve(self, ref: str) -> tuple[str, int]:
        return "bench", 1

    def load(self, name: str, version: int) -> _Servable:
        return self.servable


async def _time(client: Any, path: str, body: Any, repeats: int) -> tuple[float, int]:
    samples, status = [], 0
    for _ in range(repeats):
        t0 = time.perf_counter()
        r = await client.post(path, json=body)
        samples.append(time.perf_counter() - t0)
        status = r.status_code
    return statistics.median(samples), status


async def _measure(bodies: dict[str, Any], repeats: int) -> dict[str, Any]:
    import httpx

    from reprise.serve import Settings, create_app

    reprise_app = create_app(_Source(), ["bench"], settings=Settings(poll_interval=3600))
    plain = create_plain_app()
    out: dict[str, Any] = {}
    async with reprise_app.router.lifespan_context(reprise_app):
        while not reprise_app.state.reprise.ready:
            await asyncio.sleep(0.01)
        apps = {"reprise": (reprise_app, "/v1/models/bench/predict"),
                "plain_fastapi": (plain, "/predict")}
        for who, (app, path) in apps.items():
            transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
            async with httpx.AsyncClient(transport=transport, base_url="http://b",
                                         timeout=600) as c:
                await c.post(path, json=bodies["good_row"])  # warm-up
                for name, body in bodies.items():
                    if name == "oip_ghost":
                        if who != "reprise":
                            continue
                        target = "/v2/models/bench/infer"
                    else:
                        target = path
                    out[f"{who}/{name}"] = await _time(c, target, body, repeats)
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    sizes = [300, 600] if args.quick else [3_000, 6_000, 12_000, 24_000]
    repeats = 2 if args.quick else 5
    good = {f: 0.1 for f in FEATURES}
    bodies: dict[str, Any] = {"good_row": {"records": [good]}}
    for n in sizes:
        bodies[f"distinct_keys_{n}"] = {"records": [{f"k{i:05d}": 0.0} for i in range(n)]}
    bodies["oip_ghost"] = {"inputs": [{"name": "ghost", "shape": [10**9, 0],
                                       "datatype": "FP64", "data": []}]}
    measured = asyncio.run(_measure(bodies, repeats))
    figures = {f"{k}_ms": v[0] * 1000 for k, v in measured.items()}
    statuses = {k: v[1] for k, v in measured.items()}
    ratios = {f"reprise_over_plain/{name}": measured[f"reprise/{name}"][0]
              / measured[f"plain_fastapi/{name}"][0]
              for name in bodies if name != "oip_ghost"}
    big, bigger = sizes[-2], sizes[-1]
    ratios[f"reprise_growth_{big}_to_{bigger}"] = (measured[f"reprise/distinct_keys_{bigger}"][0]
                                                   / measured[f"reprise/distinct_keys_{big}"][0])
    return finish("hostile_bodies", {"figures": figures, "ratios": ratios,
                                     "statuses": statuses, "repeats": repeats,
                                     "sizes": sizes}, quick=args.quick)


if __name__ == "__main__":
    main()
