"""The Reprise demo (``make demo``): the tabular pipeline, end to end, on the
embedded SQLite workspace, driven through the CLI as a user would.

1. ``reprise init`` a fresh workspace in examples/tabular;
2. ``reprise data add`` registers the data as ``cancer@1``, validated against its
   pandera schema and profiled; a damaged copy is refused with a report;
3. ``reprise tune`` searches the MLP's learning rate and width on Optuna (each trial
   is a tracked pipeline run; preprocessing is computed once and reused from the
   cache; the Trainer's validations feed the median pruner);
4. ``reprise run pipeline.py:tabular`` with the best params executes every step,
   reading ``cancer@latest`` and splitting it deterministically by id, fitting a
   scikit-learn model (stored with skops) and training the MLP with
   ``reprise.train.Trainer`` (deterministic, early stopping, profiled; stored in
   safetensors), then evaluating both with intervals, slices and quality gates;
5. the same command again reuses every step from the cache;
6. ``reprise verify`` re-executes the first run with the cache off and proves
   every output identical, the trained MLP and the evaluation reports included
   (and checks that its first training steps are deterministic);
7. ``reprise report`` writes the MLP's evaluation report (offline HTML);
8. ``reprise lineage`` shows where the metrics came from, and ``reprise runs
   show`` the recorded run;
9. ``reprise models register`` registers the packaged MLP (with its fitted scaler,
   signature and card) as ``cancer:1``; ``promote`` points ``production`` at it (its
   evaluation gates passed); ``reprise lineage cancer@production`` goes from the
   model back to the dataset version; ``reprise predict`` scores the whole file in
   chunks;
10. deployments: ``cancer:2`` (the pipeline again, with a wider MLP) and ``cancer:3`` (a
    deliberately broken model: ``pipeline.py:broken``, a packaged scikit-learn
    DummyClassifier answering one class for every row) are registered; ``reprise serve
    cancer@production`` answers a prediction over HTTP, then a steady load of real rows
    while ``reprise rollout start`` canaries ``cancer:2`` (25 % -> 50 % -> 100 %, a
    decision every 2 s at most) until the server promotes it automatically, and then
    ``cancer:3`` (refused at first: its gates failed; forced, with a reason), which the
    server rolls back automatically on prediction shift, the alias never moving; ``reprise
    rollout status`` and ``list`` show both, and the audit log shows every decision with
    its reason (who did what), and verifies;
11. optimisation: ``reprise models optimize`` turns the MLP in production (its scaler
    and network in one ONNX graph) into a new version, after proving parity on its
    example rows, the held-out rows its lineage records (the split's test table that
    the evaluation read) and rows drawn from its signature; the report is printed, and
    ``reprise serve cancer:N --runtime onnx`` answers a prediction from ONNX Runtime
    (``production`` does not move).
"""

from __future__ import annotations

import contextlib
import csv
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROJECT = HERE / "tabular"


def export_data() -> Path:
    """The breast-cancer table as a CSV with an id column, as an export would arrive."""
    from sklearn.datasets import load_breast_cancer

    frame = load_breast_cancer(as_frame=True).frame
    frame.columns = [c.replace(" ", "_") for c in frame.columns]
    frame.insert(0, "id", range(100_001, 100_001 + len(frame)))
    out = PROJECT / "data" / "cancer.csv"
    out.parent.mkdir(exist_ok=True)
    frame.to_csv(out, index=False)
    bad = frame.copy()
    bad.loc[7, "mean_radius"] = -3.0
    bad.loc[12, "id"] = bad.loc[11, "id"]
    bad.to_csv(out.with_name("cancer-damaged.csv"), index=False)
    return out


def reprise(*args: str, capture: bool = False, expect: int = 0, echo: bool = True,
            timeout: float | None = None) -> str:
    cmd = [sys.executable, "-m", "reprise.cli", *args]
    if echo:
        print(f"\n$ reprise {' '.join(args)}", flush=True)
    env = {k: v for k, v in os.environ.items() if k != "REPRISE_WORKSPACE"}
    try:
        res = subprocess.run(cmd, cwd=PROJECT, env=env, text=True, timeout=timeout,
                             stdout=subprocess.PIPE if capture else None)
    except subprocess.TimeoutExpired:  # (subprocess.run has killed it)
        sys.exit(f"demo: `reprise {' '.join(args)}` did not finish in {timeout:g} s")
    if res.returncode != expect:
        sys.exit(f"demo: `reprise {' '.join(args)}` exited with {res.returncode}")
    return res.stdout or ""


def main() -> None:
    shutil.rmtree(PROJECT / ".reprise", ignore_errors=True)
    export_data()
    reprise("init", ".")
    reprise("data", "add", "cancer", "data/cancer.csv", "--schema", "schema.py:schema")
    print("\n(the damaged export is refused, and nothing is registered:)")
    reprise("data", "add", "cancer", "data/cancer-damaged.csv", expect=2)
    reprise("data", "show", "cancer@1")
    reprise("tune", "pipeline.py:tabular", "--space", "space.yaml", "--metric",
            "train_mlp/best_val_loss", "--trials", "6", "--pruner", "median", "-p", "C=0.5")
    best = json.loads(reprise("tune", "show", "tabular", "--json", capture=True))["best"]
    tuned = [f"{k}={v}" for k, v in sorted(best["params"].items())]
    print(f"best trial {best['number']}: {', '.join(tuned)}")
    params = ["-p", "C=0.5", *(a for t in tuned for a in ("-p", t))]
    first = json.loads(reprise("run", "pipeline.py:tabular", *params, "--json", capture=True))
    print(f"first run {first['run_id']}: executed {len(first['executed'])} step(s), "
          f"reused {len(first['reused'])}")
    reprise("run", "pipeline.py:tabular", *params, "--progress", "lines")
    reprise("verify", first["run_id"])
    reprise("report", first["run_id"], "--name", "mlp", "-o", "reports/evaluation-mlp.html")
    reprise("lineage", first["run_id"])
    reprise("runs", "show", first["run_id"])
    reprise("models", "register", "cancer", "--run", first["run_id"])
    reprise("models", "promote", "cancer", "1", "--alias", "production")
    reprise("models", "show", "cancer@production")
    reprise("lineage", "cancer@production")
    reprise("predict", "cancer@production", "data/cancer.csv", "-o",
            "reports/predictions.parquet")
    healthy = register_wider(best["params"])
    broken = register_broken()
    deployments(healthy, broken)
    optimized()
    reprise("audit", "log")
    reprise("audit", "verify")


# -- act 10: deployments -----------------------------------------------------------------

MODEL = "cancer"
POLICY = "rollout.yaml"  # the built-in checks, with a minimum sample the demo's load reaches
STEPS = "25,50,100"  # the candidate's share of requests at each canary step, in percent
CLIENTS = 4  # threads of the load that the rollouts decide on
ROLLOUT_TIMEOUT_S = 180.0  # a rollout of three 2-second steps taking longer is stuck


def register_wider(params: dict[str, object]) -> int:
    """``cancer:2``: the pipeline again, with the tuned ``params`` but a wider MLP (only
    training, evaluation and packaging re-run; the data steps and the logistic
    regression come from the cache)."""
    hidden = int(str(params["hidden"]))
    wider = {16: 32, 32: 64}.get(hidden, 32)
    print(f"\n(a second version of the model: the same pipeline with a wider MLP, "
          f"hidden={wider} instead of {hidden})")
    args = [a for k, v in sorted({**params, "C": 0.5, "hidden": wider}.items())
            for a in ("-p", f"{k}={v}")]
    run = json.loads(reprise("run", "pipeline.py:tabular", *args, "--json", capture=True))
    return _register(run["run_id"])


def register_broken() -> int:
    """``cancer:3``: a deliberately broken model (``pipeline.py:broken``: a packaged
    DummyClassifier that answers the most frequent class for every row)."""
    print("\n(a deliberately broken version: a real scikit-learn model, packaged like the "
          "others, that answers 'benign' for every row; its evaluation gates fail)")
    run = json.loads(reprise("run", "pipeline.py:broken", "--json", capture=True))
    return _register(run["run_id"])


def _register(run_id: str) -> int:
    rec = json.loads(reprise("models", "register", MODEL, "--run", run_id, "--json",
                             capture=True))
    print(f"registered {MODEL}:{rec['version']} (run {run_id})")
    return int(rec["version"])


def deployments(healthy: int, broken: int) -> None:
    """Serve ``cancer@production`` and answer one prediction; then, under a steady load, a
    canary of ``healthy`` is promoted and one of ``broken`` is rolled back, both by the
    server's own analysis; the server is stopped whatever happens."""
    with serving() as url:
        predict_one(url)
        print(f"\n(during each rollout below, {CLIENTS} clients post one row of the data at a "
              f"time, as fast as the server answers: the server decides on their requests)")
        canary(url, healthy)
        rollback(url, broken)
    reprise("rollout", "list", MODEL)


def canary(url: str, candidate: int) -> None:
    steps = " -> ".join(f"{w}%" for w in STEPS.split(","))
    print(f"\n(a canary of {MODEL}:{candidate}: it answers {steps} of the requests; each "
          f"step lasts at least 2 s and until every check has {_min_requests()} requests to "
          f"judge; the server analyses, steps up and promotes it on its own)")
    reprise("rollout", "start", MODEL, str(candidate), "--alias", "production",
            "--strategy", "canary", "--steps", STEPS, "--interval", "2s",
            "--policy", POLICY)
    info = follow(url)
    if info["rollout"]["state"] != "promoted":
        sys.exit(f"demo: the canary of the healthy {MODEL}:{candidate} ended "
                 f"{info['rollout']['state']}: {info['rollout']['reason']}")
    reprise("rollout", "status", MODEL)


def rollback(url: str, candidate: int) -> None:
    print(f"\n(now the broken {MODEL}:{candidate}; its evaluation gates failed, so a rollout "
          f"refuses it:)")
    args = ["rollout", "start", MODEL, str(candidate), "--alias", "production", "--strategy",
            "canary", "--steps", STEPS, "--interval", "2s", "--policy", POLICY]
    reprise(*args, expect=2)
    print("\n(forced, with a reason that goes into the audit log: the server's analysis "
          "catches it anyway)")
    reprise(*args, "--force", "--reason", "demo: a deliberately broken version")
    info = follow(url)
    if info["rollout"]["state"] != "rolled_back":
        sys.exit(f"demo: the canary of the broken {MODEL}:{candidate} ended "
                 f"{info['rollout']['state']}, not rolled back")
    reprise("rollout", "status", MODEL)
    print(f"(rolled back: the candidate's weight went to 0 at once, and "
          f"{MODEL}@production never left {info['rollout']['stable']})")


def follow(url: str) -> dict:
    """Put the load on the server at ``url`` and poll ``reprise rollout status --json``
    until the rollout ends, printing each decision as the server takes it (a run of holds
    for the same reason once), then the requests each version answered."""
    with Traffic(url, _rows(), CLIENTS) as traffic:
        info = _follow()
    answered = traffic.counts()
    by_version = ", ".join(f"v{v} {n}" for v, n in sorted(answered.items(), key=str)
                           if v != "failed")
    print(f"requests answered while it ran: {by_version}; failed: "
          f"{answered.get('failed', 0)}")
    return info


def _follow() -> dict:
    start = time.monotonic()
    shown, last = 0, ""
    while True:
        info = json.loads(reprise("rollout", "status", MODEL, "--json", capture=True,
                                  echo=False, timeout=60))
        r = info["rollout"]
        for d in info["decisions"][shown:]:
            reason = d["reason"] or ""
            kind = d["action"] + re.sub(r"[\d.]+", "#", reason)  # "insufficient data: # of #"
            if d["action"] != "rollout.hold" or kind != last:
                weight = "-" if d["weight"] is None else f"{d['weight']:g}%"
                print(f"  {d['time'] - r['created_at']:5.1f} s  "
                      f"{d['action'].removeprefix('rollout.'):<9}{weight:>5}  {reason}",
                      flush=True)
            last = kind
        shown = len(info["decisions"])
        if r["state"] != "running":
            break
        if time.monotonic() - start > ROLLOUT_TIMEOUT_S:
            sys.exit(f"demo: rollout {r['id']} is still running after {ROLLOUT_TIMEOUT_S:g} s "
                     f"(step {r['step'] + 1}, weight {r['weight']:g}%); see `reprise rollout "
                     f"status {MODEL}` in {PROJECT}")
        time.sleep(1)
    return info  # type: ignore[no-any-return]


def _min_requests() -> int:
    import yaml

    doc = yaml.safe_load((PROJECT / POLICY).read_text(encoding="utf-8"))
    return int(doc["analysis"]["min_requests"])


def _rows() -> list[dict[str, float]]:
    """The data's rows as requests (the measurements, without the id and the label)."""
    with open(PROJECT / "data" / "cancer.csv") as f:
        return [{k: float(v) for k, v in row.items() if k not in ("id", "target")}
                for row in csv.DictReader(f)]


# -- act 11: optimisation ----------------------------------------------------------------

def optimized() -> int:
    """The version ``production`` points at, optimised to ONNX (a new version, with its
    parity report); served with ``--runtime onnx``, it answers one prediction. The alias
    stays where it is. Returns the new version."""
    source = json.loads(reprise("models", "show", f"{MODEL}@production", "--json",
                                capture=True, echo=False))["version"]
    print(f"\n(optimisation: {MODEL}@production = {MODEL}:{source}, its scaler and MLP "
          "converted to one ONNX graph and proved to predict the same before it is "
          "registered)")
    out = reprise("models", "optimize", f"{MODEL}:{source}", capture=True)
    print(out, end="")
    found = re.search(rf"registered {MODEL}:(\d+)", out)
    if found is None:
        sys.exit(f"demo: `reprise models optimize` named no new version:\n{out}")
    version = int(found.group(1))
    with serving(f"{MODEL}:{version}", "--runtime", "onnx") as url:
        predict_one(url)
        with urllib.request.urlopen(f"{url}/v2/models/{MODEL}", timeout=10) as r:
            platform = json.loads(r.read())["platform"]
        print(f"$ curl {url}/v2/models/{MODEL}   (the Open Inference Protocol's metadata)")
        print(f"platform: {platform}")
    return version


@contextlib.contextmanager
def serving(ref: str = f"{MODEL}@production", *options: str) -> Iterator[str]:
    """``reprise serve REF`` (default ``cancer@production``) on a free loopback port, in
    the background, following its alias (and rollouts) every half second, logging only
    warnings and errors (the demo prints the decisions); stopped on the way out,
    whatever happened: SIGINT (drain, then exit), SIGKILL if it is still there 30 s later."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = ["serve", ref, *options, "--port", str(port), "--poll-interval", "0.5",
            "--log-level", "warning"]
    print(f"\n$ reprise {' '.join(args)}   (in the background)", flush=True)
    env = {k: v for k, v in os.environ.items() if k != "REPRISE_WORKSPACE"}
    server = subprocess.Popen([sys.executable, "-m", "reprise.cli", *args], cwd=PROJECT,
                              env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(server, url)
        yield url
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            print(f"demo: the server (pid {server.pid}) did not stop in 30 s; killing it",
                  file=sys.stderr)
            server.kill()
            server.wait(timeout=30)


def _wait_ready(server: subprocess.Popen, url: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"{url}/readyz", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        if server.poll() is not None:
            sys.exit(f"demo: the model server exited with {server.returncode}")
        if time.monotonic() > deadline:
            sys.exit(f"demo: the model server was not ready after {timeout:g} s")
        time.sleep(0.3)


def predict_one(url: str) -> None:
    """One prediction over HTTP, with the data's first row."""
    with open(PROJECT / "data" / "cancer.csv") as f:
        row = next(csv.DictReader(f))
    record = {k: float(v) for k, v in row.items() if k not in ("id", "target")}
    body = json.dumps({"records": [record]}).encode()
    print(f"$ curl -X POST {url}/v1/models/{MODEL}/predict -d '{{\"records\": [...]}}'")
    req = urllib.request.Request(f"{url}/v1/models/{MODEL}/predict", data=body,
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        answer = json.loads(r.read())
    print(json.dumps(answer))
    print(f"(row {row['id']} is labelled {row['target']} in the data)")


class Traffic:
    """A steady load on the server: ``threads`` clients, each posting one random row of
    the data at a time over a kept-alive loopback connection, until stopped; answers are
    counted by the version that gave them (the ``x-reprise-model-version`` header)."""

    def __init__(self, url: str, rows: list[dict[str, float]], threads: int = 4) -> None:
        self.host, _, port = url.removeprefix("http://").partition(":")
        self.port, self.rows, self.threads = int(port), rows, threads
        self._counts: Counter[int | str] = Counter()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._workers: list[threading.Thread] = []

    def __enter__(self) -> Traffic:
        for seed in range(self.threads):
            worker = threading.Thread(target=self._run, args=(seed,), daemon=True)
            worker.start()
            self._workers.append(worker)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for worker in self._workers:
            worker.join(timeout=15)

    def counts(self) -> Counter[int | str]:
        with self._lock:
            return Counter(self._counts)

    def _run(self, seed: int) -> None:
        pick = random.Random(seed)
        path = f"/v1/models/{MODEL}/predict"
        conn = http.client.HTTPConnection(self.host, self.port, timeout=10)
        while not self._stop.is_set():
            body = json.dumps({"records": [pick.choice(self.rows)]})
            try:
                conn.request("POST", path, body, {"content-type": "application/json"})
                r = conn.getresponse()
                r.read()
                version = r.getheader("x-reprise-model-version")
                ok = r.status == 200 and version is not None
                outcome: int | str = int(version) if ok and version else "failed"
            except (OSError, http.client.HTTPException):
                outcome = "failed"
                conn.close()  # reconnects on the next request
                time.sleep(0.05)
            with self._lock:
                self._counts[outcome] += 1
        conn.close()


if __name__ == "__main__":
    main()
