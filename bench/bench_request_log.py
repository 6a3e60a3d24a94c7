"""What the request log costs a server: requests/s and latency of ``reprise serve`` at
concurrency 32 with the log off (``--no-request-log``), at its defaults (10 % of
requests, at most 100 a second) and logging every request (``--log-sample 1``, no
effective cap: the worst case), side by side in one run.

The model and load are those of ``bench_serve.py`` (a scikit-learn LogisticRegression
on 20 numeric features, single-row JSON POSTs by ``wrk``, one worker process each on
127.0.0.1). The three servers share one workspace, as replicas would; they take turns,
the order rotated every round, each measurement after a one-second warm-up; figures are
medians over the rounds. The goal (issue 15): the default log costs at most 5 % of the
requests/s. After the run, the chunks written are counted, so a log that silently
wrote nothing cannot pass.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
from pathlib import Path
from typing import Any

from _common import WORK, finish, python
from bench_serve import Server, ensure_wrk, run_wrk, start, stop, wait_ready

CONNECTIONS = 32
GOALS = {"default_rps_vs_off": (">=", 0.95)}


def prepare(work: Path) -> tuple[list[Server], int, Path]:
    import reprise
    from _serve_peers import make_model
    from reprise.registry import package_model, promote, register_package

    frame, model = make_model()
    row = {k: float(v) for k, v in frame.iloc[7].to_dict().items()}
    expected = int(model.predict(frame.iloc[[7]].to_numpy())[0])
    ws_dir = work / "ws"
    ws_dir.mkdir(parents=True)
    ws = reprise.init(ws_dir)
    version = register_package("lr", package_model(model, sample=frame), workspace=ws).version
    promote("lr", version, "production", workspace=ws, force=True, reason="benchmark")
    ws.close()
    serve = [python(), "-m", "reprise.cli", "serve", "lr@production", "--log-level", "warning"]
    body = {"records": [row]}

    def server(name: str, *flags: str) -> Server:
        return Server(name, [*serve, *flags], "/v1/models/lr/predict", body, "/readyz", ws_dir)

    servers = [server("log_off", "--no-request-log"), server("log_default"),
               server("log_all", "--log-sample", "1", "--log-cap", "1000000")]
    return servers, expected, ws_dir


def logged(ws_dir: Path) -> dict[str, int]:
    from reprise.store import Workspace

    ws = Workspace.open(ws_dir)
    try:
        chunks = ws.metadata.list_request_chunks("lr")
        return {"chunks": len(chunks), "rows": sum(c.rows for c in chunks),
                "servers": len({c.server for c in chunks})}
    finally:
        ws.close()


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seconds", type=int, default=5, help="per measurement")
    ap.add_argument("--quick", action="store_true", help="one short round, no result file")
    args = ap.parse_args(argv)
    if args.quick:
        args.repeats, args.seconds = 1, 2
    wrk = ensure_wrk()
    if wrk is None:
        print("  wrk is not installed and could not be (run `apt-get install -y wrk` as "
              "root); skipping the request-log benchmark")
        return {"skipped": "wrk missing"}
    work = WORK / "request_log"
    shutil.rmtree(work, ignore_errors=True)
    servers, expected, ws_dir = prepare(work)
    body = work / "body.json"
    body.write_text(json.dumps(servers[0].body))
    try:
        for s in servers:
            start(s)
        for s in servers:
            wait_ready(s, expected)
        for r in range(args.repeats):
            for s in servers[r % 3:] + servers[:r % 3]:
                run_wrk(wrk, s, body, CONNECTIONS, 1)  # warm-up
                sample = run_wrk(wrk, s, body, CONNECTIONS, args.seconds)
                s.samples.setdefault(CONNECTIONS, []).append(sample)
                print(f"  round {r + 1} {s.name:12s} c={CONNECTIONS} {sample['rps']:>8,.0f} "
                      f"req/s  p50 {sample['p50_ms']:6.2f} ms  p99 {sample['p99_ms']:6.2f} ms"
                      f"  errors {sample['errors']:.0f}")
    finally:
        for s in servers:
            stop(s)  # SIGINT: each flushes what it buffered
    written = logged(ws_dir)
    shutil.rmtree(work, ignore_errors=True)
    med = statistics.median
    figures = {f"{s.name}_{k}": med(x[k] for x in s.samples[CONNECTIONS])
               for s in servers for k in ("rps", "p50_ms", "p99_ms")}
    figures.update({f"{s.name}_errors": sum(x["errors"] for x in s.samples[CONNECTIONS])
                    for s in servers})
    ratios = {"default_rps_vs_off": figures["log_default_rps"] / figures["log_off_rps"],
              "all_rps_vs_off": figures["log_all_rps"] / figures["log_off_rps"],
              "default_p99_vs_off": figures["log_default_p99_ms"] / figures["log_off_p99_ms"]}
    goals = {name: {"target": f"{op} {target}", "value": ratios[name],
                    "met": ratios[name] >= target if op == ">=" else ratios[name] <= target}
             for name, (op, target) in GOALS.items()}
    for name, g in goals.items():
        print(f"  goal {name:24s} {g['target']:>8s}  {g['value']:8.3f}  "
              f"{'met' if g['met'] else 'NOT met'}")
    print(f"  written: {written}")
    if written["rows"] == 0 and not args.quick:
        raise SystemExit("the request log wrote nothing: the measurement is void")
    result = {"figures": figures, "ratios": ratios, "goals": goals, "written": written,
              "repeats": args.repeats, "seconds": args.seconds,
              "samples": {s.name: s.samples[CONNECTIONS] for s in servers},
              "load": f"wrk -t1 -c{CONNECTIONS}, single-row JSON POSTs, 127.0.0.1, one "
                      "worker process each, three servers on one workspace",
              "baseline": "the same server with --no-request-log, in the same run"}
    return finish("request_log", result, quick=args.quick, fmt=lambda k, v: f"{v:>14,.3f}")


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
