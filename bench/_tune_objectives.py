"""Objectives for ``bench_tune.py``, in a module of their own so that Reprise's worker
processes (spawned, ``workers > 1``) can import them by name: they get the parent's
``sys.path``, on which ``bench/run.py`` (or running ``bench/bench_tune.py``) puts ``bench/``.

One core per trial in (2): the benchmark sets ``OMP_NUM_THREADS`` and friends to 1 in its
environment before it starts workers (spawned, they inherit it before they import numpy) and
limits its own process with threadpoolctl; :class:`CpuObjective` fails a trial whose process
runs more than one BLAS thread. Nothing here changes the environment at import.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

EXAMPLE_MODELS = Path(__file__).resolve().parent.parent / "examples" / "tabular" / "models.py"

# -- (1) trivial ---------------------------------------------------------------------------------


def quadratic(params: dict[str, Any]) -> float:
    """``(x - 2) ** 2``: a trial costs nothing, so what is timed is the tool's own work."""
    return (params["x"] - 2.0) ** 2


# -- (2) CPU-bound, one core per trial -----------------------------------------------------------


class CpuObjective:
    """A CPU-bound trial of a fixed cost (~0.5 s here at the default sizes), whatever the
    params, so one and two workers do the same work whatever the sampler proposes.

    ``python``: a pure-Python logistic-map loop (holds the GIL). ``numpy``: matrix
    products and tanh on a fixed 160x160 matrix (BLAS releases the GIL). An instance is
    picklable (its sizes travel with it to the worker processes). A process whose BLAS
    runs more than one thread fails the trial: each trial must use one core.
    """

    def __init__(self, flavour: str, size: int) -> None:
        if flavour not in ("python", "numpy"):
            raise ValueError(f"unknown flavour {flavour!r}")
        self.flavour, self.size = flavour, size
        self.__name__ = f"cpu_{flavour}"  # the study's default name

    def __call__(self, params: dict[str, Any]) -> float:
        x = params["x"]
        if self.flavour == "python":
            s, acc = 0.5, 0.0
            for _ in range(self.size):
                s = 3.7 * s * (1.0 - s)
                acc += s
            return (x - 2.0) ** 2 + 1e-12 * acc
        import numpy as np

        _check_one_blas_thread()
        a = np.random.default_rng(0).standard_normal((NP_SIZE, NP_SIZE)) / 13.0
        for _ in range(self.size):
            a = np.tanh(a @ a)
        return (x - 2.0) ** 2 + 1e-12 * float(a.sum())


PY_ITERATIONS = 8_000_000  # ~0.5 s of pure Python on the 2-core development machine
NP_SIZE, NP_ITERATIONS = 160, 2_200  # ~0.5 s of single-threaded BLAS there
_blas_checked = False


def blas_threads() -> int | None:
    """Threads of the loaded BLAS in this process (None when none is loaded)."""
    from threadpoolctl import threadpool_info

    counts = [int(p["num_threads"]) for p in threadpool_info() if p.get("user_api") == "blas"]
    return max(counts) if counts else None


def _check_one_blas_thread() -> None:
    global _blas_checked
    if not _blas_checked:
        threads = blas_threads()
        if threads is not None and threads > 1:
            raise RuntimeError(f"BLAS runs {threads} threads in process {os.getpid()}; the "
                               "benchmark wants one core per trial")
        _blas_checked = True


# -- (3) the demo's MLP, trained with reprise.train.Trainer -------------------------------------


def example_mlp() -> Any:
    """The demo's MLP builder from ``examples/tabular/models.py``, loaded from its file
    under a name that cannot clash with another ``models`` module: ``make_mlp`` (or the
    older ``MLP`` class), either called as ``(n_features, hidden, dropout)``."""
    name = "reprise_bench_tabular_models"
    module = sys.modules.get(name)
    if module is None:
        spec = importlib.util.spec_from_file_location(name, EXAMPLE_MODELS)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return getattr(module, "make_mlp", None) or module.MLP


def breast_cancer(split_seed: int = 0) -> dict[str, Any]:
    """scikit-learn's bundled breast-cancer data: a fixed stratified 80/20 split,
    standardised with the training rows' statistics, as float32/int64 tensors."""
    import torch
    from sklearn.datasets import load_breast_cancer
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler

    x, y = load_breast_cancer(return_X_y=True)
    x_tr, x_va, y_tr, y_va = train_test_split(x, y, test_size=0.2, stratify=y,
                                              random_state=split_seed)
    scaler = StandardScaler().fit(x_tr)
    return {"x_train": torch.tensor(scaler.transform(x_tr), dtype=torch.float32),
            "y_train": torch.tensor(y_tr, dtype=torch.int64),
            "x_val": torch.tensor(scaler.transform(x_va), dtype=torch.float32),
            "y_val": torch.tensor(y_va, dtype=torch.int64)}


def _accuracy(out: Any, target: Any) -> Any:
    return (out.argmax(dim=1) == target).float().mean()


class MLPObjective:
    """``params -> final validation loss`` of the demo's MLP (30 -> hidden -> hidden -> 2,
    ReLU, dropout) trained for
    ``epochs`` epochs with AdamW(lr) by ``reprise.train.Trainer`` (validation every epoch,
    reported to the trial, which the pruner may stop).

    Runs in the tuner's process (``workers=1``), so it keeps its books here: the epochs
    each trial trained (counted by a callback at every validation, pruned trials
    included) and the validation accuracy of every finished trial, keyed by trial order.
    """

    def __init__(self, epochs: int, seed: int, batch_size: int = 32, dropout: float = 0.1,
                 weight_decay: float = 0.01) -> None:
        self.epochs, self.seed, self.batch_size = epochs, seed, batch_size
        self.dropout, self.weight_decay = dropout, weight_decay
        self.__name__ = "mlp_breast_cancer"
        self.data = breast_cancer()
        n = len(self.data["y_train"])
        self.steps_per_epoch = -(-n // batch_size)
        self.log: list[dict[str, Any]] = []  # one entry per trial, in the order they ran

    def __call__(self, params: dict[str, Any]) -> float:
        import torch
        from torch.utils.data import DataLoader, TensorDataset

        from reprise.train import Callback, Trainer

        entry: dict[str, Any] = {"params": dict(params), "epochs": 0, "state": "pruned"}
        self.log.append(entry)

        class CountEpochs(Callback):
            def on_validation_end(self, trainer: Any, metrics: dict[str, float]) -> None:
                entry["epochs"] += 1
                entry.setdefault("first_val_loss", float(metrics["val_loss"]))

        d = self.data
        torch.manual_seed(self.seed)  # the same init for the same params, whatever the trial
        model = example_mlp()(d["x_train"].shape[1], int(params["hidden"]), self.dropout)
        lr, wd = float(params["lr"]), self.weight_decay
        train = DataLoader(TensorDataset(d["x_train"], d["y_train"]),
                           batch_size=self.batch_size, shuffle=True)
        val = DataLoader(TensorDataset(d["x_val"], d["y_val"]), batch_size=256)
        trainer = Trainer(model, lambda p: torch.optim.AdamW(p, lr=lr, weight_decay=wd),
                          loss=torch.nn.functional.cross_entropy, metrics={"val_acc": _accuracy},
                          max_epochs=self.epochs, deterministic=True, seed=self.seed,
                          device="cpu", callbacks=[CountEpochs()])
        trainer.fit(train, val)  # raises TrialPruned when the pruner stops the trial
        last = trainer.validations[-1]
        entry.update(state="complete", val_loss=float(last["val_loss"]),
                     val_acc=float(last["val_acc"]))
        return float(last["val_loss"])
