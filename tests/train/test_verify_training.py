"""`reprise verify` on a pipeline with a training step: the outputs (a torch module in
safetensors) are identical, and the first training steps are checked for determinism;
a training step that is not deterministic is named with the step and parameter."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from tests.pipeline.test_pipelines import cli

FLOW = '''
import os
import torch
from torch.utils.data import DataLoader, TensorDataset

import reprise
from reprise import step
from reprise.train import Trainer


class Net(torch.nn.Module):
    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.width = width
        self.body = torch.nn.Sequential(torch.nn.Linear(4, width), torch.nn.ReLU(),
                                        torch.nn.Dropout(0.1), torch.nn.Linear(width, 2))

    def forward(self, x):
        return self.body(x)


@step
def train(noisy: bool) -> torch.nn.Module:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(96, 4, generator=g)
    y = (x[:, 0] > 0).long()
    model = Net()

    def training_step(m, batch):
        xb, yb = batch
        if noisy:  # an unseeded source of randomness: not reproducible
            xb = xb + torch.from_numpy(
                __import__("numpy").frombuffer(os.urandom(xb.numel() * 4), dtype="uint32")
                .astype("float32").reshape(xb.shape) / 2**32)
        return torch.nn.functional.cross_entropy(m(xb), yb)

    Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), training_step=training_step,
            max_epochs=2, deterministic=True, seed=0, device="cpu",
            ).fit(DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True))
    return model


@reprise.pipeline
def flow(noisy: bool = False):
    return train(noisy)
'''


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    root.mkdir()
    (root / "flow.py").write_text(textwrap.dedent(FLOW))
    cli(root, "init", ".")
    return root


def test_verify_proves_a_training_step_identical_and_deterministic(project: Path) -> None:
    run = json.loads(cli(project, "run", "flow.py:flow", "--json").stdout)
    res = cli(project, "verify", run["run_id"], "--json")
    report = json.loads(res.stdout)
    assert report["ok"], report
    (verdict,) = report["steps"]
    assert verdict["status"] == "identical"
    (check,) = verdict["determinism"]
    assert check["deterministic"] and check["steps"] == 4 and check["step_name"] == "train"
    text = cli(project, "verify", run["run_id"]).stdout
    assert "training in train: deterministic over 4 optimizer step(s)" in " ".join(text.split())


def test_verify_names_the_step_and_parameter_where_training_diverges(project: Path) -> None:
    run = json.loads(cli(project, "run", "flow.py:flow", "-p", "noisy=true", "--json").stdout)
    res = cli(project, "verify", run["run_id"], "--json", check=False)
    assert res.returncode == 1
    (verdict,) = json.loads(res.stdout)["steps"]
    assert verdict["status"] == "differs"
    (check,) = verdict["determinism"]
    assert not check["deterministic"]
    assert check["first_divergent_step"] == 1
    assert check["parameters"][0] == "body.0.weight"
    text = " ".join(cli(project, "verify", run["run_id"], check=False).stdout.split())
    assert "training in train is not deterministic" in text
    assert "optimizer step 1, parameter body.0.weight" in text
