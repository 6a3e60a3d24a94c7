"""What observability costs a prediction: Reprise's server with SLO windows, per-version
series and ``traceparent`` handling (this tree), against the same server before them
(``--baseline-src``: another checkout's ``src/``, e.g. main's), side by side in one run;
plus this tree answering requests that carry a ``traceparent``, and with ``--otel`` (spans
made for every request; ``OTEL_TRACES_EXPORTER=none``, so the figure is the cost of making
spans, not of sending them to a collector).

The model and load are ``bench_serve.py``'s: a 20-feature LogisticRegression, one worker
process per server on 127.0.0.1, ``wrk`` POSTing a single-row body at concurrency 1 and
32, one-second warm-ups, the servers taking turns back to back at each concurrency (order
rotated every round), medians over the rounds.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
from pathlib import Path
from typing import Any

from _common import WORK, finish, python
from bench_serve import (
    CONCURRENCY,
    Server,
    ensure_wrk,
    run_wrk,
    start,
    stop,
    wait_ready,
)

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def prepare(work: Path, baseline: str | None) -> tuple[list[Server], int]:
    from _serve_peers import production_lr

    row, expected, ws_dir = production_lr(work)
    serve = [python(), "-m", "reprise.cli", "serve", "lr@production", "--log-level", "warning"]
    body, url = {"records": [row]}, "/v1/models/lr/predict"
    servers = [Server("reprise", serve, url, body, "/readyz", ws_dir),
               Server("reprise_traceparent", serve, url, body, "/readyz", ws_dir),
               Server("reprise_otel", [*serve, "--otel"], url, body, "/readyz", ws_dir)]
    if baseline:
        servers.insert(0, Server("baseline", serve, url, body, "/readyz", ws_dir,
                                 src=str(Path(baseline).resolve())))
    return servers, expected


def measure(wrk: str, servers: list[Server], work: Path, repeats: int, seconds: int) -> None:
    body = work / "body.json"
    import json

    body.write_text(json.dumps(servers[0].body))
    # the servers compared take turns at one concurrency, back to back: on a shared
    # machine the load of the moment moves every figure, so compared figures are taken
    # as close together in time as they can be (and the order rotates every round)
    for r in range(repeats):
        for c in CONCURRENCY:
            for s in servers[r % len(servers):] + servers[:r % len(servers)]:
                if s.name == "reprise_traceparent":
                    os.environ["WRK_TRACEPARENT"] = TRACEPARENT
                try:
                    run_wrk(wrk, s, body, c, 1)  # warm-up
                    sample = run_wrk(wrk, s, body, c, seconds)
                finally:
                    os.environ.pop("WRK_TRACEPARENT", None)
                s.samples.setdefault(c, []).append(sample)
                print(f"  round {r + 1} {s.name:20s} c={c:<3d} {sample['rps']:>8,.0f} "
                      f"req/s  p50 {sample['p50_ms']:6.2f} ms  p99 "
                      f"{sample['p99_ms']:6.2f} ms  errors {sample['errors']:.0f}")


def micro(n: int = 100_000) -> dict[str, float]:
    """Nanoseconds per call (median of 5) of what this work adds to each request, in this
    process, beside what every request already paid for before (the request counter and
    latency histogram of ``Metrics.request``): the machines are shared, and a
    microbenchmark's ratio survives a noisy neighbour better than requests per second."""
    import time
    import timeit

    from reprise.serve._http import header
    from reprise.serve._metrics import Metrics
    from reprise.serve._policy import Policy
    from reprise.serve._slo import SloBook
    from reprise.serve._tracing import continue_trace

    book, metrics = SloBook(["lr"], lambda name: Policy(), time.perf_counter), Metrics()
    scope = {"headers": [(b"host", b"127.0.0.1:8000"), (b"user-agent", b"wrk"),
                         (b"content-length", b"400"), (b"content-type", b"application/json")]}
    tp = TRACEPARENT.encode()
    cases = {
        "existing_metrics_request": lambda: metrics.request("lr", "1", 200, 0.001, None),
        "added_slo_record": lambda: book.record("lr", time.perf_counter(), error=False,
                                                seconds=0.001),
        "added_traceparent_lookup": lambda: header(scope, b"traceparent"),
        "added_two_perf_counters": lambda: (time.perf_counter(), time.perf_counter()),
        "traceparent_answer": lambda: continue_trace(tp),
        "rollout_series_per_request": lambda: metrics.rollout_request(
            "r1", "lr", 2, "candidate", "live", error=False, seconds=0.001),
    }
    return {k: statistics.median(timeit.repeat(fn, number=n, repeat=5)) / n * 1e9
            for k, fn in cases.items()}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--seconds", type=int, default=3, help="per measurement")
    ap.add_argument("--quick", action="store_true", help="one short round, no result file")
    ap.add_argument("--baseline-src", help="the src/ folder of the code to compare with "
                    "(e.g. main's checkout); without it, no baseline is measured")
    args = ap.parse_args(argv)
    if args.quick:
        args.repeats, args.seconds = 1, 2
    wrk = ensure_wrk()
    if wrk is None:
        print("  wrk is not installed (apt-get install -y wrk); skipping")
        return {"skipped": "wrk missing"}
    work = WORK / "observability"
    shutil.rmtree(work, ignore_errors=True)
    servers, expected = prepare(work, args.baseline_src)
    os.environ["OTEL_TRACES_EXPORTER"] = "none"  # only the --otel server reads it
    load_before = os.getloadavg()
    try:
        for s in servers:
            start(s)
        for s in servers:
            wait_ready(s, expected)
        measure(wrk, servers, work, args.repeats, args.seconds)
    finally:
        for s in servers:
            stop(s)
    shutil.rmtree(work, ignore_errors=True)
    med = statistics.median
    f = {f"{s.name}_c{c}_{k}": med(x[k] for x in s.samples[c])
         for s in servers for c in CONCURRENCY for k in ("rps", "p50_ms", "p99_ms")}
    f.update({f"{s.name}_errors": sum(x["errors"] for c in CONCURRENCY for x in s.samples[c])
              for s in servers})
    ratios = {f"{s.name}_c{c}_rps_vs_{ref}": f[f"{s.name}_c{c}_rps"] / f[f"{ref}_c{c}_rps"]
              for ref in (["baseline"] if args.baseline_src else []) + ["reprise"]
              for s in servers if s.name != ref and not (ref == "reprise" and
                                                         s.name == "baseline")
              for c in CONCURRENCY}
    load_after = os.getloadavg()
    ns = micro()
    added = ns["added_slo_record"] + ns["added_traceparent_lookup"] + \
        ns["added_two_perf_counters"]
    ratios["micro_added_vs_existing_metrics_request"] = added / ns["existing_metrics_request"]
    result = {"figures": f, "ratios": ratios, "repeats": args.repeats, "micro_ns": ns,
              "load_average_1m": {"before": load_before[0], "after": load_after[0]},
              "seconds": args.seconds, "baseline_src": args.baseline_src,
              "samples": {s.name: {str(c): s.samples[c] for c in CONCURRENCY}
                          for s in servers},
              "load": "wrk -t1, single-row JSON POSTs, 127.0.0.1, one worker process each"}
    return finish("observability", result, quick=args.quick,
                  fmt=lambda k, v: f"{v:>14,.2f}")


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
