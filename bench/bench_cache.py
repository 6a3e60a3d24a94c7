"""The response cache and the idle warm-up of ``reprise serve`` (issue 18.4 and 18.6),
each against the same server without it, in one run.

Cache: two ``reprise serve lr@production`` processes (the ``serve`` benchmark's
scikit-learn LogisticRegression on 20 numeric features, a package as the demo's), one
with ``--cache-mb 64`` and one without, both with ``--warmup-idle 0`` and no request log.
The load is ``wrk`` (one thread, 8 keep-alive connections: concurrency 8;
``stream_post.lua``) sending single-row JSON POSTs from a pre-built stream, in order
(without wrk: httpx, ``AsyncClient`` with 8 tasks, whose own CPU then sets the pace, not
the server's): at a 50 % repeat rate each
request repeats, with probability 0.5, a row sent earlier in the stream (uniformly among
the last 1,000) and is otherwise a fresh random row; at 0 % every row is fresh, so the
cache only costs (its keys and lookups until it bypasses itself, then one request in 64).
The cache server runs with its defaults (``--cache-admit second``,
``--cache-min-hit-rate 0.01``). Each round (7 per rate, 0 % first) starts both servers
anew, the one started first alternating (an A/A check found the server started second
~2 % cheaper), so no round inherits another's state. In each window both servers are
loaded at once, one wrk each, with the same stream from the same start (with httpx: in
turn), after a two-second warm-up alike in which a fresh cache reaches its steady state
(at 0 %: bypassed): on this shared machine consecutive windows drift by ±25 %, which
alternating windows could not tell from a 3 % cost. Figures are medians over the
rounds: requests/s, p50/p99, and the server's CPU µs per answer (from /proc); ratios
are medians of each window's paired ratio. Goals: more requests/s at 50 %; at 0 % an
overhead ≤ 3 %. The clients run on the same cores as the servers, so requests/s
understates what a server alone could do; the CPU figure does not. The cache's own hit
rate is read from /metrics, and the servers' answers for the same rows compared.

Warm-up: two servers without the cache, ``--warmup-idle 1`` and ``--warmup-idle 0``;
per repeat both answer a request, stay idle ``--idle`` seconds (5), then each gets one
fresh row on a new connection, timed by the client (order swapped every repeat); then a
second request right after, for the warm latency. Medians over the repeats; the
warm-ups counted from /metrics.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from _common import WORK, finish, python
from bench_request_log import cpu_seconds
from bench_serve import Server, ensure_wrk, run_wrk, start, stop, wait_ready

CONCURRENCY = 8
WARM_BODIES = 24_000  # the warm-up's stream (wrk sends up to ~8,000 a second here)
WARM_S = 2.0  # the warm-up: a fresh cache server reaches its steady state (its first
# window of 2,048 lookups judged, or a 50 % stream's rows stored) well within it
RATES = (0.0, 0.5)
GOALS = {"cache_rps_vs_none_at_50": (">=", 1.0), "overhead_at_0": ("<=", 0.03)}


def stream(seed: int, n: int, rate: float) -> list[bytes]:
    """``n`` request bodies: each repeats an earlier row with probability ``rate``."""
    from _serve_peers import FEATURES

    rng = random.Random(seed)
    rows: list[bytes] = []
    out: list[bytes] = []
    for _ in range(n):
        if rows and rng.random() < rate:
            out.append(rng.choice(rows[-1000:]))
            continue
        row = {f: round(rng.gauss(0.0, 1.0), 6) for f in FEATURES}
        body = json.dumps({"records": [row]}).encode()
        rows.append(body)
        out.append(body)
    return out


async def _load(url: str, bodies: list[bytes], seconds: float) -> dict[str, float]:
    """Concurrency-8 POSTs of ``bodies`` in order for ``seconds``: rps, p50, p99."""
    latencies: list[float] = []
    errors = 0
    nxt = 0
    deadline = time.perf_counter() + seconds
    limits = httpx.Limits(max_connections=CONCURRENCY, max_keepalive_connections=CONCURRENCY)
    headers = {"content-type": "application/json"}
    async with httpx.AsyncClient(limits=limits, timeout=10) as client:
        async def worker() -> None:
            nonlocal nxt, errors
            while time.perf_counter() < deadline and nxt < len(bodies):
                body = bodies[nxt]
                nxt += 1
                t0 = time.perf_counter()
                r = await client.post(url, content=body, headers=headers)
                latencies.append(time.perf_counter() - t0)
                if r.status_code != 200:
                    errors += 1
        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
        took = time.perf_counter() - t0
    if nxt >= len(bodies):
        raise RuntimeError("the request stream ran out: make it longer")
    latencies.sort()
    return {"rps": len(latencies) / took, "requests": len(latencies), "errors": errors,
            "p50_ms": latencies[len(latencies) // 2] * 1000,
            "p99_ms": latencies[int(len(latencies) * 0.99)] * 1000}


def measure_together(servers: list[Server], cached: Server, bodies: list[bytes],
                     seconds: float, wrk: str, work: Path) -> dict[str, dict[str, float]]:
    """One window in which every server of ``servers`` gets its own ``wrk`` (the same
    stream, from the same start) at the same time: each sees the same host, so the ratio
    of their CPU per answer, and of their requests/s, is free of the host's drift between
    windows (±25 % from one 5-second window to the next on this shared machine, where
    alternating windows could not resolve 3 %). After a warm-up alike (``WARM_S``)."""
    from concurrent.futures import ThreadPoolExecutor

    path = work / "bodies.txt"
    warm = work / "warm.txt"
    path.write_bytes(b"\n".join(bodies[:-WARM_BODIES]))
    warm.write_bytes(b"\n".join(bodies[-WARM_BODIES:]))

    def load(file: Path, secs: float) -> list[dict[str, float]]:
        with ThreadPoolExecutor(len(servers)) as pool:
            futures = [pool.submit(run_wrk, wrk, s, file, CONCURRENCY, max(1, round(secs)),
                                   stream=True) for s in servers]
            return [f.result() for f in futures]

    load(warm, WARM_S)
    h0, m0 = (metric(cached, f"reprise_cache_{k}_total") for k in ("hits", "misses"))
    pids = [s.proc.pid for s in servers if s.proc is not None]
    cpu0 = [cpu_seconds(pid) for pid in pids]
    samples = load(path, seconds)
    cpu1 = [cpu_seconds(pid) for pid in pids]
    out: dict[str, dict[str, float]] = {}
    for s, sample, c0, c1 in zip(servers, samples, cpu0, cpu1, strict=True):
        if c0 is not None and c1 is not None and sample["requests"]:
            sample["cpu_us_per_request"] = (c1 - c0) / sample["requests"] * 1e6
        out[s.name] = sample
    hits = metric(cached, "reprise_cache_hits_total") - h0
    looked = hits + metric(cached, "reprise_cache_misses_total") - m0
    out[cached.name]["hit_rate"] = hits / looked if looked else 0.0
    return out


def measure(server: Server, bodies: list[bytes], seconds: float, cached: bool,
            wrk: str | None = None, work: Path | None = None) -> dict[str, float]:
    """One window (after a warm-up of ``WARM_S`` on rows of no other window); with the
    cache, its hit rate over the window from /metrics. With ``wrk`` (and a ``work``
    folder for its body file) the load is wrk's, else httpx's."""
    url = f"http://127.0.0.1:{server.port}{server.url}"

    def load(rows: list[bytes], secs: float) -> dict[str, float]:
        if wrk is not None and work is not None:  # wrk: the server sets the pace
            path = work / "bodies.txt"
            path.write_bytes(b"\n".join(rows))
            return run_wrk(wrk, server, path, CONCURRENCY, max(1, round(secs)), stream=True)
        return asyncio.run(_load(url, rows, secs))

    load(bodies[-WARM_BODIES:], WARM_S)
    assert server.proc is not None
    if cached:
        h0, m0 = (metric(server, f"reprise_cache_{k}_total") for k in ("hits", "misses"))
    cpu0 = cpu_seconds(server.proc.pid)
    sample = load(bodies[:-WARM_BODIES], seconds)
    cpu1 = cpu_seconds(server.proc.pid)
    if cpu0 is not None and cpu1 is not None and sample["requests"]:
        sample["cpu_us_per_request"] = (cpu1 - cpu0) / sample["requests"] * 1e6
    if cached:
        hits = metric(server, "reprise_cache_hits_total") - h0
        looked = hits + metric(server, "reprise_cache_misses_total") - m0
        sample["hit_rate"] = hits / looked if looked else 0.0
    return sample


def metric(server: Server, name: str, **labels: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"http://127.0.0.1:{server.port}/metrics", timeout=10).text
    total = 0.0
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                total += s.value
    return total


def same_answers(a: Server, b: Server, bodies: list[bytes]) -> None:
    """The cached server answers as the plain one, asked twice (the second: a hit)."""
    for body in bodies:
        answers = []
        for s in (a, b, b):
            r = httpx.post(f"http://127.0.0.1:{s.port}{s.url}", content=body,
                           headers={"content-type": "application/json"}, timeout=10)
            answers.append(r.json()["predictions"])
        if not answers[0] == answers[1] == answers[2]:
            raise RuntimeError(f"the cached server answered otherwise: {answers}")


def first_after_idle(servers: list[Server], idle: float, repeats: int, seed: int
                     ) -> dict[str, dict[str, list[float]]]:
    """Per server: client ms of the first request after ``idle`` seconds, and the next."""
    fresh = iter(stream(seed, 10 * repeats + 10, 0.0))
    out: dict[str, dict[str, list[float]]] = {s.name: {"first": [], "next": []}
                                              for s in servers}

    def once(s: Server) -> float:
        body = next(fresh)
        with httpx.Client(timeout=10) as client:  # a new connection, as after a quiet hour
            t0 = time.perf_counter()  # the client made (~20 ms of TLS set-up) beforehand
            r = client.post(f"http://127.0.0.1:{s.port}{s.url}", content=body,
                            headers={"content-type": "application/json"})
            took = (time.perf_counter() - t0) * 1000
        if r.status_code != 200:
            raise RuntimeError(f"{s.name} answered {r.status_code}: {r.text[:200]}")
        return took

    for r in range(repeats):
        for s in servers:
            once(s)
        time.sleep(idle)
        for s in servers[r % 2:] + servers[:r % 2]:
            out[s.name]["first"].append(once(s))
            out[s.name]["next"].append(once(s))
        print(f"  idle round {r + 1}: " + "  ".join(
            f"{s.name} first {out[s.name]['first'][-1]:6.2f} ms next "
            f"{out[s.name]['next'][-1]:6.2f} ms" for s in servers))
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--seconds", type=float, default=5.0, help="per measurement")
    ap.add_argument("--idle", type=float, default=5.0, help="idle seconds before a first "
                    "request (the warming server's --warmup-idle is 1)")
    ap.add_argument("--idle-repeats", type=int, default=9)
    ap.add_argument("--rates", default="0,50", help="repeat rates (percent) to measure; "
                    "anything but both writes no result file")
    ap.add_argument("--quick", action="store_true", help="one short round, no result file")
    args = ap.parse_args(argv)
    if args.quick:
        args.repeats, args.seconds, args.idle, args.idle_repeats = 1, 2.0, 2.0, 2
    from _serve_peers import production_lr

    work = WORK / "cache"
    shutil.rmtree(work, ignore_errors=True)
    row, expected, ws_dir = production_lr(work)
    serve = [python(), "-m", "reprise.cli", "serve", "lr@production", "--log-level",
             "warning", "--no-request-log"]
    body = {"records": [row]}

    def server(name: str, *flags: str) -> Server:
        return Server(name, [*serve, *flags], "/v1/models/lr/predict", body, "/readyz", ws_dir)

    plain, cached = server("no_cache", "--warmup-idle", "0"), \
        server("cache", "--cache-mb", "64", "--warmup-idle", "0")
    warming, cold = server("warmup_on", "--warmup-idle", "1"), \
        server("warmup_off", "--warmup-idle", "0")
    pair = [plain, cached]
    rates = tuple(sorted(float(x) / 100 for x in args.rates.split(",")))
    samples: dict[str, list[dict[str, float]]] = {}
    hit_rates: dict[str, list[float]] = {}

    def paired(rate: str, k: str) -> float:
        """The median over windows of cache / no cache (the same window's pair)."""
        return statistics.median(
            a[k] / b[k] for a, b in zip(samples[f"cache@{rate}"],
                                        samples[f"no_cache@{rate}"], strict=True))

    def fresh(first: Server) -> None:
        """Both servers started anew, ``first`` first: which one a round starts first
        alternates (on this machine the server started second ran ~2 % cheaper in an A/A
        check), and no round inherits another's state."""
        for s in pair:
            stop(s)
        for s in (first, *(s for s in pair if s is not first)):
            start(s)
        for s in pair:
            wait_ready(s, expected)

    try:
        fresh(plain)
        same_answers(plain, cached, stream(99, 30, 0.0))
        wrk = ensure_wrk()
        if wrk is None:
            print("  wrk is not installed and could not be: the load is httpx's, and the "
                  "Python client, not the server, sets the pace")
        # more than either server answers in a window (wrk: ~8,000 a second here)
        n = int(args.seconds * (16_000 if wrk else 4000)) + WARM_BODIES
        for rate in rates:
            for r in range(args.repeats):
                bodies = stream(1000 * r + int(rate * 100), n, rate)
                order = pair[r % 2:] + pair[:r % 2]
                fresh(order[1])  # its own servers: each round starts from the same state
                if wrk is not None and work is not None:  # both at once (the same host)
                    together = measure_together(order, cached, bodies, args.seconds, wrk,
                                                work)
                    window = [(s, together[s.name]) for s in order]
                else:
                    window = [(s, measure(s, bodies, args.seconds, s is cached))
                              for s in order]
                for s, sample in window:
                    if s is cached:
                        hit_rates.setdefault(f"{rate:.0%}", []).append(sample["hit_rate"])
                    samples.setdefault(f"{s.name}@{rate:.0%}", []).append(sample)
                    print(f"  round {r + 1} repeat {rate:4.0%} {s.name:9s} "
                          f"{sample['rps']:>7,.0f} req/s  p50 {sample['p50_ms']:6.2f} ms  "
                          f"p99 {sample['p99_ms']:6.2f} ms  cpu "
                          f"{sample.get('cpu_us_per_request', float('nan')):5.0f} us/req"
                          + (f"  hits {sample['hit_rate']:.0%}" if "hit_rate" in sample
                             else "") + f"  errors {sample['errors']:.0f}")
    finally:
        for s in pair:
            stop(s)
    if rates != RATES:  # a partial measurement: the paired medians, printed only
        for rate in rates:
            key = f"{rate:.0%}"
            cpu = f"{paired(key, 'cpu_us_per_request'):.3f}" if all(
                "cpu_us_per_request" in x for x in samples[f"cache@{key}"]
                + samples[f"no_cache@{key}"]) else "unknown (no /proc)"
            print(f"  {key}: paired requests/s {paired(key, 'rps'):.3f}, CPU per answer {cpu}")
        shutil.rmtree(work, ignore_errors=True)
        return {}
    try:
        for s in (warming, cold):
            start(s)
        for s in (warming, cold):
            wait_ready(s, expected)
        idle = first_after_idle([warming, cold], args.idle, args.idle_repeats, seed=7)
        warmups = metric(warming, "reprise_warmups_total", outcome="ok")
        cold_warmups = metric(cold, "reprise_warmups_total")
    finally:
        for s in (warming, cold):
            stop(s)
    shutil.rmtree(work, ignore_errors=True)

    med = statistics.median
    figures: dict[str, float] = {}
    for key, xs in samples.items():
        for k in ("rps", "p50_ms", "p99_ms", "cpu_us_per_request"):
            if all(k in x for x in xs):
                figures[f"{key}_{k}"] = med(x[k] for x in xs)
        figures[f"{key}_errors"] = sum(x["errors"] for x in xs)
    for rate, xs in hit_rates.items():
        figures[f"cache_hit_rate@{rate}"] = med(xs)
    for name, d in idle.items():
        figures[f"{name}_first_after_idle_ms"] = med(d["first"])
        figures[f"{name}_next_ms"] = med(d["next"])
    figures["warmups_counted"] = warmups
    figures["warmups_counted_when_off"] = cold_warmups
    ratios = {
        "cache_rps_vs_none_at_50": paired("50%", "rps"),
        "overhead_at_0": 1 - paired("0%", "rps"),
        "first_after_idle_on_vs_off": figures["warmup_on_first_after_idle_ms"]
        / figures["warmup_off_first_after_idle_ms"],
    }
    if "cache@0%_cpu_us_per_request" in figures:
        ratios["cpu_overhead_at_0"] = paired("0%", "cpu_us_per_request") - 1
        ratios["cache_cpu_vs_none_at_50"] = paired("50%", "cpu_us_per_request")
    goals = {name: {"target": f"{op} {target}", "value": ratios[name],
                    "met": ratios[name] >= target if op == ">=" else ratios[name] <= target}
             for name, (op, target) in GOALS.items()}
    for name, g in goals.items():
        print(f"  goal {name:26s} {g['target']:>8s}  {g['value']:8.3f}  "
              f"{'met' if g['met'] else 'NOT met'}")
    if warmups < 1:
        raise SystemExit("the warming server counted no warm-up: the measurement is void")
    result = {"figures": figures, "ratios": ratios, "goals": goals,
              "repeats": args.repeats, "seconds": args.seconds, "idle_s": args.idle,
              "idle_repeats": args.idle_repeats, "samples": samples,
              "idle_samples_ms": idle,
              "load": (f"wrk -t1 -c{CONCURRENCY} (stream_post.lua: the stream's bodies in "
                       "order)" if wrk else f"httpx AsyncClient, {CONCURRENCY} tasks on "
                       f"{CONCURRENCY} keep-alive connections") + ", single-row JSON POSTs, "
                      "127.0.0.1, one server process each, client and server on the same "
                      "cores",
              "baseline": "the same server without --cache-mb (and with --warmup-idle 0), "
                          "in the same run"}
    return finish("cache", result, quick=args.quick, fmt=lambda k, v: f"{v:>14,.3f}")


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
