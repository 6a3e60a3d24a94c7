"""Cold start of a model server: seconds from launching the process to its readiness probe
answering 200, for ``reprise serve`` on a scikit-learn package (the LogisticRegression of
``bench_serve.py``) and on a torch package (an MLP behind a fitted StandardScaler, as in
the demo), beside a plain FastAPI + uvicorn app that loads the same scikit-learn model
from a ``.skops`` file with ``skops.io`` (the peer) and a FastAPI app with no model (the
floor).

Every server is a fresh process on 127.0.0.1 (bytecode caches warm: one unmeasured start
each first); the probe (``/v2/health/ready`` for Reprise, ``/ready`` for the others) is
polled every 10 ms; the servers take turns, the order rotated every round; figures are
medians. Each server's prediction for one row is compared with the model's own after its
timed start. Packages are built and registered in a temporary workspace.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from _common import WORK, finish, python

HERE = Path(__file__).resolve().parent
GOALS = {"reprise_sklearn_s": 3.0, "reprise_torch_s": 4.0}  # from the issue, measured only


@dataclass
class Case:
    name: str
    argv: list[str]
    ready: str  # readiness path
    predict: str  # prediction path, checked after the timed start
    cwd: Path
    env: dict[str, str] = field(default_factory=dict)
    samples: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)  # CPU seconds the server used until ready


def prepare(work: Path) -> tuple[list[Case], dict[str, float], int]:
    """Register both packages, save the peer's ``.skops`` file; the servers to time."""
    import skops.io as sio
    import torch
    from sklearn.preprocessing import StandardScaler

    import reprise
    from _serve_peers import make_model
    from reprise.registry import package_model, promote, register_package

    frame, model = make_model()
    row = {k: float(v) for k, v in frame.iloc[7].to_dict().items()}
    expected = int(model.predict(frame.iloc[[7]].to_numpy())[0])
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(frame.shape[1], 64), torch.nn.ReLU(),
                              torch.nn.Linear(64, 2))
    packages = {"lr": package_model(model, sample=frame),
                "mlp": package_model(net, sample=frame, target=(frame["f0"] > 0).astype(int),
                                     preprocessing=StandardScaler().fit(frame))}
    for name, package in packages.items():
        ws = reprise.init(work / name)
        version = register_package(name, package, workspace=ws).version
        promote(name, version, "production", workspace=ws, force=True, reason="benchmark")
        ws.close()
    sio.dump(model, work / "lr.skops")
    serve = [python(), "-m", "reprise.cli", "serve", "--log-level", "warning"]
    uvicorn = [python(), "-m", "uvicorn", "--factory", "--no-access-log", "--log-level",
               "warning"]
    cases = [
        Case("reprise_sklearn", [*serve, "lr@production"], "/v2/health/ready",
             "/v1/models/lr/predict", work / "lr"),
        Case("reprise_torch", [*serve, "mlp@production"], "/v2/health/ready",
             "/v1/models/mlp/predict", work / "mlp"),
        Case("fastapi_skops", [*uvicorn, "_serve_peers:create_skops_app"], "/ready",
             "/predict", HERE, {"REPRISE_BENCH_SKOPS": str(work / "lr.skops")}),
        Case("fastapi_floor", [*uvicorn, "_serve_peers:create_hello_app"], "/ready", "",
             HERE),
    ]
    return cases, row, expected


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux ``/proc``; NaN elsewhere):
    less sensitive than wall time to what else the machine runs."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_to_ready(case: Case, timeout: float = 120) -> tuple[subprocess.Popen[bytes], int,
                                                               float]:
    """Launch ``case``; return the process, its port and the seconds until ready (its CPU
    seconds until then go to ``case.cpu``)."""
    port = free_port()
    env = {k: v for k, v in os.environ.items()
           if k not in ("REPRISE_SERVE_TOKEN", "PYTHONDONTWRITEBYTECODE")}
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
    env.update(case.env)
    url = f"http://127.0.0.1:{port}{case.ready}"
    with httpx.Client(timeout=2) as client:
        t0 = time.perf_counter()
        proc = subprocess.Popen([*case.argv, "--port", str(port)], cwd=case.cwd, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        while True:
            try:
                if client.get(url).status_code == 200:
                    seconds = time.perf_counter() - t0
                    case.cpu.append(cpu_seconds(proc.pid))
                    return proc, port, seconds
            except httpx.TransportError:
                pass
            if proc.poll() is not None:
                raise RuntimeError(f"{case.name} exited with {proc.returncode}")
            if time.perf_counter() - t0 > timeout:
                stop(proc)
                raise RuntimeError(f"{case.name} was not ready after {timeout:.0f} s")
            time.sleep(0.01)


def check(case: Case, port: int, row: dict[str, float], expected: int) -> None:
    """The server answers the benchmark row (with the model's own label, for scikit-learn)."""
    if not case.predict:
        return
    r = httpx.post(f"http://127.0.0.1:{port}{case.predict}", json={"records": [row]},
                   timeout=10)
    r.raise_for_status()
    got = [p["prediction"] if isinstance(p, dict) else p for p in r.json()["predictions"]]
    if "torch" not in case.name and got != [expected]:
        raise RuntimeError(f"{case.name} predicted {got}, the model {[expected]}")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def measure(cases: list[Case], repeats: int, row: dict[str, float], expected: int) -> None:
    for case in cases:  # warm the bytecode caches; not measured
        proc, port, _ = start_to_ready(case)
        check(case, port, row, expected)
        stop(proc)
        case.cpu.clear()
    for r in range(repeats):
        for case in cases[r % len(cases):] + cases[:r % len(cases)]:
            proc, port, seconds = start_to_ready(case)
            try:
                check(case, port, row, expected)
            finally:
                stop(proc)
            case.samples.append(seconds)
            print(f"  round {r + 1} {case.name:16s} {seconds:6.2f} s  "
                  f"(CPU {case.cpu[-1]:5.2f} s)")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="one round, no result file")
    args = ap.parse_args(argv)
    if args.quick:
        args.repeats = 1
    work = WORK / "coldstart"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        cases, row, expected = prepare(work)
        measure(cases, args.repeats, row, expected)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    f = {f"{c.name}_s": statistics.median(c.samples) for c in cases}
    f.update({f"{c.name}_cpu_s": statistics.median(c.cpu) for c in cases})
    ratios = {"reprise_sklearn_vs_fastapi_skops": f["reprise_sklearn_s"] / f["fastapi_skops_s"],
              "reprise_torch_vs_fastapi_skops": f["reprise_torch_s"] / f["fastapi_skops_s"],
              "reprise_sklearn_vs_floor": f["reprise_sklearn_s"] / f["fastapi_floor_s"]}
    goals = {k: {"target": f"<= {v} s", "value": f[k], "met": f[k] <= v}
             for k, v in GOALS.items()}
    for name, g in goals.items():
        print(f"  goal {name:20s} {g['target']:>8s}  {g['value']:6.2f}  "
              f"{'met' if g['met'] else 'NOT met'}")
    load = os.getloadavg()
    result = {"figures": f, "ratios": ratios, "goals": goals, "repeats": args.repeats,
              "samples": {c.name: c.samples for c in cases},
              "cpu_samples": {c.name: c.cpu for c in cases},
              "load_average_after": [round(x, 2) for x in load],
              "measure": "launch to first 200 from the readiness probe, fresh process, "
                         "127.0.0.1, probe polled every 10 ms",
              "peer": "FastAPI + uvicorn loading the same LogisticRegression with "
                      "skops.io.load(trusted=get_untrusted_types(...)); floor: FastAPI "
                      "app with no model"}
    return finish("coldstart", result, quick=args.quick, fmt=lambda k, v: f"{v:>11.2f} s")


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
