"""The Reprise demo: a tracked training run on the embedded SQLite workspace.

Run it with ``make demo``. It creates (or reuses) a workspace in
``examples/.demo-workspace``, trains a small logistic-regression model with
plain numpy on a deterministic synthetic data set, logs parameters, per-epoch
metrics and the fitted weights as artifacts, then shows the run with the CLI
as a user would: ``reprise runs list`` and ``reprise runs show RUN``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

import reprise
from reprise.core.errors import WorkspaceNotFoundError

HERE = Path(__file__).resolve().parent
WORKSPACE = Path(os.environ.get("REPRISE_DEMO_WORKSPACE", HERE / ".demo-workspace"))


def make_data(seed: int, n: int = 2000, d: int = 8) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    true_w = rng.normal(size=d)
    y = (x @ true_w + 0.5 * rng.normal(size=n) > 0).astype(np.float64)
    return x, y


def train(x: np.ndarray, y: np.ndarray, lr: float, epochs: int) -> np.ndarray:
    w = np.zeros(x.shape[1])
    for epoch in range(epochs):
        p = 1.0 / (1.0 + np.exp(-(x @ w)))
        grad = x.T @ (p - y) / len(y)
        w -= lr * grad
        eps = 1e-12
        loss = -np.mean(y * np.log(p + eps) + (1 - y) * np.log(1 - p + eps))
        reprise.log_metrics({"train/loss": float(loss),
                             "train/accuracy": float(np.mean((p > 0.5) == y))}, step=epoch)
    return w


def main() -> None:
    WORKSPACE.mkdir(parents=True, exist_ok=True)
    try:
        ws = reprise.open_workspace(WORKSPACE)
    except WorkspaceNotFoundError:
        ws = reprise.init(WORKSPACE)
    params = {"lr": 0.5, "epochs": 50, "seed": 7}
    with reprise.start_run("demo-logreg", params=params, seed=params["seed"],
                           workspace=ws) as run:
        x, y = make_data(params["seed"])
        split = int(0.8 * len(y))
        w = train(x[:split], y[:split], params["lr"], params["epochs"])
        val_acc = float(np.mean(((x[split:] @ w) > 0) == y[split:]))
        run.log_metric("val/accuracy", val_acc)
        run.log_artifact(w, "model/weights.npy")
        run.log_artifact({"features": x.shape[1], "val_accuracy": val_acc}, "model/card.json")
    print(f"run {run.id} finished: val/accuracy = {val_acc:.3f}\n")
    cli = [sys.executable, "-m", "reprise.cli"]
    env = {**os.environ, "REPRISE_WORKSPACE": str(WORKSPACE)}
    subprocess.run([*cli, "runs", "list", "--limit", "5"], check=True, env=env)
    print()
    subprocess.run([*cli, "runs", "show", run.id], check=True, env=env)


if __name__ == "__main__":
    main()
