"""What a rollout costs the server that routes it, and how fast a bad candidate leaves
(issue 14, "Performance").

Three ``reprise serve lr@production`` processes on 127.0.0.1, each on its own workspace
holding the ``serve`` benchmark's LogisticRegression twice (v1 stable, v2 the same model
registered again, so both versions cost the same):

* ``plain``: no rollout (the baseline);
* ``canary``: a canary of v2 at 10 % (interval 1 h: it routes and records, and its
  decider analyses every second, but takes no step);
* ``shadow``: a shadow rollout of v2 (every stable answer copied to the candidate).

The same three again with ONNX Runtime (``plain_onnx``, ``canary_onnx``, ``shadow_onnx``:
``reprise serve --runtime onnx``, the stable and the candidate each version's ONNX
variant, ``models optimize``): a scikit-learn call costs ~130-400 us of interpreter time
whatever its rows (its input checks), an ONNX Runtime call a small part of that, so
the two sets separate what the candidate's model calls cost from what the routing and
the recording do (2026-11-28: the canary still cost 15 % more CPU per answer with ONNX
Runtime, the event loop's extra the same as with scikit-learn; the shadow's p99 cost was
scikit-learn's alone). ``--runtimes native`` measures the first three only.

``wrk`` (one thread, single-row JSON POSTs, ``serve_post.lua``) at concurrency 32 runs
against each in turn, order rotated every round, one second of warm-up before each
measurement; figures are medians over the rounds. Goals: canary requests/s >= 0.95x
plain's and p99 <= 25 ms; shadow p99 <= 1.10x plain's. The share of requests v2 answered
(canary) and the shadow copies compared and dropped are read from each server's
``/metrics`` around every measurement.

Then the reaction time: a fourth server (``_rollout_faults.py``: v2 raises on 20 % of
its rows) under a load of Python threads; a canary of v2 at 20 % with a 2 s interval
runs until it is rolled back (two failed analyses in a row). Per repeat: the time from
the first failed analysis (its audit event) to the rollback decision, and to the last
answer v2 gave a client. Goal: one interval plus at most 1 s.

The load average and CPU counts are recorded: on a shared 2-core machine the load
generator, the server and everyone else compete for the same cores.

Where the time goes, per measurement: the server's CPU per answer split into its event
loop's thread and all its other threads (the versions' predict threads, the rollout
controller's store calls; from ``/proc``), and each version's predict calls per answer
and rows per call (``reprise_batch_size_rows`` in ``/metrics``), and the threads'
wake-ups per answer (voluntary context switches of the event loop's thread and of the
others, and the preemptions of all; from ``/proc``): a canary's cost is mostly the
candidate's own predict calls, one more per batching cycle, each paying the model's fixed
per-call cost for a couple of rows and waking its thread. The ratios of CPU per answer,
paired per round, are the figures least moved by other work on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from _common import WORK, finish, python
from bench_serve import ensure_wrk, free_port, run_wrk

HERE = Path(__file__).resolve().parent
FAULTS = HERE / "_rollout_faults.py"
CONCURRENCY = 32
INTERVAL_S = 2.0  # the reaction-time rollout's analysis interval
FAIL_SHARE = 0.2
GOALS = {  # from the issue: measured and reported, never asserted
    "canary_c32_rps_vs_plain": (">=", 0.95),
    "canary_c32_p99_ms": ("<=", 25.0),
    "shadow_c32_p99_vs_plain": ("<=", 1.10),
    "reaction_s_max_minus_interval": ("<=", 1.0),
}
RUNTIMES = ("native", "onnx")
ROLES = ("plain", "canary", "shadow")


@dataclass
class Server:
    name: str
    ws_dir: Path
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    role: str = "plain"  # plain, canary or shadow
    runtime: str = "native"
    versions: tuple[int, int] = (1, 2)  # the stable version and the candidate
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    samples: list[dict[str, float]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def _workspace(work: Path, name: str, frame: Any, model: Any, runtime: str = "native"
               ) -> tuple[Path, Any, tuple[int, int]]:
    """A workspace with two versions of the model costing the same, the first in
    production: versions 1 and 2, or (``runtime="onnx"``) their ONNX variants 3 and 4."""
    import reprise
    from reprise.registry import optimize, package_model, promote, register_package

    ws_dir = work / name
    ws_dir.mkdir(parents=True)
    ws = reprise.init(ws_dir)
    for v in (1, 2):  # the same model (a new description: a new package), so both cost the same
        register_package("lr", package_model(model, sample=frame, description=f"copy {v}"),
                         workspace=ws)
    versions = (1, 2)
    if runtime == "onnx":
        versions = (optimize("lr", 1, workspace=ws).version,
                    optimize("lr", 2, workspace=ws).version)
    promote("lr", versions[0], "production", workspace=ws, force=True, reason="benchmark")
    return ws_dir, ws, versions


def prepare(work: Path, runtimes: list[str]
            ) -> tuple[list[Server], Server, dict[str, float], Any]:
    from _serve_peers import make_model
    from reprise.serve import start_rollout

    frame, model = make_model()
    row = {k: float(v) for k, v in frame.iloc[7].to_dict().items()}
    # the servers measured poll as `reprise serve` does by default (5 s: a rollout tick a
    # second); the reaction-time server every 0.5 s, as the end-to-end tests do
    serve = ["-m", "reprise.cli", "serve", "lr@production", "--log-level", "warning"]
    servers = []
    for runtime in runtimes:
        for role in ROLES:
            name = role if runtime == "native" else f"{role}_{runtime}"
            ws_dir, ws, versions = _workspace(work, name, frame, model, runtime)
            if role == "canary":
                start_rollout("lr", versions[1], steps=[10, 100], interval="1h", force=True,
                              reason="benchmark", workspace=ws)
            elif role == "shadow":
                start_rollout("lr", versions[1], strategy="shadow", interval="1h", force=True,
                              reason="benchmark", workspace=ws)
            ws.close()
            servers.append(Server(name, ws_dir, [python(), *serve, "--runtime", runtime],
                                  role=role, runtime=runtime, versions=versions))
    ws_dir, ws, _ = _workspace(work, "failing", frame, model)
    failing = Server("failing", ws_dir, [python(), str(FAULTS), *serve[2:],
                                         "--poll-interval", "0.5"],
                     env={"REPRISE_BENCH_FAIL": f"2:{FAIL_SHARE}"})
    return servers, failing, row, ws


def start(server: Server) -> None:
    server.port = free_port()
    env = {k: v for k, v in os.environ.items()
           if k not in ("REPRISE_SERVE_TOKEN", "REPRISE_WORKSPACE", "REPRISE_STORE_URL",
                        "REPRISE_ARTIFACTS_URL")}
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
    env.update(server.env)
    server.proc = subprocess.Popen([*server.argv, "--port", str(server.port)],
                                   cwd=server.ws_dir, env=env, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, start_new_session=True)


def wait_routing(server: Server, rollout: bool, timeout: float = 180) -> None:
    """Ready, and (``rollout``) routing by its workspace's running rollout."""
    deadline = time.monotonic() + timeout
    while True:
        assert server.proc is not None
        if server.proc.poll() is not None:
            raise RuntimeError(f"{server.name} exited with {server.proc.returncode}")
        try:
            r = httpx.get(server.url + "/v1/models", timeout=2)
            if r.status_code == 200 and httpx.get(server.url + "/readyz",
                                                  timeout=2).status_code == 200:
                routed = r.json()["models"][0].get("rollout")
                if bool(routed) == rollout:
                    return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{server.name} was not ready after {timeout:.0f} s")
        time.sleep(0.3)


def stop(server: Server) -> None:
    if server.proc is None or server.proc.poll() is not None:
        return
    os.killpg(server.proc.pid, signal.SIGINT)
    try:
        server.proc.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(server.proc.pid, signal.SIGKILL)
        server.proc.wait(10)


def counters(server: Server) -> dict[str, float]:
    """Requests answered per version, shadow copies per outcome, predict calls and their
    rows per version (from /metrics)."""
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(server.url + "/metrics", timeout=10).text
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "reprise_requests_total" and s.labels.get("model") == "lr":
                key = f"requests_v{s.labels['version']}"
                out[key] = out.get(key, 0.0) + s.value
            elif s.name == "reprise_shadow_copies_total":
                out[f"shadow_{s.labels['outcome']}"] = s.value
            elif s.name in ("reprise_batch_size_rows_count", "reprise_batch_size_rows_sum") \
                    and s.labels.get("model") == "lr":
                what = "calls" if s.name.endswith("_count") else "rows"
                out[f"{what}_v{s.labels['version']}"] = s.value
    return out


def cpu_seconds(server: Server) -> float:
    """The server process's CPU time so far (user + system, all its threads), from /proc."""
    assert server.proc is not None
    fields = Path(f"/proc/{server.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def thread_cpu_seconds(server: Server) -> tuple[float, float]:
    """CPU seconds so far of the server's main thread (its event loop) and of all its other
    threads together (predict threads, store calls), from /proc."""
    assert server.proc is not None
    pid, tick = server.proc.pid, os.sysconf("SC_CLK_TCK")
    main = other = 0.0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        seconds = (int(fields[11]) + int(fields[12])) / tick
        if task.name == str(pid):
            main += seconds
        else:
            other += seconds
    return main, other


def thread_switches(server: Server) -> tuple[int, int, int]:
    """Context switches so far of the server's threads, from /proc: the main thread's
    voluntary ones (its event loop went to sleep: a wake-up each), the other threads'
    voluntary ones (a predict thread or a store call waking up, or waiting for the
    interpreter) and all threads' involuntary ones (preempted by other work)."""
    assert server.proc is not None
    pid = server.proc.pid
    main = other = forced = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            status = (task / "status").read_text()
        except OSError:  # the thread ended meanwhile
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        voluntary = int(fields["voluntary_ctxt_switches"])
        forced += int(fields["nonvoluntary_ctxt_switches"])
        if task.name == str(pid):
            main += voluntary
        else:
            other += voluntary
    return main, other, forced


def _delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items()}


def measure(wrk: str, servers: list[Server], body: Path, repeats: int, seconds: int) -> None:
    for r in range(repeats):
        order = servers[r % len(servers):] + servers[:r % len(servers)]
        for s in order:
            run_wrk(wrk, _target(s), body, CONCURRENCY, 1)  # warm-up
            before, cpu, threads = counters(s), cpu_seconds(s), thread_cpu_seconds(s)
            switches = thread_switches(s)
            sample: dict[str, Any] = run_wrk(wrk, _target(s), body, CONCURRENCY, seconds)
            cpu = cpu_seconds(s) - cpu
            loop_s, other_s = (b - a for a, b in zip(threads, thread_cpu_seconds(s),
                                                     strict=True))
            woke = [b - a for a, b in zip(switches, thread_switches(s), strict=True)]
            seen = _as_v1_v2(_delta(counters(s), before), s.versions)
            answered = seen.get("requests_v1", 0.0) + seen.get("requests_v2", 0.0)
            # CPU per answer: what the routing or the shadow costs the server, less
            # sensitive than requests/s to what else runs on a shared machine
            sample["cpu_us_per_request"] = cpu / max(1.0, answered) * 1e6
            sample["candidate_share"] = seen.get("requests_v2", 0.0) / max(1.0, answered)
            sample["loop_cpu_us_per_request"] = loop_s / max(1.0, answered) * 1e6
            sample["other_threads_cpu_us_per_request"] = other_s / max(1.0, answered) * 1e6
            # wake-ups per answer: the event loop's, the other threads', and preemptions
            for k, n in zip(("loop_wakeups", "other_wakeups", "preempted"), woke,
                            strict=True):
                sample[f"{k}_per_request"] = n / max(1.0, answered)
            for v in (1, 2):  # predict calls per answer, rows per call (shadow: copies)
                calls = seen.get(f"calls_v{v}", 0.0)
                sample[f"v{v}_calls_per_request"] = calls / max(1.0, answered)
                sample[f"v{v}_rows_per_call"] = seen.get(f"rows_v{v}", 0.0) / max(1.0, calls)
            for outcome in ("compared", "agreed", "dropped", "failed"):
                sample[f"shadow_{outcome}"] = seen.get(f"shadow_{outcome}", 0.0)
            sample["load1"] = os.getloadavg()[0]
            s.samples.append(sample)
            extra = (f"  v2 {sample['candidate_share']:.1%}" if s.role == "canary" else
                     f"  copies compared {sample['shadow_compared']:.0f} dropped "
                     f"{sample['shadow_dropped']:.0f}" if s.role == "shadow" else "")
            print(f"  round {r + 1} {s.name:12s} c={CONCURRENCY} {sample['rps']:>8,.0f} req/s  "
                  f"p50 {sample['p50_ms']:6.2f} ms  p99 {sample['p99_ms']:6.2f} ms  "
                  f"errors {sample['errors']:.0f}  cpu {sample['cpu_us_per_request']:.0f} "
                  f"us/req (loop {sample['loop_cpu_us_per_request']:.0f})  wake-ups/req "
                  f"{sample['loop_wakeups_per_request']:.3f}+"
                  f"{sample['other_wakeups_per_request']:.3f}  calls/req "
                  f"{sample['v1_calls_per_request']:.3f}+{sample['v2_calls_per_request']:.3f} "
                  f"rows/call {sample['v1_rows_per_call']:.1f}, "
                  f"{sample['v2_rows_per_call']:.1f}{extra}", flush=True)


def _as_v1_v2(seen: dict[str, float], versions: tuple[int, int]) -> dict[str, float]:
    """``seen`` with the stable version's counters named v1's and the candidate's v2's."""
    names = {f"v{version}": f"v{i}" for i, version in enumerate(versions, 1)}
    out = {}
    for key, value in seen.items():
        head, _, version = key.rpartition("_")
        if head and version.startswith("v"):
            if version in names:
                out[f"{head}_{names[version]}"] = value
        else:
            out[key] = value
    return out


class _Target:
    def __init__(self, server: Server) -> None:
        self.name, self.port, self.url = server.name, server.port, "/v1/models/lr/predict"


def _target(server: Server) -> Any:
    return _Target(server)  # what run_wrk reads: port and url


# -- in-process CPU per request -------------------------------------------------------------

async def _cpu_slice(ws_dir: Path, body: dict[str, Any], requests: int,
                     rollout: bool, runtime: str = "native") -> float:
    """Process CPU microseconds per request of ``requests`` single-row predictions sent 32
    at a time to a server started here, on ``ws_dir``, without sockets (httpx's ASGI
    transport): the same client work for every configuration, so differences between
    configurations are the server's."""
    import asyncio

    from reprise.registry import RegistrySource
    from reprise.serve import Settings, create_app
    from reprise.tracking._api import open_workspace

    app = create_app(RegistrySource(open_workspace(ws_dir), runtime=runtime),
                     ["lr@production"],
                     settings=Settings())
    state = app.state.reprise
    async with app.router.lifespan_context(app):
        while not (state.ready and (bool(state.table.splits) == rollout)):
            await asyncio.sleep(0.05)
        await asyncio.sleep(2.5)  # the rollout's first ticks (lease, analysis) come first
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://b") as client:
            async def burst() -> None:
                got = await asyncio.gather(*(client.post("/v1/models/lr/predict", json=body)
                                             for _ in range(CONCURRENCY)))
                assert all(r.status_code == 200 for r in got)
            for _ in range(200 // CONCURRENCY):  # warm-up
                await burst()
            cpu = time.process_time()
            for _ in range(requests // CONCURRENCY):
                await burst()
            return (time.process_time() - cpu) / (requests // CONCURRENCY * CONCURRENCY) * 1e6


def inprocess(servers: list[Server], body: dict[str, Any], repeats: int,
              requests: int) -> dict[str, list[float]]:
    import asyncio

    out: dict[str, list[float]] = {s.name: [] for s in servers}
    for s in servers:  # what each imports once (the analysis: scipy) is not measured
        asyncio.run(_cpu_slice(s.ws_dir, body, 4 * CONCURRENCY, s.role != "plain",
                               s.runtime))
    for r in range(repeats):
        order = servers[r % len(servers):] + servers[:r % len(servers)]
        for s in order:
            us = asyncio.run(_cpu_slice(s.ws_dir, body, requests, s.role != "plain",
                                        s.runtime))
            out[s.name].append(us)
            print(f"  in-process round {r + 1} {s.name:12s} {us:7.1f} us CPU per request "
                  "(client included)", flush=True)
    return out


# -- reaction time -------------------------------------------------------------------------

class Load:
    """Threads posting random single-row requests; every answer's time, status, version."""

    def __init__(self, url: str, threads: int = 4) -> None:
        self.url, self.threads = url + "/v1/models/lr/predict", threads
        self.answers: list[tuple[float, int, int | None]] = []
        self._stop = threading.Event()
        self._workers = [threading.Thread(target=self._run, args=(k,), daemon=True)
                         for k in range(threads)]

    def __enter__(self) -> Load:
        for t in self._workers:
            t.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        for t in self._workers:
            t.join(30)

    def _run(self, k: int) -> None:
        import numpy as np

        from _serve_peers import FEATURES

        rng = np.random.default_rng(k)
        with httpx.Client(timeout=30) as client:
            while not self._stop.is_set():
                row = dict(zip(FEATURES, rng.normal(size=len(FEATURES)).tolist(),
                               strict=True))
                try:
                    r = client.post(self.url, json={"records": [row]})
                except httpx.TransportError:
                    continue
                v = r.headers.get("x-reprise-model-version")
                self.answers.append((time.time(), r.status_code, int(v) if v else None))


def reaction(server: Server, ws: Any, repeats: int) -> list[dict[str, float]]:
    from reprise.registry import audit_log
    from reprise.serve import start_rollout

    out = []
    with Load(server.url) as load:
        for r in range(repeats):
            rec = start_rollout("lr", 2, steps=[20, 100], interval=f"{INTERVAL_S:g}s",
                                policy={"analysis": {"min_requests": 100}}, force=True,
                                reason="benchmark", workspace=ws)
            deadline = time.monotonic() + 120
            while (ws.metadata.get_rollout(rec.id)).running:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"rollout {rec.id} still running after 120 s")
                time.sleep(0.1)
            time.sleep(1.5)  # answers in flight at the rollback arrive
            final = ws.metadata.get_rollout(rec.id)
            events = [e for e in audit_log(workspace=ws)
                      if e["payload"].get("rollout") == rec.id]
            first_fail = next((e["time"] for e in events if e["action"] == "rollout.hold"
                               and e["payload"]["reason"].startswith("failed analysis")),
                              None)
            decided = events[-1]["time"]
            on_v2 = [t for t, _, v in load.answers if v == 2 and t >= rec.created_at]
            sample = {"state": final.state, "reason": final.reason or "",
                      "first_failed_analysis_to_rollback_s":
                          None if first_fail is None else decided - first_fail,
                      "first_failed_analysis_to_last_v2_answer_s":
                          None if first_fail is None or not on_v2 else max(on_v2) - first_fail,
                      "rollback_to_last_v2_answer_s": max(on_v2) - decided if on_v2 else None,
                      "start_to_rollback_s": decided - rec.created_at,
                      "v2_answers": len(on_v2),
                      "v2_errors": sum(1 for t, s, v in load.answers
                                       if v == 2 and s != 200 and t >= rec.created_at)}
            out.append(sample)
            print(f"  reaction {r + 1}: {final.state}; first failed analysis -> rollback "
                  f"{_s(sample['first_failed_analysis_to_rollback_s'])}, -> last answer by "
                  f"v2 {_s(sample['first_failed_analysis_to_last_v2_answer_s'])} "
                  f"(interval {INTERVAL_S:g} s)", flush=True)
    return out


def _s(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f} s"


# -- summary ---------------------------------------------------------------------------------

def summarise(servers: list[Server], reactions: list[dict[str, Any]]
              ) -> tuple[dict[str, float], dict[str, float], dict[str, Any]]:
    """Medians per server, ratios to the plain server of the same runtime, the goals (the
    native runtime's under the issue's names, ONNX Runtime's prefixed ``onnx_``)."""
    med = statistics.median
    by = {s.name: s for s in servers}
    figures = {f"{s.name}_c32_{k}": med(x[k] for x in s.samples)
               for s in servers for k in ("rps", "p50_ms", "p99_ms", "cpu_us_per_request",
                                          "loop_cpu_us_per_request",
                                          "other_threads_cpu_us_per_request",
                                          "loop_wakeups_per_request",
                                          "other_wakeups_per_request",
                                          "preempted_per_request",
                                          "v1_calls_per_request", "v1_rows_per_call")}
    figures.update({f"{s.name}_errors": sum(x["errors"] for x in s.samples) for s in servers})
    ratios: dict[str, float] = {}
    values: dict[str, float] = {}
    for runtime in sorted({s.runtime for s in servers}):
        sfx, pre = ("", "") if runtime == "native" else (f"_{runtime}", f"{runtime}_")
        plain, canary, shadow = (by[f"{role}{sfx}"] for role in ROLES)
        for s in (canary, shadow):
            for k in ("v2_calls_per_request", "v2_rows_per_call"):
                figures[f"{s.name}_c32_{k}"] = med(x[k] for x in s.samples)
        figures[f"{canary.name}_candidate_share"] = med(
            x["candidate_share"] for x in canary.samples)
        for outcome in ("compared", "dropped", "failed"):
            figures[f"{shadow.name}_copies_{outcome}_per_s"] = med(
                x[f"shadow_{outcome}"] / x["duration_s"] for x in shadow.samples)
        figures[f"{shadow.name}_compared_share"] = med(
            x["shadow_compared"] / max(1.0, x["shadow_compared"] + x["shadow_dropped"])
            for x in shadow.samples)

        def ratio(a: Server, b: Server, k: str) -> float:
            return figures[f"{a.name}_c32_{k}"] / figures[f"{b.name}_c32_{k}"]

        def paired(a: Server, b: Server, k: str) -> float:
            return med(x[k] / y[k] for x, y in zip(a.samples, b.samples, strict=True))

        ratios.update({
            f"{pre}canary_c32_rps_vs_plain": ratio(canary, plain, "rps"),
            f"{pre}canary_c32_p99_vs_plain": ratio(canary, plain, "p99_ms"),
            f"{pre}shadow_c32_p99_vs_plain": ratio(shadow, plain, "p99_ms"),
            f"{pre}shadow_c32_rps_vs_plain": ratio(shadow, plain, "rps"),
            f"{pre}canary_cpu_per_request_vs_plain":
                ratio(canary, plain, "cpu_us_per_request"),
            f"{pre}shadow_cpu_per_request_vs_plain":
                ratio(shadow, plain, "cpu_us_per_request"),
            f"{pre}canary_cpu_per_request_vs_plain_paired":
                paired(canary, plain, "cpu_us_per_request"),
            f"{pre}shadow_cpu_per_request_vs_plain_paired":
                paired(shadow, plain, "cpu_us_per_request"),
            f"{pre}canary_c32_rps_vs_plain_paired": paired(canary, plain, "rps"),
            f"{pre}shadow_c32_p99_vs_plain_paired": paired(shadow, plain, "p99_ms"),
        })
        values.update({f"{pre}{k}": ratios[f"{pre}{k}"]
                       for k in ("canary_c32_rps_vs_plain", "shadow_c32_p99_vs_plain")})
        values[f"{pre}canary_c32_p99_ms"] = figures[f"{canary.name}_c32_p99_ms"]
    leave = [x["first_failed_analysis_to_last_v2_answer_s"] for x in reactions
             if x["first_failed_analysis_to_last_v2_answer_s"] is not None]
    if leave:
        figures["reaction_s_median"] = med(leave)
        figures["reaction_s_max"] = max(leave)
        values["reaction_s_max_minus_interval"] = max(leave) - INTERVAL_S
    goals = {}
    for name, value in values.items():
        op, target = GOALS[name.removeprefix("onnx_")]
        goals[name] = {"target": f"{op} {target}", "value": value,
                       "met": value >= target if op == ">=" else value <= target}
    return figures, ratios, goals


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seconds", type=int, default=5, help="per measurement")
    ap.add_argument("--reactions", type=int, default=3, help="bad-candidate rollouts")
    ap.add_argument("--cpu-requests", type=int, default=3200,
                    help="requests per in-process CPU measurement")
    ap.add_argument("--runtimes", default=",".join(RUNTIMES),
                    help="the models' runtimes, each measured with its own three servers: "
                         "native (scikit-learn), onnx (both versions' ONNX variants)")
    ap.add_argument("--quick", action="store_true", help="one short round, no result file")
    args = ap.parse_args(argv)
    runtimes = [r for r in args.runtimes.split(",") if r]
    if not runtimes or set(runtimes) - set(RUNTIMES):
        ap.error(f"--runtimes: a comma-separated list of {', '.join(RUNTIMES)}")
    if args.quick:
        args.repeats, args.seconds, args.reactions, args.cpu_requests = 1, 2, 1, 640
    wrk = ensure_wrk()
    if wrk is None:
        print("  wrk is not installed and could not be (run `apt-get install -y wrk` as "
              "root); skipping the rollout benchmark")
        return {"skipped": "wrk missing"}
    work = WORK / "rollout"
    shutil.rmtree(work, ignore_errors=True)
    servers, failing, row, fail_ws = prepare(work, runtimes)
    body = work / "body.json"
    body.write_text(json.dumps({"records": [row]}))
    load_before = os.getloadavg()
    try:
        for s in [*servers, failing]:
            start(s)
        for s in servers:
            wait_routing(s, rollout=s.role != "plain")
        wait_routing(failing, rollout=False)
        measure(wrk, servers, body, args.repeats, args.seconds)
        for s in servers:  # quiet while the rest is measured
            stop(s)
        cpu = inprocess(servers, {"records": [row]}, args.repeats, args.cpu_requests)
        reactions = reaction(failing, fail_ws, args.reactions)
    finally:
        for s in [*servers, failing]:
            stop(s)
        fail_ws.close()
    load_after = os.getloadavg()
    shutil.rmtree(work, ignore_errors=True)
    for s in servers:
        for x in s.samples:
            x["duration_s"] = args.seconds
    figures, ratios, goals = summarise(servers, reactions)
    med = statistics.median
    for name, samples in cpu.items():
        figures[f"{name}_inprocess_cpu_us_per_request"] = med(samples)
    for s in servers:
        if s.role != "plain":
            base = cpu[s.name.replace(s.role, "plain", 1)]
            figures[f"{s.name}_inprocess_extra_cpu_us_per_request"] = med(
                a - b for a, b in zip(cpu[s.name], base, strict=True))
    for name, g in goals.items():
        print(f"  goal {name:37s} {g['target']:>8s}  {g['value']:8.2f}  "
              f"{'met' if g['met'] else 'NOT met'}")
    result = {"figures": figures, "ratios": ratios, "goals": goals,
              "repeats": args.repeats, "seconds": args.seconds,
              "samples": {s.name: s.samples for s in servers}, "reactions": reactions,
              "inprocess_cpu_us_per_request": cpu,
              "interval_s": INTERVAL_S, "fail_share": FAIL_SHARE,
              "load_average": {"before": load_before, "after": load_after},
              "cpus": {"os.cpu_count": os.cpu_count(),
                       "available": len(os.sched_getaffinity(0))},
              "load": f"wrk -t1 -c{CONCURRENCY}, single-row JSON POSTs, 127.0.0.1, one "
                      "server process each; reaction: 4 Python threads of random rows",
              "wrk": subprocess.run([wrk, "--version"], capture_output=True,
                                    text=True).stdout.splitlines()[0:1]}
    return finish("rollout", result, quick=args.quick, fmt=lambda k, v: f"{v:>14,.3f}")


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
