"""Native vs ONNX Runtime vs ONNX int8 serving and batch prediction (issue 18).

Two models on the breast-cancer data (as the demo's): a scikit-learn pipeline
(StandardScaler + LogisticRegression) and the demo's MLP (30-32-32-2, with its fitted
scaler). Each is registered, then ``optimize``d to ONNX and to ONNX dynamic int8.
For each of the 2 x 3 versions, a real ``reprise serve NAME:V --runtime R`` process:
cold start (spawn to ``/readyz``), single-row JSON requests/s at concurrency 1 (an httpx
client in this process, answers checked) and 32 (``wrk -t1 -c32``, as bench_serve and
bench_rollout load a server: a Python client at c=32 takes most of one of the two cores and
capped every server near 270 requests/s in a quiet run, so it measured the client; its
figure is kept as ``req_per_s_c32_httpx``), and the server's RSS after the load (these
servers run with ``--no-request-log``; once more each, with the request log on as by
default, the RSS after its first Parquet chunk: ``rss_mb_request_log``). Then,
after all the servers, batch prediction rows/s in this process (validated columns,
50,000-row chunks, as ``reprise predict`` does): a model's three runtimes take turns,
one pass over the rows each per round, nine rounds, after a warm-up chunk each.
Medians over repeats (rounds); servers take turns.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import WORK, finish  # noqa: E402
from bench_serve import ensure_wrk, run_wrk  # noqa: E402

RUNTIMES = ("native", "onnx", "int8")
ATOL = {"sk": 1e-5, "mlp": 1e-5}  # the default parity tolerance


def _models(root: Path) -> dict[str, dict[str, int]]:
    """Register both models and their two ONNX variants; ``{model: {runtime: version}}``."""
    import numpy as np
    import pandas as pd
    import torch
    from sklearn.datasets import load_breast_cancer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    import reprise
    from reprise.registry import optimize, package_model, register_package

    ws = reprise.init(root)
    data = load_breast_cancer(as_frame=True)
    x = data.data.rename(columns=lambda c: c.replace(" ", "_"))
    y = np.asarray(data.target)
    gates = {"metrics": {}, "gates": {"passed": True, "results": []}}
    pipe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000)).fit(x, y)
    register_package("sk", package_model(pipe, sample=x, evaluation=gates), workspace=ws)
    prep = StandardScaler().fit(x)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(30, 32), torch.nn.ReLU(), torch.nn.Dropout(0.1),
                              torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))
    xt, yt = torch.tensor(np.array(prep.transform(x)), dtype=torch.float32), torch.tensor(y)
    opt = torch.optim.Adam(net.parameters(), lr=0.01)
    for _ in range(100):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(xt), yt).backward()
        opt.step()
    net.eval()
    register_package("mlp", package_model(net, sample=x, target=y, preprocessing=prep,
                                          evaluation=gates), workspace=ws)
    out = {}
    for name in ("sk", "mlp"):
        v_onnx = optimize(name, 1, atol=ATOL[name], workspace=ws).version
        v_int8 = optimize(name, 1, quantize="dynamic-int8", holdout=x, holdout_target=y,
                          atol=ATOL[name], workspace=ws).version
        out[name] = {"native": 1, "onnx": v_onnx, "int8": v_int8}
    ws.close()
    pd.DataFrame(x).head(1).to_json(root / "row.json", orient="records")
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _server_env() -> dict[str, str]:
    """The servers' environment: no REPRISE_* settings, and bytecode writing left on (a
    user's default, as ``_common.command_time`` leaves it), so that a server starts from
    cached ``.pyc`` files as an installed package does, even when the shell running the
    benchmarks sets ``PYTHONDONTWRITEBYTECODE`` (else every start compiles Reprise's
    modules again: about 0.2 s of a cold start)."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith("REPRISE_") and k != "PYTHONDONTWRITEBYTECODE"}


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _serve(root: Path, name: str, version: int, runtime: str, request_log: bool = False
           ) -> tuple[subprocess.Popen[bytes], str, float, float]:
    """A started server, its URL, the cold start (spawn to ``/readyz`` 200, wall seconds)
    and the server's CPU seconds by then (less noisy on a shared machine)."""
    import httpx

    port = _free_port()
    env = _server_env()
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "reprise.cli", "serve", f"{name}:{version}", "--port",
         str(port), "--runtime", "native" if runtime == "native" else "onnx",
         *([] if request_log else ["--no-request-log"]), "--log-level", "warning"],
        cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"server {name}:{version} ({runtime}) exited")
        try:
            if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                return proc, url, time.perf_counter() - t0, _cpu_s(proc.pid)
        except httpx.TransportError:
            pass
        time.sleep(0.01)


async def _load(url: str, body: bytes, concurrency: int, seconds: float) -> float:
    import httpx

    done = 0
    stop = time.perf_counter() + seconds
    limits = httpx.Limits(max_connections=concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=30) as client:
        async def worker() -> None:
            nonlocal done
            while time.perf_counter() < stop:
                r = await client.post(url, content=body,
                                      headers={"content-type": "application/json"})
                if r.status_code != 200:
                    raise RuntimeError(f"{r.status_code}: {r.text[:200]}")
                done += 1

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return done / (time.perf_counter() - t0)


_BATCH_ROUNDS = 9  # interleaved passes of each runtime over ``rows`` rows


def _batch_rows_per_s(root: Path, versions: dict[str, dict[str, int]], rows: int,
                      rounds: int) -> dict[str, list[float]]:
    """Rows/s of each model's runtimes, ``{"NAME.RUNTIME": [one per round]}``.

    All of a model's packages are loaded and warmed up first (one chunk each: first-call
    allocations, torch's and ONNX Runtime's, apart), then each round runs one pass of
    ``rows`` rows per runtime, in an order rotated every round. On this shared machine
    the rate of one runtime moved by a third between two passes 20 seconds apart (they
    followed each server's load before), so a runtime's passes measured at other
    moments than another's gave ratios from 1.35 to 2.50x in one run; interleaved, the
    runtimes see the same moments."""
    import numpy as np

    from reprise.registry._api import _load as load_version
    from reprise.registry._api import _ws
    from reprise.registry._registry import get_version

    ws = _ws(root)
    chunk = 50_000
    out: dict[str, list[float]] = {}
    for name, by_runtime in versions.items():
        pkgs = {rt: load_version(ws, get_version(ws, name, v),
                                 "native" if rt == "native" else "onnx")
                for rt, v in by_runtime.items()}
        sig = next(iter(pkgs.values())).signature
        rng = np.random.default_rng(0)
        cols = {f.name: rng.uniform(f.min, f.max, chunk) for f in sig.inputs}
        for pkg in pkgs.values():
            pkg.predict(cols)  # warm-up
        order = list(pkgs)
        for r in range(rounds):
            for rt in order[r % len(order):] + order[:r % len(order)]:
                t0 = time.perf_counter()
                done = 0
                while done < rows:
                    done += len(pkgs[rt].predict(cols)["prediction"])
                out.setdefault(f"{name}.{rt}", []).append(done / (time.perf_counter() - t0))
    return out


def _rss_with_request_log(root: Path, name: str, version: int, runtime: str, body: bytes
                          ) -> float:
    """RSS (MB) of a server with the request log on (``reprise serve``'s default) once its
    log has written a chunk: writing Parquet through pyarrow imports pandas, which the
    figures above (``--no-request-log``) leave out."""
    import httpx

    proc, url, *_ = _serve(root, name, version, runtime, request_log=True)
    try:
        asyncio.run(_load(f"{url}/v1/models/{name}/predict", body, 4, 1.0))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # the first flush comes within log_flush_s (10 s)
            if 'outcome="written"' in httpx.get(url + "/metrics", timeout=5).text:
                break
            time.sleep(0.5)
        else:
            raise RuntimeError(f"{name}:{version} ({runtime}): the request log wrote nothing")
        time.sleep(0.5)
        return _rss_mb(proc.pid)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)


@dataclass(frozen=True)
class _Target:
    """What bench_serve.run_wrk reads of a server: its port and path."""

    port: int
    url: str


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="one round, no result file")
    ap.add_argument("--rows", type=int, default=1_000_000, help="batch rows per case")
    args = ap.parse_args(argv)
    repeats, seconds = (1, 1.5) if args.quick else (3, 4.0)
    rounds = 3 if args.quick else _BATCH_ROUNDS
    rows = 100_000 if args.quick else args.rows
    root = WORK / "onnx"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    versions = _models(root)
    body = ("[" + (root / "row.json").read_text().strip()[1:-1] + "]").encode()
    body_file = root / "body.json"
    body_file.write_bytes(body)
    wrk = ensure_wrk()
    if wrk is None:
        print("  wrk is not installed and could not be (apt-get install -y wrk as root): "
              "requests/s at c=32 from the Python client only")
    samples: dict[str, list[float]] = {}
    for name, by_runtime in versions.items():  # one unmeasured start each: the bytecode
        for runtime, version in by_runtime.items():  # caches written, as after install
            proc, *_ = _serve(root, name, version, runtime)
            proc.send_signal(signal.SIGINT)
            proc.wait(30)
    for _ in range(repeats):
        for name, by_runtime in versions.items():
            for runtime, version in by_runtime.items():
                proc, url, cold, cold_cpu = _serve(root, name, version, runtime)
                try:
                    path = f"{url}/v1/models/{name}/predict"
                    asyncio.run(_load(path, body, 4, 0.5))  # warm the connections
                    c1 = asyncio.run(_load(path, body, 1, seconds))
                    c32_httpx = asyncio.run(_load(path, body, 32, seconds))
                    c32 = c32_httpx
                    if wrk is not None:
                        target: Any = _Target(int(url.rsplit(":", 1)[1]),
                                              f"/v1/models/{name}/predict")
                        run_wrk(wrk, target, body_file, 32, 1)  # warm-up
                        sample = run_wrk(wrk, target, body_file, 32, int(seconds))
                        if sample["errors"]:
                            raise RuntimeError(f"{name}:{version} ({runtime}): wrk errors "
                                               f"{sample}")
                        c32 = sample["rps"]
                    rss = _rss_mb(proc.pid)
                finally:
                    proc.send_signal(signal.SIGINT)
                    proc.wait(30)
                key = f"{name}.{runtime}"
                for metric, value in (("cold_start_s", cold), ("cold_start_cpu_s", cold_cpu),
                                      ("req_per_s_c1", c1),
                                      ("req_per_s_c32", c32),
                                      ("req_per_s_c32_httpx", c32_httpx), ("rss_mb", rss)):
                    samples.setdefault(f"{key}.{metric}", []).append(value)
    for name, by_runtime in versions.items():
        for runtime, version in by_runtime.items():
            samples[f"{name}.{runtime}.rss_mb_request_log"] = [
                _rss_with_request_log(root, name, version, runtime, body)]
    for key, rates in _batch_rows_per_s(root, versions, rows, rounds).items():
        samples[f"{key}.batch_rows_per_s"] = rates
    figures = {k: statistics.median(v) for k, v in samples.items()}
    ratios = {}
    for name in versions:
        for runtime in ("onnx", "int8"):
            for metric in ("req_per_s_c1", "req_per_s_c32", "req_per_s_c32_httpx",
                           "batch_rows_per_s"):
                ratios[f"{name}.{runtime}_vs_native.{metric}"] = (
                    figures[f"{name}.{runtime}.{metric}"] / figures[f"{name}.native.{metric}"])
            paired = [a / b for a, b in zip(samples[f"{name}.{runtime}.batch_rows_per_s"],
                                            samples[f"{name}.native.batch_rows_per_s"],
                                            strict=True)]  # the same round's passes
            ratios[f"{name}.{runtime}_vs_native.batch_rows_per_s_paired"] = \
                statistics.median(paired)
            ratios[f"{name}.{runtime}_vs_native.rss"] = (
                figures[f"{name}.{runtime}.rss_mb"] / figures[f"{name}.native.rss_mb"])
    result = {"figures": figures, "ratios": ratios, "samples": samples,
              "settings": {"parity_atol": ATOL, "repeats": repeats, "load_seconds": seconds,
                           "batch_rows": rows, "batch_rounds": rounds,
                           "c32_client": "wrk -t1 -c32" if wrk else "httpx (wrk missing)",
                           "ort_threads": os.environ.get("REPRISE_ORT_THREADS", "all CPUs"),
                           "cold_start": "spawn of `reprise serve` to /readyz 200, after one "
                                         "unmeasured start of each server (bytecode cached)"},
              "goals": {"mlp.onnx_vs_native.req_per_s_c32": ">= 2",
                        "mlp.onnx_vs_native.batch_rows_per_s": ">= 2",
                        "mlp.onnx.cold_start_s": "<= 1.5", "mlp.onnx.rss_mb": "< 250"}}
    return finish("onnx", result, quick=args.quick)


if __name__ == "__main__":
    main()
