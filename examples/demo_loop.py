"""The closed loop demo (``make demo-loop``): drift on live traffic -> an alarm -> a
retraining run on the newest data -> gates against production -> a canary -> promotion,
with the lineage of the new version naming the alarm. Reuses the tabular example.

1. a fresh workspace (a copy of examples/tabular in a temporary folder): ``cancer@1`` is
   the breast-cancer table, ``pipeline.py:tabular`` trains on it, ``cancer:1`` is
   registered and promoted to ``production``;
2. a newer dataset version ``cancer@2`` arrives: the same patients plus a second batch
   measured by a new scanner, whose texture readings run 40 % higher (labelled);
3. ``reprise serve cancer@production --monitor loop.yaml`` serves version 1 and runs the
   trigger loop in its process (``loop.yaml``: input drift -> notify + retrain; the
   webhook is a loopback receiver this script runs and prints);
4. in-distribution traffic: the drift report says no drift, nothing happens;
5. traffic from the new scanner: the drift report flags the texture columns, the loop
   raises an alarm, posts it to the webhook, re-runs the production pipeline from its
   code snapshot on ``cancer@2``, checks ROC AUC no worse than production's on the same
   rows, registers ``cancer:2`` and starts a canary, which the server promotes;
6. ``reprise lineage cancer:2`` goes alarm -> window -> retraining run -> cancer@2 -> code,
   and the audit log shows every step.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TEXTURE = ("mean_texture", "texture_error", "worst_texture")
LOOP_YAML = """\
window: 200                       # judge the newest 200 logged requests
rules:
  - on: [input_drift]
    do: [notify, retrain]
cooldown: {retrain: 1h, notify: 5m}
retrain:
  dataset: latest                 # the newest version of the training dataset
  target: target
  gates: {roc_auc: "no worse than baseline by 0.02"}   # baseline: the production model
  rollout:
    strategy: canary
    steps: [50, 100]
    interval: 2s
    policy: {analysis: {min_requests: 100}}   # as examples/tabular/rollout.yaml
notify:
  url: WEBHOOK
  timeout: 2s
"""


def reprise(root: Path, *args: str, capture: bool = False, show: bool = True) -> str:
    print(f"\n$ reprise {' '.join(args)}", flush=True)
    res = subprocess.run([sys.executable, "-m", "reprise.cli", *args], cwd=root, text=True,
                         capture_output=capture, check=False)
    if res.returncode != 0:
        sys.exit(f"demo-loop: `reprise {' '.join(args)}` exited with {res.returncode}\n"
                 f"{res.stderr if capture else ''}")
    if capture and show:
        print(res.stdout, end="")
    return res.stdout if capture else ""


def tables(root: Path) -> tuple[Any, Any]:
    """``cancer@1`` (the table as exported) and the new scanner's batch."""
    import pandas as pd
    from sklearn.datasets import load_breast_cancer

    frame = load_breast_cancer(as_frame=True).frame
    frame.columns = [c.replace(" ", "_") for c in frame.columns]
    frame.insert(0, "id", range(100_001, 100_001 + len(frame)))
    scanner = frame.copy()
    scanner["id"] += 1_000_000
    for c in TEXTURE:
        scanner[c] = scanner[c] * 1.4
    (root / "data").mkdir(exist_ok=True)
    frame.to_csv(root / "data" / "cancer.csv", index=False)
    pd.concat([frame, scanner]).to_csv(root / "data" / "cancer-2.csv", index=False)
    return frame, scanner


class Webhook:
    """A loopback receiver that prints what the loop posts."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                alarm = body.get("alarm") or {}
                print(f"\n[webhook] {body.get('action')}: alarm {alarm.get('id')} "
                      f"({alarm.get('kind')}): {alarm.get('message')}", flush=True)
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Traffic(threading.Thread):
    """One client posting rows of ``frame`` (features only) until stopped."""

    def __init__(self, url: str, frame: Any) -> None:
        super().__init__(daemon=True)
        self.url = url + "/v1/models/cancer/predict"
        self.rows = frame.drop(columns=["id", "target"]).to_dict(orient="records")
        self.sent = 0
        self.stop = threading.Event()

    def run(self) -> None:
        rnd = random.Random(0)
        while not self.stop.is_set():
            body = json.dumps([rnd.choice(self.rows)]).encode()
            req = urllib.request.Request(self.url, data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=30) as resp:  # noqa: S310
                resp.read()
            self.sent += 1


def drift_report(root: Path) -> None:
    """The live drift report of the newest 200 logged requests."""
    reprise(root, "monitor", "cancer@production", "--window", "200")


def wait_for_version(root: Path, version: int, timeout: float) -> None:
    """Print the loop's and the rollout's audit events as they come, until the alias
    reaches ``version`` (or the retrain or its rollout ends otherwise)."""
    from reprise.tracking import open_workspace

    ws = open_workspace(root)
    seen: set[int] = set()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for e in ws.metadata.list_audit_events():
            if e.seq in seen or not (e.action.startswith(("monitor.", "rollout.", "promote"))):
                continue
            seen.add(e.seq)
            what = e.payload.get("action") or e.payload.get("decision") or ""
            extra = e.payload.get("reason") or e.payload.get("error") or ""
            print(f"[audit] {e.action} {e.subject} {what} {extra}".rstrip(), flush=True)
            if e.action == "rollout.rollback" or (
                    e.action == "monitor.action.failed" and what == "retrain"):
                sys.exit("demo-loop: the loop did its part, and the candidate was stopped "
                         "(above: why; on a busy machine the canary's latency check can "
                         "fail). Nothing was promoted.")
        if ws.metadata.get_aliases("cancer").get("production") == version:
            return
        time.sleep(1)
    sys.exit(f"demo-loop: cancer@production did not reach version {version} in {timeout:g} s")


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="reprise-demo-loop-"))
    for name in ("pipeline.py", "features.py", "models.py", "schema.py"):
        shutil.copy(HERE / "tabular" / name, root / name)
    print(f"demo-loop: working in {root}")
    frame, scanner = tables(root)
    reprise(root, "init", ".")
    reprise(root, "data", "add", "cancer", "data/cancer.csv", "--schema", "schema.py:schema")
    run = json.loads(reprise(root, "run", "pipeline.py:tabular", "--json", capture=True,
                             show=False))
    print(f"run {run['run_id']}: {run['status']}")
    reprise(root, "models", "register", "cancer", "--run", run["run_id"])
    reprise(root, "models", "promote", "cancer", "1", "--alias", "production")
    reprise(root, "data", "add", "cancer", "data/cancer-2.csv")
    hook = Webhook()
    (root / "loop.yaml").write_text(LOOP_YAML.replace("WEBHOOK", hook.url))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    print(f"\n$ reprise serve cancer@production --monitor loop.yaml  (on {url})", flush=True)
    server = subprocess.Popen(
        [sys.executable, "-m", "reprise.cli", "serve", "cancer@production", "--port",
         str(port), "--poll-interval", "0.5", "--monitor", "loop.yaml",
         "--monitor-interval", "2", "--log-sample", "1", "--log-flush-s", "0.5",
         "--log-level", "warning"], cwd=root, env=dict(os.environ))
    try:
        _wait_ready(server, url)
        calm = Traffic(url, frame)
        calm.start()
        while calm.sent < 300:
            time.sleep(0.2)
        calm.stop.set()
        calm.join()
        time.sleep(3)
        drift_report(root)
        print("\n(traffic from the new scanner: texture readings 40 % higher)", flush=True)
        shifted = Traffic(url, scanner)
        shifted.start()
        while shifted.sent < 300:
            time.sleep(0.2)
        drift_report(root)
        wait_for_version(root, 2, timeout=900)
        shifted.stop.set()
        shifted.join()
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
    reprise(root, "lineage", "cancer:2", capture=True)
    reprise(root, "models", "list", capture=True)
    print(f"\ndemo-loop: done; the workspace is {root}")


def _wait_ready(server: subprocess.Popen[bytes], url: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            sys.exit(f"demo-loop: the server exited with {server.returncode}")
        try:
            with urllib.request.urlopen(url + "/readyz", timeout=2) as r:  # noqa: S310
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.3)
    sys.exit("demo-loop: the server was not ready in time")


if __name__ == "__main__":
    main()
