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
   chunks; ``reprise serve cancer@production`` answers a prediction over HTTP (and is
   stopped); the audit log shows who did what, and verifies.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
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


def reprise(*args: str, capture: bool = False, expect: int = 0) -> str:
    cmd = [sys.executable, "-m", "reprise.cli", *args]
    print(f"\n$ reprise {' '.join(args)}", flush=True)
    env = {k: v for k, v in os.environ.items() if k != "REPRISE_WORKSPACE"}
    res = subprocess.run(cmd, cwd=PROJECT, env=env, text=True,
                         stdout=subprocess.PIPE if capture else None)
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
    serve_and_predict()
    reprise("audit", "log")
    reprise("audit", "verify")


def serve_and_predict() -> None:
    """``reprise serve cancer@production`` on a free loopback port, one prediction over
    HTTP with a row of the data, then a clean stop (SIGINT drains and exits)."""
    import csv
    import signal
    import socket
    import time
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    print(f"\n$ reprise serve cancer@production --port {port}   (in the background)", flush=True)
    env = {k: v for k, v in os.environ.items() if k != "REPRISE_WORKSPACE"}
    server = subprocess.Popen([sys.executable, "-m", "reprise.cli", "serve", "cancer@production",
                               "--port", str(port)], cwd=PROJECT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{url}/readyz", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                sys.exit("demo: the model server did not become ready")
            time.sleep(0.3)
        with open(PROJECT / "data" / "cancer.csv") as f:
            row = next(csv.DictReader(f))
        record = {k: float(v) for k, v in row.items() if k not in ("id", "target")}
        body = json.dumps({"records": [record]}).encode()
        print(f"$ curl -X POST {url}/v1/models/cancer/predict -d '{{\"records\": [...]}}'")
        req = urllib.request.Request(f"{url}/v1/models/cancer/predict", data=body,
                                     headers={"content-type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            answer = json.loads(r.read())
        print(json.dumps(answer))
        print(f"(row {row['id']} is labelled {row['target']} in the data)")
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=60)


if __name__ == "__main__":
    main()
